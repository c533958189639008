package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// With the scenario's default channel names every broker has a probe in
// each of the 128 partitions, under both engines' mappings, and each
// probe is the first channel of its partition.
func TestProbeChannelsCoverEveryPartition(t *testing.T) {
	for _, engine := range []string{"shardcast-cluster", "centrifuge-sharded"} {
		partition, err := fleetPartitioner(engine)
		require.NoError(t, err)
		names := channelNames("fl:"+engine+":7:", 10000)
		probes := probeChannels(names, partition)
		assert.Len(t, probes, 128, engine)
		first := map[int]string{}
		for _, ch := range names {
			p := partition(ch)
			assert.True(t, p >= 0 && p < 128, "%s: partition %d", engine, p)
			if _, ok := first[p]; !ok {
				first[p] = ch
			}
		}
		for _, ch := range probes {
			assert.Equal(t, first[partition(ch)], ch, engine)
		}
	}
	_, err := fleetPartitioner("go-redis-cluster")
	assert.Error(t, err)
}

// The jump hash spreads keys over every bucket and keeps most keys in
// place when a bucket is added, which is what makes it that algorithm.
func TestJumpHash(t *testing.T) {
	moved := 0
	seen := map[int]bool{}
	for k := uint64(0); k < 10000; k++ {
		a, b := jumpHash(k*0x9e3779b97f4a7c15, 128), jumpHash(k*0x9e3779b97f4a7c15, 129)
		seen[a] = true
		if a != b {
			assert.Equal(t, 128, b)
			moved++
		}
	}
	assert.Len(t, seen, 128)
	assert.Less(t, moved, 200) // about 10000/129
	assert.Equal(t, 0, jumpHash(12345, 1))
}

func TestFleetSizesTakeOneChannelCountOrOnePerSize(t *testing.T) {
	defer func(b, c string) { cfg.fleetBrokers, cfg.fleetChannels = b, c }(cfg.fleetBrokers, cfg.fleetChannels)
	cfg.fleetBrokers, cfg.fleetChannels = "50,200", "10000,2500"
	sizes, chans, err := fleetSizes()
	require.NoError(t, err)
	assert.Equal(t, []int{50, 200}, sizes)
	assert.Equal(t, []int{10000, 2500}, chans)
	cfg.fleetChannels = "10000"
	_, chans, err = fleetSizes()
	require.NoError(t, err)
	assert.Equal(t, []int{10000, 10000}, chans)
	for _, bad := range [][2]string{{"50,200", "1,2,3"}, {"", "10"}, {"50,x", "10"}, {"50", "0"}} {
		cfg.fleetBrokers, cfg.fleetChannels = bad[0], bad[1]
		_, _, err = fleetSizes()
		assert.Error(t, err, bad)
	}
}

// Every size runs for shardcast, Centrifuge only at its own size, and the
// like-for-like shardcast row at that size comes just before it.
func TestFleetRunsEverySizeThenTheLikeForLikeRow(t *testing.T) {
	defer func(n int) { cfg.fleetCentBrokers = n }(cfg.fleetCentBrokers)
	cfg.fleetCentBrokers = 20
	got := fleetRuns([]string{"shardcast-cluster", "centrifuge-sharded"}, []int{50, 200}, []int{10000, 2500})
	assert.Equal(t, []fleetSpec{{"shardcast-cluster", 50, 10000}, {"shardcast-cluster", 200, 2500},
		{"shardcast-cluster", 20, 10000}, {"centrifuge-sharded", 20, 10000}}, got)
	// Centrifuge's size among the sizes: no extra row, that size's channels.
	got = fleetRuns([]string{"shardcast-cluster", "centrifuge-sharded"}, []int{20, 200}, []int{8000, 2500})
	assert.Equal(t, []fleetSpec{{"shardcast-cluster", 20, 8000}, {"shardcast-cluster", 200, 2500}, {"centrifuge-sharded", 20, 8000}}, got)
	got = fleetRuns([]string{"shardcast-cluster"}, []int{50, 200}, []int{10000, 2500})
	assert.Equal(t, []fleetSpec{{"shardcast-cluster", 50, 10000}, {"shardcast-cluster", 200, 2500}}, got)
}

// The targets judge the largest fleet and name the others beside it; the
// connections target holds only if every size kept one per master.
func TestFleetTargetsJudgeTheLargestSize(t *testing.T) {
	servers := []string{"a:1", "b:2", "c:3"}
	each := func(n int) map[string]int { return map[string]int{"a:1": n, "b:2": n, "c:3": n} }
	results := []fleetResult{
		{Engine: "shardcast-cluster", Brokers: 50, Channels: 10000, RecoverSecs: 1.9, SubConns: each(50), SubConnsAfter: each(50)},
		{Engine: "shardcast-cluster", Brokers: 200, Channels: 2500, RecoverSecs: 1.5, SubConns: each(200), SubConnsAfter: each(200), ClientCPUms: 1200, RedisCPUms: 1500},
		{Engine: "shardcast-cluster", Brokers: 20, Channels: 10000, RecoverSecs: 0.5, SubConns: each(20), SubConnsAfter: each(21)},
		{Engine: "centrifuge-sharded", Brokers: 20, Channels: 10000, RecoverSecs: 30},
	}
	got := fleetTargets(results, servers, []int{50, 200}, 2)
	require.Len(t, got, 2)
	assert.Equal(t, "fleet: every channel of all 200 brokers delivering again within 2 s of CLIENT KILL TYPE pubsub", got[0].Goal)
	assert.Equal(t, "1.500s (200 × 2500 channels); its CPU (client 1.20s, Redis 1.50s) alone keeps this machine's 2 cores busy 1.35s; 50 × 10000: 1.900s", got[0].Got)
	assert.Equal(t, "met", got[0].Met)
	assert.Equal(t, "50 / 50 / 50 before, 50 / 50 / 50 after, for 50 brokers; 200 / 200 / 200 before, 200 / 200 / 200 after, for 200 brokers", got[1].Got)
	assert.Equal(t, "met", got[1].Met) // the like-for-like row at 20 is not judged
	results[1].SubConnsAfter = map[string]int{"a:1": 200, "b:2": 399, "c:3": 200}
	results[1].RecoverSecs = 2.5
	results[1].ClientCPUms, results[1].RedisCPUms = 0, 0 // not measured: no bound given
	got = fleetTargets(results, servers, []int{50, 200}, 2)
	assert.Equal(t, "2.500s (200 × 2500 channels); 50 × 10000: 1.900s", got[0].Got)
	assert.Equal(t, "not met", got[0].Met)
	assert.Equal(t, "not met", got[1].Met)
}

// -update finds the fleet section under the heading of another run's
// sizes, and replaces the fleet rows of the Targets table in place.
func TestFleetUpdateReplacesSectionAndTargetRows(t *testing.T) {
	doc := "# R\n\n## Targets\n\n| target | measured | status |\n|---|---|---|\n| a: x | 1 | met |\n| fleet: old one | 2 | met |\n" +
		"| fleet: old two | 3 | met |\n| b: y | 4 | not met |\n\nnotes\n\n## Fleet reconnect storm (50 brokers)\n\nold\n\n## Fan-out (30)\n\nf\n"
	doc = spliceSection(doc, "Fleet reconnect storm (50, 200 brokers)", "## Fleet reconnect storm (50, 200 brokers)\n\nnew\n\n")
	assert.Contains(t, doc, "## Fleet reconnect storm (50, 200 brokers)\n\nnew\n\n## Fan-out (30)\n")
	assert.NotContains(t, doc, "old\n")
	doc = replaceTargets(doc, "fleet: ", []target{{"fleet: new", "5", "met"}}, " (rerun)")
	// The other rows stay as they were; the new one is padded to the header.
	assert.Contains(t, doc, "|---|---|---|\n| a: x | 1 | met |\n| fleet: new | 5 (rerun) | met    |\n| b: y | 4 | not met |\n\nnotes\n")
	assert.NotContains(t, doc, "old one")
	// A heading that only starts like the title is still another section.
	assert.Equal(t, "## Fleet reconnect storms (5)\n\nx\n\n## Fleet reconnect storm (1)\n\ny\n",
		spliceSection("## Fleet reconnect storms (5)\n\nx\n", "Fleet reconnect storm (1)", "## Fleet reconnect storm (1)\n\ny\n"))
}

// A size with fewer channels per broker says why, from the run's own
// CPU per channel: here Redis alone would need more than 2 s.
func TestFleetShrinkNoteSaysWhy(t *testing.T) {
	results := []fleetResult{
		{Engine: "shardcast-cluster", Brokers: 50, Channels: 10000, RedisCPUms: 1500, ClientCPUms: 700, ProbeCPUms: 100, HeapBytes: 270 << 20},
		{Engine: "shardcast-cluster", Brokers: 200, Channels: 2500, HeapBytes: 900 << 20},
	}
	note := fleetShrinkNote(results, 3)
	assert.Contains(t, note, "At 200 brokers each broker holds 2500 channels, not 10000.")
	assert.Contains(t, note, "cost Redis 3.0 µs and the client 1.2 µs of CPU per channel")
	assert.Contains(t, note, "2000000 channels would need 6.0 s of Redis CPU (2.0 s on each master")
	assert.Contains(t, note, "as many channels as the 50-broker one, over 4× its connections.")
	assert.Empty(t, fleetShrinkNote(results[:1], 3))
}

// The largest fleet's row says who set the pace.
func TestFleetPaceNoteNamesWhoWasBusy(t *testing.T) {
	defer func(p int) { clientProcs = p }(clientProcs)
	clientProcs = 1
	r := fleetResult{Engine: "shardcast-cluster", Brokers: 200, Channels: 2500, RecoverSecs: 1.6, ClientCPUms: 1500, ProbeCPUms: 200,
		ClientWaitms: 160, MasterCPUms: map[string]float64{"a:1": 400, "b:2": 450}}
	note := fleetPaceNote([]fleetResult{r}, []int{50, 200})
	assert.Contains(t, note, "ran 94% of the storm and waited for a core 10% of it (160 ms in the run queue), the busiest master ran 28%: "+
		"the client, every broker's recovery on one core, set the pace. A fleet on hosts of its own spends 7.5 ms of CPU per broker")
	r.ClientCPUms, r.ClientWaitms = 900, 700 // 56% + 44%: runnable the whole storm
	assert.Contains(t, fleetPaceNote([]fleetResult{r}, []int{200}), "set the pace, slowed by the other work that shared the machine's cores.")
	r.ClientCPUms, r.MasterCPUms["b:2"] = 500, 1500
	assert.Contains(t, fleetPaceNote([]fleetResult{r}, []int{200}), "Redis set the pace.")
	assert.Empty(t, fleetPaceNote([]fleetResult{r}, []int{300}))
}

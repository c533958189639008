package sharded

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// relayoutHeartbeat paces brokers and coordinator in the re-layout tests.
const relayoutHeartbeat = 50 * time.Millisecond

// seqChecker is a Handler that checks, per channel and publisher, that
// sequence numbers arrive once and in order.
type seqChecker struct {
	mu                      sync.Mutex
	last                    map[string]int // channel + "|" + publisher → last seq
	first                   map[string]int // and the first
	got                     map[string]int // messages taken per channel|publisher
	received, dup, reorders int
}

func newSeqChecker() *seqChecker {
	return &seqChecker{last: map[string]int{}, first: map[string]int{}, got: map[string]int{}}
}

func (c *seqChecker) handle(m shardcast.Message) {
	pub, seqs, ok := strings.Cut(string(m.Payload), ":")
	if !ok {
		return
	}
	seq, _ := strconv.Atoi(seqs)
	k := m.Channel + "|" + pub
	c.mu.Lock()
	defer c.mu.Unlock()
	c.received++
	last, seen := c.last[k]
	switch {
	case seen && seq == last:
		c.dup++
		return
	case seen && seq < last:
		c.reorders++
		return
	}
	if !seen {
		c.first[k] = seq
	}
	c.last[k] = seq
	c.got[k]++
}

// publisherLoad publishes to every channel in turn, numbering each
// channel's messages, until stopped; sent counts the accepted ones.
type publisherLoad struct {
	name string
	sent map[string]int
	mu   sync.Mutex
	errs atomic.Int64
}

func (p *publisherLoad) run(ctx context.Context, b *Broker, channels []string, stop <-chan struct{}) {
	seq := make(map[string]int)
	for {
		for _, ch := range channels {
			select {
			case <-stop:
				return
			default:
			}
			seq[ch]++
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := b.Publish(pctx, ch, []byte(p.name+":"+strconv.Itoa(seq[ch])))
			cancel()
			if err != nil {
				p.errs.Add(1)
				continue
			}
			p.mu.Lock()
			p.sent[ch+"|"+p.name]++
			p.mu.Unlock()
		}
	}
}

// relayoutFleet is brokers that subscribe every channel and publish to
// all of them while a re-layout runs.
type relayoutFleet struct {
	t        *testing.T
	channels []string
	brokers  []*Broker
	checkers []*seqChecker
	events   []*events
	pubs     []*publisherLoad
	late     []bool          // the broker subscribed after publishing began
	dead     map[string]bool // publishers closed mid-way: not counted
	started  bool
	stop     chan struct{}
	wg       sync.WaitGroup
}

func newRelayoutFleet(t *testing.T, n int, addrs []string, channels []string) *relayoutFleet {
	f := &relayoutFleet{t: t, channels: channels, stop: make(chan struct{}), dead: map[string]bool{}}
	for range n {
		f.add(addrs)
	}
	f.started = true
	for i := range f.brokers {
		f.startPublisher(i)
	}
	return f
}

func (f *relayoutFleet) startPublisher(i int) {
	p, b := f.pubs[i], f.brokers[i]
	f.wg.Go(func() { p.run(context.Background(), b, f.channels, f.stop) })
}

// add starts one more broker (subscribing every channel) and its
// publisher.
func (f *relayoutFleet) add(addrs []string) *Broker {
	t := f.t
	chk, ev := newSeqChecker(), &events{}
	b := newBroker(t, Config{Addrs: addrs,
		Options:   shardcast.Options{Handler: chk.handle, OnEvent: ev.Add, QueueSize: 1 << 16},
		Agreement: shardcast.Agreement{Heartbeat: relayoutHeartbeat}})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	require.NoError(t, b.Subscribe(ctx, f.channels...))
	p := &publisherLoad{name: fmt.Sprintf("p%d", len(f.pubs)), sent: map[string]int{}}
	f.brokers, f.checkers, f.events, f.pubs = append(f.brokers, b), append(f.checkers, chk), append(f.events, ev), append(f.pubs, p)
	f.late = append(f.late, f.started)
	if f.started {
		f.startPublisher(len(f.brokers) - 1)
	}
	return b
}

// published returns the number of messages accepted so far.
func (f *relayoutFleet) published() int {
	n := 0
	for _, p := range f.pubs {
		p.mu.Lock()
		for _, c := range p.sent {
			n += c
		}
		p.mu.Unlock()
	}
	return n
}

// settle stops the publishers, waits until every live subscriber got
// every message it can still get, and returns per subscriber the counts
// (published to channels it subscribed while it ran, lost, duplicates,
// reordered).
type fleetCounts struct{ published, received, lost, dup, reordered int }

func (f *relayoutFleet) finish(live []int) []fleetCounts {
	close(f.stop)
	f.wg.Wait()
	want := map[string]int{}
	for _, p := range f.pubs {
		if f.dead[p.name] {
			continue // Close may cut short a publish Redis took
		}
		for k, n := range p.sent {
			want[k] = n
		}
	}
	count := func(i int) fleetCounts {
		c := f.checkers[i]
		c.mu.Lock()
		defer c.mu.Unlock()
		fc := fleetCounts{received: c.received, dup: c.dup, reordered: c.reorders}
		for k, n := range want {
			// A broker that subscribed late checks from the first
			// message it got.
			from := 1
			if f.late[i] {
				if first, ok := c.first[k]; ok {
					from = first
				} else {
					from = n + 1
				}
			}
			fc.published += n - from + 1
			fc.lost += n - from + 1 - c.got[k]
		}
		return fc
	}
	deadline := time.Now().Add(waitTimeout)
	for _, i := range live {
		for count(i).lost > 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	out := make([]fleetCounts, len(live))
	for k, i := range live {
		out[k] = count(i)
	}
	return out
}

// waitPublished waits until n more messages were published.
func (f *relayoutFleet) waitPublished(n int) {
	target := f.published() + n
	waitFor(f.t, fmt.Sprintf("%d messages published", n), func() bool { return f.published() >= target })
}

func relayoutConfig(control string, to []string) RelayoutConfig {
	return RelayoutConfig{ControlAddr: control, To: to, Agreement: shardcast.Agreement{Heartbeat: relayoutHeartbeat}}
}

// phasesOf returns the EventRelayout phases ev saw, in order.
func phasesOf(ev *events) []string {
	var out []string
	for _, e := range ev.Of(shardcast.EventRelayout) {
		out = append(out, e.Phase)
	}
	return out
}

// TestRelayoutTwoToThree: four brokers, each subscribing 200 channels and
// publishing to all of them without pause, move from 2 to 3 instances:
// every subscriber gets every message once and in order per publisher,
// the moving channels end up on the new instance only, and every broker
// reports the four phases.
func TestRelayoutTwoToThree(t *testing.T) {
	servers := startServers(t, 3)
	ab, abc := addrs(servers[0], servers[1]), addrs(servers...)
	channels := channelNames("relayout-", 200)
	f := newRelayoutFleet(t, 4, ab, channels)
	f.waitPublished(2000)

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var phases []PhaseReport
	cfg := relayoutConfig(ab[0], abc)
	cfg.OnPhase = func(p PhaseReport) { phases = append(phases, p) }
	before := f.published()
	rep, err := Relayout(ctx, cfg)
	require.NoError(t, err)
	during := f.published() - before
	f.waitPublished(2000)
	counts := f.finish([]int{0, 1, 2, 3})

	for _, p := range rep.Phases {
		t.Logf("phase %-7s %8v  %d brokers  %d barriers", p.Phase, p.Took.Round(time.Millisecond), p.Brokers, p.Barriers)
	}
	assert.Equal(t, []string{"prepare", "switch", "drain", "finish"}, phaseNames(rep.Phases))
	assert.Len(t, phases, 4)
	t.Logf("%d messages published during the re-layout", during)
	for i, c := range counts {
		t.Logf("subscriber %d: published %d, received %d, lost %d, duplicates %d, reordered %d", i, c.published, c.received, c.lost, c.dup, c.reordered)
		assert.Zero(t, c.lost, "subscriber %d lost messages", i)
		assert.Zero(t, c.dup, "subscriber %d got duplicates", i)
		assert.Zero(t, c.reordered, "subscriber %d got messages out of order", i)
	}
	newFP, err := Fingerprint(abc)
	require.NoError(t, err)
	fields, members := recordOn(t, servers[0], defaultAgreement)
	assert.Equal(t, newFP, fields["fingerprint"])
	assert.Len(t, members, 4)
	moved := 0
	for i, b := range f.brokers {
		assert.Equal(t, newFP, b.Fingerprint(), "broker %d", i)
		assert.Equal(t, abc, b.Instances())
		assert.Equal(t, []string{"prepare", "switch", "drain", "finish"}, phasesOf(f.events[i]), "broker %d", i)
		assert.Empty(t, f.events[i].Of(shardcast.EventInterrupted), "broker %d", i)
	}
	for _, ch := range channels {
		if f.brokers[0].Shard(ch) == 2 {
			moved++
			assert.EqualValues(t, 4, numsub(t, servers[2], ch), "%s on the new instance", ch)
			assert.Zero(t, numsub(t, servers[0], ch)+numsub(t, servers[1], ch), "%s left the old instances", ch)
		}
	}
	t.Logf("%d of %d channels moved", moved, len(channels))
	assert.NotZero(t, moved)
	for _, b := range f.brokers {
		assert.Equal(t, len(channels), b.Stats().Channels, "no channel is wanted twice after the finish")
	}
}

func phaseNames(ps []PhaseReport) []string {
	var out []string
	for _, p := range ps {
		out = append(out, p.Phase)
	}
	return out
}

// checkCounts logs each subscriber's figures and fails on a loss or a
// duplicate, and on a reordering unless allowed.
func checkCounts(t *testing.T, counts []fleetCounts, reorderOK bool) {
	t.Helper()
	for i, c := range counts {
		t.Logf("subscriber %d: published %d, received %d, lost %d, duplicates %d, reordered %d", i, c.published, c.received, c.lost, c.dup, c.reordered)
		assert.Zero(t, c.lost, "subscriber %d lost messages", i)
		assert.Zero(t, c.dup, "subscriber %d got duplicates", i)
		if !reorderOK {
			assert.Zero(t, c.reordered, "subscriber %d got messages out of order", i)
		}
	}
}

// TestRelayoutAbort: a re-layout whose coordinator's ctx ends after the
// switch aborts: every broker returns to the old list and drops what it
// subscribed on the new instance, the record keeps the old list, and no
// message is lost or duplicated (an abort after the switch may reorder
// the moment of the abort; the figures say how much).
func TestRelayoutAbort(t *testing.T) {
	servers := startServers(t, 3)
	ab, abc := addrs(servers[0], servers[1]), addrs(servers...)
	channels := channelNames("abort-", 100)
	f := newRelayoutFleet(t, 3, ab, channels)
	f.waitPublished(1000)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	cfg := relayoutConfig(ab[0], abc)
	cfg.OnPhase = func(p PhaseReport) {
		if p.Phase == shardcast.PhaseSwitch {
			cancel()
		}
	}
	rep, err := Relayout(ctx, cfg)
	require.ErrorIs(t, err, shardcast.ErrRelayoutAborted)
	assert.True(t, rep.Aborted)
	t.Logf("phases: %v", phaseNames(rep.Phases))
	f.waitPublished(1000)
	checkCounts(t, f.finish([]int{0, 1, 2}), true)

	oldFP, err := Fingerprint(ab)
	require.NoError(t, err)
	fields, _ := recordOn(t, servers[0], defaultAgreement)
	assert.Equal(t, oldFP, fields["fingerprint"], "the record keeps the old list")
	n, err := servers[0].Do(context.Background(), "EXISTS", defaultAgreement.TransitionKey())
	require.NoError(t, err)
	assert.EqualValues(t, 0, n, "the transition is gone")
	for i, b := range f.brokers {
		assert.Equal(t, oldFP, b.Fingerprint())
		assert.Contains(t, phasesOf(f.events[i]), shardcast.PhaseAbort, "broker %d", i)
	}
	waitFor(t, "the new instance's subscriptions to be dropped", func() bool { return pubsubChannels(t, servers[2]) == 0 })
	for _, b := range f.brokers {
		waitFor(t, "one subscription per channel", func() bool { return b.Stats().Channels == len(channels) })
	}
}

// TestRelayoutBrokerDies: a broker that dies mid-way (closed without
// leaving the registry, so its registration expires) is not waited for:
// the re-layout completes, and the others lose nothing.
func TestRelayoutBrokerDies(t *testing.T) {
	servers := startServers(t, 3)
	ab, abc := addrs(servers[0], servers[1]), addrs(servers...)
	channels := channelNames("dies-", 100)
	f := newRelayoutFleet(t, 4, ab, channels)
	f.waitPublished(1000)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	cfg := relayoutConfig(ab[0], abc)
	cfg.OnPhase = func(p PhaseReport) {
		if p.Phase == shardcast.PhasePrepare {
			dead := f.brokers[3]
			f.dead[f.pubs[3].name] = true
			dead.member.Abandon() // a crash: no leave
			require.NoError(t, dead.Close())
		}
	}
	rep, err := Relayout(ctx, cfg)
	require.NoError(t, err)
	for _, p := range rep.Phases {
		t.Logf("phase %-7s %8v  %d brokers", p.Phase, p.Took.Round(time.Millisecond), p.Brokers)
	}
	assert.Equal(t, 3, rep.Phases[len(rep.Phases)-1].Brokers, "the dead broker was dropped")
	f.waitPublished(1000)
	checkCounts(t, f.finish([]int{0, 1, 2}), false)
}

// TestRelayoutBrokerJoins: a broker started with the old list in the
// middle of a re-layout follows it from the phase it finds, and, like
// the others, gets every message from its first one, once and in order.
// One started with the new list during it is taken too.
func TestRelayoutBrokerJoins(t *testing.T) {
	servers := startServers(t, 3)
	ab, abc := addrs(servers[0], servers[1]), addrs(servers...)
	channels := channelNames("joins-", 100)
	f := newRelayoutFleet(t, 3, ab, channels)
	f.waitPublished(1000)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	cfg := relayoutConfig(ab[0], abc)
	cfg.OnPhase = func(p PhaseReport) {
		switch p.Phase {
		case shardcast.PhasePrepare:
			f.add(ab)
		case shardcast.PhaseSwitch:
			f.add(abc)
		}
	}
	rep, err := Relayout(ctx, cfg)
	require.NoError(t, err)
	for _, p := range rep.Phases {
		t.Logf("phase %-7s %8v  %d brokers", p.Phase, p.Took.Round(time.Millisecond), p.Brokers)
	}
	assert.Equal(t, 5, rep.Phases[len(rep.Phases)-1].Brokers)
	f.waitPublished(1000)
	checkCounts(t, f.finish([]int{0, 1, 2, 3, 4}), false)
	newFP, err := Fingerprint(abc)
	require.NoError(t, err)
	for _, b := range f.brokers {
		assert.Equal(t, newFP, b.Fingerprint())
	}
}

// TestRelayoutRefused: a re-layout to the recorded list, to an
// unreachable instance, without a record, or while another is under way
// fails with a clear error and changes nothing.
func TestRelayoutRefused(t *testing.T) {
	servers := startServers(t, 4)
	ab, abc := addrs(servers[0], servers[1]), addrs(servers[0], servers[1], servers[2])
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()

	_, err := Relayout(ctx, relayoutConfig(ab[0], abc))
	assert.ErrorIs(t, err, shardcast.ErrNoLayoutRecord)

	newBroker(t, Config{Addrs: ab, Agreement: shardcast.Agreement{Heartbeat: relayoutHeartbeat}})
	_, err = Relayout(ctx, relayoutConfig(ab[0], ab))
	assert.ErrorIs(t, err, shardcast.ErrSameLayout)
	_, err = Relayout(ctx, relayoutConfig(ab[0], nil))
	assert.ErrorIs(t, err, shardcast.ErrInvalidConfig)

	require.NoError(t, servers[3].Kill())
	_, err = Relayout(ctx, relayoutConfig(ab[0], append(ab, servers[3].Addr())))
	require.Error(t, err)
	assert.Contains(t, err.Error(), servers[3].Addr()+" unreachable")
	n, err := servers[0].Do(ctx, "EXISTS", defaultAgreement.TransitionKey())
	require.NoError(t, err)
	assert.EqualValues(t, 0, n, "nothing began")

	cfg := relayoutConfig(ab[0], abc)
	var other error
	cfg.OnPhase = func(p PhaseReport) {
		if p.Phase == shardcast.PhasePrepare {
			_, other = Relayout(ctx, relayoutConfig(ab[0], addrs(servers[0])))
		}
	}
	_, err = Relayout(ctx, cfg)
	require.NoError(t, err)
	assert.ErrorIs(t, other, shardcast.ErrRelayoutInProgress)
	assert.Contains(t, other.Error(), "phase switch")
}

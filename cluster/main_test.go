package cluster

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
	"github.com/shardcast/shardcast/brokertest"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: Close
// must stop everything a broker started.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(redistest.StoppingOnDemand(m))
}

// waitTick is how often the tests re-check a condition they wait for.
const waitTick = 10 * time.Millisecond

// testCtx returns a context bounded by d and cancelled when the test ends.
func testCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// newBroker starts a broker and closes it when the test ends.
func newBroker(t *testing.T, cfg Config) *Broker {
	t.Helper()
	b, err := New(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, b.Close()) })
	return b
}

// received is one delivered message as the recorder saw it.
type received struct {
	seq       uint64
	published time.Time
	at        time.Time
}

// recorder is a Handler that keeps every delivery, per channel. Payloads
// are decimal sequence numbers when a feeder published them.
type recorder struct {
	mu   sync.Mutex
	got  map[string][]received
	seen atomic.Int64
}

func newRecorder() *recorder { return &recorder{got: make(map[string][]received)} }

func (r *recorder) handle(m shardcast.Message) {
	seq, _ := strconv.ParseUint(string(m.Payload), 10, 64)
	now := time.Now()
	r.mu.Lock()
	r.got[m.Channel] = append(r.got[m.Channel], received{seq: seq, published: m.PublishedAt, at: now})
	r.mu.Unlock()
	r.seen.Add(1)
}

// count returns how many messages channel received.
func (r *recorder) count(channel string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got[channel])
}

// silentSince returns the channels that received no message published at
// or after since (by the publisher's clock in the envelope).
func (r *recorder) silentSince(channels []string, since time.Time) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var silent []string
	for _, ch := range channels {
		msgs := r.got[ch]
		if len(msgs) == 0 || msgs[len(msgs)-1].published.Before(since) {
			silent = append(silent, ch)
		}
	}
	return silent
}

// firstSince returns when channel first received a message published at
// or after since, or the zero time.
func (r *recorder) firstSince(channel string, since time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range r.got[channel] {
		if !m.published.Before(since) {
			return m.at
		}
	}
	return time.Time{}
}

// first returns the first message channel received.
func (r *recorder) first(channel string) received {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.got[channel]) == 0 {
		return received{}
	}
	return r.got[channel][0]
}

// seqs returns a copy of the sequence numbers channel received, in
// delivery order.
func (r *recorder) seqs(channel string) []uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]uint64, len(r.got[channel]))
	for i, m := range r.got[channel] {
		out[i] = m.seq
	}
	return out
}

// waitSilentSince waits until every channel received a message published
// at or after since.
func (r *recorder) waitSilentSince(t *testing.T, channels []string, since time.Time, timeout time.Duration) {
	t.Helper()
	var silent []string
	ok := waitFor(timeout, func() bool {
		silent = r.silentSince(channels, since)
		return len(silent) == 0
	})
	require.Truef(t, ok, "%d of %d channels silent since %v, e.g. %v", len(silent), len(channels),
		since.Format("15:04:05.000"), head(silent, 5))
}

// waitFor polls cond every waitTick until it holds or timeout passes.
func waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(waitTick)
	}
}

func head[T any](s []T, n int) []T {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// eventLog collects the events a broker reports.
type eventLog = brokertest.EventLog

// eventPartitions returns the set of partitions named by l's events of
// kind, and the shards those events named.
func eventPartitions(l *eventLog, kind shardcast.EventKind) (map[int]bool, map[string]bool) {
	parts, shards := make(map[int]bool), make(map[string]bool)
	for _, ev := range l.Of(kind) {
		shards[ev.Shard] = true
		for _, p := range ev.Partitions {
			parts[p] = true
		}
	}
	return parts, shards
}

// channelsPerPartition returns n channels in every partition of l, named
// prefix + number.
func channelsPerPartition(l *shardcast.Layout, n int, prefix string) []string {
	counts := make([]int, l.Partitions())
	var out []string
	for i := 0; len(out) < n*l.Partitions(); i++ {
		ch := prefix + strconv.Itoa(i)
		if p := l.Partition(ch); counts[p] < n {
			counts[p]++
			out = append(out, ch)
		}
	}
	return out
}

// numbered returns n channels named prefix + 0 … prefix + n-1.
func numbered(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

// inPartitions returns the channels whose partition is in parts.
func inPartitions(l *shardcast.Layout, channels []string, parts []int) []string {
	set := make(map[int]bool, len(parts))
	for _, p := range parts {
		set[p] = true
	}
	var out []string
	for _, ch := range channels {
		if set[l.Partition(ch)] {
			out = append(out, ch)
		}
	}
	return out
}

// publishAll publishes payload once to every channel, from a few
// goroutines so that publishes share writes.
func publishAll(t *testing.T, pub *Broker, channels []string, payload string) {
	t.Helper()
	ctx := testCtx(t, time.Minute)
	const workers = 16
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := w; i < len(channels); i += workers {
				if err := pub.Publish(ctx, channels[i], []byte(payload)); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
}

// feeder publishes to its channels continuously, each channel with its own
// increasing sequence number as payload, until stopped. Each channel is
// published from one goroutine, so its sequence numbers leave in order.
type feeder struct {
	stop    chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	last    map[string]uint64          // last sequence number Redis accepted
	failed  map[string]map[uint64]bool // sequence numbers whose Publish failed
	sentAt  map[string][]time.Time     // when each sequence number was published, by seq-1
	stopped bool
}

// startFeeder publishes to channels at a paced rate (about
// workers × perTick messages every 2 ms) until stop is called.
func startFeeder(t *testing.T, pub *Broker, channels []string) *feeder {
	t.Helper()
	const workers, perTick = 4, 4
	f := &feeder{stop: make(chan struct{}), last: make(map[string]uint64), failed: make(map[string]map[uint64]bool), sentAt: make(map[string][]time.Time)}
	for w := range workers {
		var mine []string
		for i := w; i < len(channels); i += workers {
			mine = append(mine, channels[i])
		}
		f.wg.Go(func() { f.run(pub, mine, perTick) })
	}
	t.Cleanup(f.halt)
	return f
}

func (f *feeder) run(pub *Broker, channels []string, perTick int) {
	seq := make(map[string]uint64, len(channels))
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	next := 0
	for {
		select {
		case <-f.stop:
			return
		case <-tick.C:
		}
		for range perTick {
			ch := channels[next%len(channels)]
			next++
			seq[ch]++
			f.publish(pub, ch, seq[ch], time.Second)
		}
	}
}

// publish publishes sequence number n on ch, bounded by timeout, and
// records when it was sent and whether Redis accepted it.
func (f *feeder) publish(pub *Broker, ch string, n uint64, timeout time.Duration) {
	f.mu.Lock()
	f.sentAt[ch] = append(f.sentAt[ch], time.Now())
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	err := pub.Publish(ctx, ch, []byte(strconv.FormatUint(n, 10)))
	cancel()
	f.mu.Lock()
	defer f.mu.Unlock()
	if err != nil {
		if f.failed[ch] == nil {
			f.failed[ch] = make(map[uint64]bool)
		}
		f.failed[ch][n] = true
	} else {
		f.last[ch] = n
	}
}

// halt stops the feeder and waits for its goroutines. It is idempotent.
func (f *feeder) halt() {
	f.mu.Lock()
	if f.stopped {
		f.mu.Unlock()
		return
	}
	f.stopped = true
	f.mu.Unlock()
	close(f.stop)
	f.wg.Wait()
}

// lastSeq returns the last sequence number Redis accepted on channel.
func (f *feeder) lastSeq(channel string) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.last[channel]
}

// publishFailed reports whether the Publish of seq on channel returned an
// error. Such a message may still reach Redis later: a command abandoned by
// its context stays in the connection's pipeline.
func (f *feeder) publishFailed(channel string, seq uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed[channel][seq]
}

// failures returns how many Publish calls failed.
func (f *feeder) failures() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, s := range f.failed {
		n += len(s)
	}
	return n
}

// deliveryReport summarises what one broker received of a feeder's
// messages.
type deliveryReport struct {
	duplicates int    // sequence numbers delivered more than once
	reordered  int    // acknowledged publishes delivered after a later one
	lateFailed int    // publishes that returned an error yet arrived after a later one
	missing    uint64 // acknowledged sequence numbers never delivered
}

// checkDelivery compares what rec received on channels with what f
// published, after f was halted and the deliveries settled. Publishes that
// returned an error may arrive late (see publishFailed); they are counted
// apart and not held against per-channel order.
func checkDelivery(t *testing.T, rec *recorder, f *feeder, channels []string) deliveryReport {
	t.Helper()
	var r deliveryReport
	var bad []string
	for _, ch := range channels {
		seen := make(map[uint64]bool)
		var top uint64
		for _, s := range rec.seqs(ch) {
			switch {
			case seen[s]:
				r.duplicates++
				bad = append(bad, fmt.Sprintf("%s: %d twice", ch, s))
			case s < top && f.publishFailed(ch, s):
				r.lateFailed++
			case s < top:
				r.reordered++
				bad = append(bad, fmt.Sprintf("%s: %d after %d", ch, s, top))
			}
			seen[s] = true
			top = max(top, s)
		}
		for s := uint64(1); s <= f.lastSeq(ch); s++ {
			if !seen[s] && !f.publishFailed(ch, s) {
				r.missing++
			}
		}
	}
	assert.Empty(t, head(bad, 20), "duplicate or reordered deliveries")
	return r
}

// checkLossReported asserts that every acknowledged message rec did not
// receive was published inside the window of a Restored event naming its
// partition: the broker reported every loss it caused. It returns how many
// such messages there were.
func checkLossReported(t *testing.T, rec *recorder, f *feeder, events *eventLog, l *shardcast.Layout, channels []string) int {
	t.Helper()
	windows := make(map[int][]shardcast.Event)
	for _, ev := range events.All() {
		if ev.Kind == shardcast.EventRestored {
			for _, p := range ev.Partitions {
				windows[p] = append(windows[p], ev)
			}
		}
	}
	lost := 0
	var unreported []string
	for _, ch := range channels {
		got := make(map[uint64]bool)
		for _, s := range rec.seqs(ch) {
			got[s] = true
		}
		f.mu.Lock()
		sent := append([]time.Time(nil), f.sentAt[ch]...)
		f.mu.Unlock()
		for s := uint64(1); s <= f.lastSeq(ch); s++ {
			if got[s] || f.publishFailed(ch, s) {
				continue
			}
			lost++
			at := sent[s-1]
			covered := false
			for _, w := range windows[l.Partition(ch)] {
				// The publisher stamps its envelope just after at.
				if !at.Before(w.Since.Add(-time.Millisecond)) && !at.After(w.Until) {
					covered = true
					break
				}
			}
			if !covered {
				unreported = append(unreported, fmt.Sprintf("%s #%d at %s", ch, s, at.Format("15:04:05.000")))
			}
		}
	}
	assert.Empty(t, head(unreported, 10), "%d of %d lost messages fall outside every reported window", len(unreported), lost)
	return lost
}

// ssubClients returns the ssub= counts of the connections of s that hold
// sharded subscriptions.
func ssubClients(ctx context.Context, s *redistest.Server) ([]int, error) {
	clients, err := s.ClientList(ctx)
	if err != nil {
		return nil, err
	}
	var out []int
	for _, c := range clients {
		n, err := strconv.Atoi(c["ssub"])
		if err != nil {
			return nil, fmt.Errorf("%s: CLIENT LIST ssub=%q: %w", s.Addr(), c["ssub"], err)
		}
		if n > 0 {
			out = append(out, n)
		}
	}
	return out, nil
}

// clusterInfo returns CLUSTER INFO of s as key → value.
func clusterInfo(ctx context.Context, s *redistest.Server) (map[string]string, error) {
	reply, err := s.Do(ctx, "CLUSTER", "INFO")
	if err != nil {
		return nil, err
	}
	text, ok := reply.(string)
	if !ok {
		return nil, fmt.Errorf("CLUSTER INFO answered %T", reply)
	}
	out := make(map[string]string)
	for line := range strings.Lines(text) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			out[k] = v
		}
	}
	return out, nil
}

// commandCalls returns INFO commandstats calls of cmd on s.
func commandCalls(t *testing.T, s *redistest.Server, cmd string) int64 {
	t.Helper()
	stats, err := s.CommandStats(testCtx(t, 5*time.Second))
	require.NoError(t, err)
	return stats[cmd]
}

// masterOf returns the master the broker's slot map gives partition part.
func (b *Broker) masterOf(part int) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if part < len(b.assign) {
		return b.assign[part]
	}
	return ""
}

// publishKnows reports whether the broker still holds a publishing
// connection to addr.
func (b *Broker) publishKnows(addr string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.pubs[addr]
	return ok
}

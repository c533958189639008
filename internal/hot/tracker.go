package hot

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shardcast/shardcast"

	"github.com/shardcast/shardcast/internal/observe"
)

// Tracker samples messages into per-node top-K sketches, one window
// at a time, and reports the busiest channels and the ones that carry
// more than Options.HotShare of a node's traffic. It is the building
// block both engines share: Sampled decides per message, lock-free, and
// only sampled messages go through Record and its lock; a read loop
// decides with a Sampler instead, cheaper per message. A nil
// *Tracker (detection off) samples nothing.
//
// A window ends at the first sampled message or HotChannels call after
// it is due; with no traffic at all, no window ends and no event is
// raised.
type Tracker struct {
	threshold uint64 // sample when a random uint32 is below it
	rate      float64
	logq      float64 // log(1 - rate), for Sampler's skips
	window    time.Duration
	k         int
	share     float64
	emit      func(shardcast.Event)
	// now and random are time.Now and math/rand/v2's Uint32 unless a
	// test injects its own.
	now    func() time.Time
	random func() uint32

	mu    sync.Mutex
	start time.Time // of the current window; zero before the first sample
	nodes map[hotNode]*spaceSaving
	last  []shardcast.HotChannel // of the last complete window
}

type hotNode struct {
	dir  shardcast.HotDirection
	addr string
}

// NewTracker returns a tracker configured by o's Hot* fields (zero
// ones take their defaults) that passes EventHotChannel to emit, or nil
// if o.HotSampleRate is negative.
func NewTracker(o shardcast.Options, emit func(shardcast.Event)) *Tracker {
	o = o.WithDefaults()
	if o.HotSampleRate < 0 || !observe.Deliveries {
		return nil
	}
	rate := min(o.HotSampleRate, 1)
	return &Tracker{
		threshold: uint64(math.Round(rate * (1 << 32))),
		rate:      rate,
		logq:      math.Log1p(-rate),
		window:    o.HotWindow,
		k:         o.HotTopK,
		share:     o.HotShare,
		emit:      emit,
		now:       time.Now,
		nodes:     make(map[hotNode]*spaceSaving),
	}
}

// Sampled reports whether to sample the current message: true for a
// fraction HotSampleRate of calls, at random. It is safe for concurrent
// use and takes no lock.
func (t *Tracker) Sampled() bool {
	// Small enough to inline: a broker with detection off pays a nil
	// check per message.
	return t != nil && t.draw()
}

func (t *Tracker) draw() bool {
	if t.random != nil {
		return uint64(t.random()) < t.threshold
	}
	return uint64(rand.Uint32()) < t.threshold
}

// Sampler makes a Tracker's sampling decision for the messages of
// one goroutine, a socket read loop, at the cost of a decrement for an
// unsampled message: at each sample it draws how many messages to pass
// over before the next one, a geometric number, so the messages it
// samples are distributed exactly as those of Tracker.Sampled (each
// with probability HotSampleRate, independently) without a random draw
// per message. A Sampler is not safe for concurrent use; the zero
// Sampler, like the Sampler of a nil tracker, samples nothing.
type Sampler struct {
	t    *Tracker
	skip uint64 // messages to pass over before the next sample
}

// Sampler returns a Sampler for t's rate.
func (t *Tracker) Sampler() Sampler {
	s := Sampler{t: t}
	s.next()
	return s
}

// Sampled reports whether to sample the current message (then call
// Record).
func (s *Sampler) Sampled() bool {
	// Small enough to inline: a message not sampled costs a decrement.
	if s.skip > 0 {
		s.skip--
		return false
	}
	return s.next()
}

// next draws the skip before the next sample and reports whether the
// current message is sampled, which it is unless s has no tracker.
func (s *Sampler) next() bool {
	if s.t == nil {
		s.skip = math.MaxUint64
		return false
	}
	s.skip = s.t.gap()
	return true
}

// gap returns the number of messages to pass over before the next sample:
// failures before the first success in Bernoulli trials of probability
// rate, drawn by inversion, or counted with a test's random source.
func (t *Tracker) gap() uint64 {
	if t.random != nil {
		var n uint64
		for !t.draw() {
			n++
		}
		return n
	}
	// 1 - Float64() is in (0, 1], so the log is finite and <= 0; logq
	// is < 0 (-Inf at rate 1, which makes every gap 0).
	g := math.Log(1-rand.Float64()) / t.logq
	if !(g < 1<<62) { // also catches NaN
		return 1 << 62
	}
	return uint64(g)
}

// Record counts one sampled message of channel, exchanged with node in
// direction dir. It copies channel and node. Call it only when Sampled
// said so, or the rates come out too high.
func (t *Tracker) Record(dir shardcast.HotDirection, node, channel string) {
	now := t.now()
	t.mu.Lock()
	evs := t.rollLocked(now)
	s := t.nodes[hotNode{dir, node}]
	if s == nil {
		s = newSpaceSaving(t.k)
		t.nodes[hotNode{dir, strings.Clone(node)}] = s
	}
	s.add(channel)
	t.mu.Unlock()
	t.emitAll(evs)
}

// HotChannels returns the busiest channels of the last complete window,
// highest Rate first, at most HotTopK of them: nil before a window ended,
// or if no message was sampled in the last one.
func (t *Tracker) HotChannels() []shardcast.HotChannel {
	if t == nil {
		return nil
	}
	now := t.now()
	t.mu.Lock()
	evs := t.rollLocked(now)
	out := slices.Clone(t.last)
	t.mu.Unlock()
	t.emitAll(evs)
	return out
}

// rollLocked ends the current window if it is due at now: it keeps the
// window's top channels for HotChannels, empties the sketches, and
// returns the events to raise. The first call starts the first window.
func (t *Tracker) rollLocked(now time.Time) []shardcast.Event {
	if t.start.IsZero() {
		t.start = now
		return nil
	}
	end := t.start.Add(t.window)
	if now.Before(end) {
		return nil
	}
	var all []shardcast.HotChannel
	var evs []shardcast.Event
	for key, s := range t.nodes {
		if s.n == 0 {
			delete(t.nodes, key) // a node gone quiet (or gone) costs nothing
			continue
		}
		for _, sl := range s.top() {
			hc := shardcast.HotChannel{
				Channel: string(sl.name), Direction: key.dir, Node: key.addr,
				Count: t.scale(sl.count), MaxError: t.scale(sl.err),
				Share: float64(sl.count) / float64(s.n), Since: t.start, Until: end,
			}
			hc.Rate = float64(sl.count) / t.rate / t.window.Seconds()
			all = append(all, hc)
			// Only a channel certainly over the share (its count less
			// what it may have inherited) raises the alarm.
			if t.share > 0 && s.n >= shardcast.HotMinSamples && float64(sl.count-sl.err) > t.share*float64(s.n) {
				evs = append(evs, shardcast.Event{
					Kind: shardcast.EventHotChannel, Shard: key.addr, Channels: []string{hc.Channel},
					Count: hc.Count, Since: t.start, Until: end,
				})
			}
		}
		s.reset()
	}
	slices.SortFunc(all, func(a, b shardcast.HotChannel) int {
		return cmp.Or(cmp.Compare(b.Rate, a.Rate), strings.Compare(a.Node, b.Node),
			cmp.Compare(a.Direction, b.Direction), strings.Compare(a.Channel, b.Channel))
	})
	slices.SortFunc(evs, func(a, b shardcast.Event) int {
		return cmp.Or(strings.Compare(a.Shard, b.Shard), cmp.Compare(b.Count, a.Count),
			strings.Compare(a.Channels[0], b.Channels[0]))
	})
	t.last = all[:min(len(all), t.k)]
	if !now.Before(end.Add(t.window)) {
		t.last = nil // a whole window has passed since without a sample
	}
	t.start = now
	return evs
}

// scale turns a count of sampled messages into an estimate of messages.
func (t *Tracker) scale(n uint64) uint64 { return uint64(math.Round(float64(n) / t.rate)) }

func (t *Tracker) emitAll(evs []shardcast.Event) {
	if t.emit == nil {
		return
	}
	for _, ev := range evs {
		t.emit(ev)
	}
}

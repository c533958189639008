package hot

import (
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/shardcast/shardcast"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSpaceSavingBounded: a million distinct channels fit in k slots, and
// once every slot held a name counting allocates nothing.
func TestSpaceSavingBounded(t *testing.T) {
	s := newSpaceSaving(8)
	names := make([]string, 1000)
	for i := range names {
		names[i] = "chan:" + strconv.Itoa(i%10) // equal lengths: buffers settle
	}
	for i := range 1_000_000 {
		s.add("c:" + strconv.Itoa(i%1000+1000))
	}
	assert.Len(t, s.slots, 8)
	assert.Equal(t, 8, cap(s.slots))
	assert.EqualValues(t, 1_000_000, s.n)
	var sum uint64
	for _, sl := range s.slots {
		sum += sl.count
	}
	assert.EqualValues(t, s.n, sum, "Space-Saving's counts add up to the stream's length")
	i := 0
	allocs := testing.AllocsPerRun(10_000, func() {
		s.add(names[i%len(names)])
		i++
	})
	assert.Zero(t, allocs)
	s.reset()
	assert.Empty(t, s.slots)
	assert.Zero(t, s.n)
}

// TestSpaceSavingHeavyHitter: a channel with a quarter of a stream spread
// over 5,000 others holds the top slot, and its count brackets the truth.
func TestSpaceSavingHeavyHitter(t *testing.T) {
	s := newSpaceSaving(32)
	r := rand.New(rand.NewPCG(1, 2))
	var hot uint64
	for range 200_000 {
		if r.IntN(4) == 0 {
			s.add("hot")
			hot++
			continue
		}
		s.add("cold:" + strconv.Itoa(r.IntN(5000)))
	}
	top := s.top()
	require.NotEmpty(t, top)
	assert.Equal(t, "hot", string(top[0].name))
	assert.GreaterOrEqual(t, top[0].count, hot, "never under-counts")
	assert.LessOrEqual(t, top[0].count-top[0].err, hot, "count less err is a lower bound")
	assert.LessOrEqual(t, top[0].err, s.n/32, "the error is at most n/k")
}

// fakeClock is a clock a test moves by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// everyNth returns a random source under which a tracker with sample rate
// 1/n samples exactly one call in n.
func everyNth(n uint32) func() uint32 {
	var i uint32
	return func() uint32 {
		v := uint32(uint64(i%n) * (1 << 32 / uint64(n)))
		i++
		return v
	}
}

func newTestTracker(t *testing.T, o shardcast.Options, clock *fakeClock, random func() uint32) (*Tracker, *[]shardcast.Event) {
	t.Helper()
	var evs []shardcast.Event
	tr := NewTracker(o, func(ev shardcast.Event) { evs = append(evs, ev) })
	require.NotNil(t, tr)
	tr.now, tr.random = clock.now, random
	return tr, &evs
}

// offer runs one message through the tracker as an engine does.
func offer(tr *Tracker, dir shardcast.HotDirection, node, channel string) {
	if tr.Sampled() {
		tr.Record(dir, node, channel)
	}
}

// TestHotTrackerRates: with one message in four sampled, the rates come
// out as messages per second of the window, per node and direction.
func TestHotTrackerRates(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	tr, _ := newTestTracker(t, shardcast.Options{HotSampleRate: 0.25, HotWindow: 10 * time.Second}, clock, everyNth(4))
	start := clock.t
	offer(tr, shardcast.HotOut, "n1", "warm") // starts the window
	for range 39_999 {
		offer(tr, shardcast.HotOut, "n1", "warm")
	}
	for range 8000 {
		offer(tr, shardcast.HotIn, "n2", "warm")
	}
	assert.Nil(t, tr.HotChannels(), "no window has ended")
	clock.advance(10 * time.Second)
	got := tr.HotChannels()
	require.Len(t, got, 2)
	assert.Equal(t, shardcast.HotChannel{
		Channel: "warm", Direction: shardcast.HotOut, Node: "n1", Count: 40_000, Rate: 4000, Share: 1,
		Since: start, Until: start.Add(10 * time.Second),
	}, got[0])
	assert.Equal(t, shardcast.HotIn, got[1].Direction)
	assert.Equal(t, "n2", got[1].Node)
	assert.EqualValues(t, 8000, got[1].Count)
	assert.InDelta(t, 800, got[1].Rate, 1e-9)

	clock.advance(5 * time.Second)
	assert.Len(t, tr.HotChannels(), 2, "the last complete window stays until the next ends")
	clock.advance(20 * time.Second)
	assert.Nil(t, tr.HotChannels(), "a window without a sample reports nothing")
}

// TestHotTrackerEvent: a channel with 30% of a node's traffic among 200
// uniform ones raises one event at the window's end; a node with uniform
// traffic, one with too few samples and a broker with events off raise
// none.
func TestHotTrackerEvent(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	tr, evs := newTestTracker(t, shardcast.Options{HotSampleRate: 0.5, HotWindow: time.Minute, HotTopK: 8}, clock, rand.New(rand.NewPCG(5, 6)).Uint32)
	start := clock.t
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 20_000 {
		ch := "cold:" + strconv.Itoa(r.IntN(200))
		if i%10 < 3 {
			ch = "hot"
		}
		offer(tr, shardcast.HotIn, "busy:6379", ch)
		offer(tr, shardcast.HotIn, "even:6379", "cold:"+strconv.Itoa(i%200))
	}
	for range shardcast.HotMinSamples - 1 {
		tr.Record(shardcast.HotOut, "quiet:6379", "only")
	}
	clock.advance(30 * time.Second)
	tr.Record(shardcast.HotIn, "busy:6379", "cold:1")
	assert.Empty(t, *evs, "the window has not ended")
	clock.advance(30 * time.Second)
	tr.Record(shardcast.HotIn, "busy:6379", "cold:1") // ends it
	require.Len(t, *evs, 1)
	ev := (*evs)[0]
	assert.Equal(t, shardcast.EventHotChannel, ev.Kind)
	assert.Equal(t, "busy:6379", ev.Shard)
	assert.Equal(t, []string{"hot"}, ev.Channels)
	assert.InDelta(t, 6000, float64(ev.Count), 500)
	assert.Equal(t, start, ev.Since)
	assert.Equal(t, start.Add(time.Minute), ev.Until)
	assert.Equal(t, "hot_channel shard=busy:6379 channels=1 count="+strconv.FormatUint(ev.Count, 10)+" gap=1m0s", ev.String())

	top := tr.HotChannels()
	require.Len(t, top, 8, "HotTopK bounds the list")
	assert.Equal(t, "hot", top[0].Channel)
	assert.InDelta(t, 0.3, top[0].Share, 0.02)
	assert.InDelta(t, 100, top[0].Rate, 8)

	off, offEvs := newTestTracker(t, shardcast.Options{HotSampleRate: 1, HotShare: -1}, clock, nil)
	for range 1000 {
		offer(off, shardcast.HotIn, "n", "hot")
	}
	clock.advance(time.Minute)
	assert.NotEmpty(t, off.HotChannels())
	assert.Empty(t, *offEvs, "a negative HotShare raises no event")
}

// TestHotTrackerSampleRate: the default source samples about the asked
// fraction; a negative rate turns the tracker off.
func TestHotTrackerSampleRate(t *testing.T) {
	tr := NewTracker(shardcast.Options{}, nil)
	n := 0
	for range 1_000_000 {
		if tr.Sampled() {
			n++
		}
	}
	assert.InDelta(t, 10_000, n, 500, "1% by default") // 5 standard deviations
	all := NewTracker(shardcast.Options{HotSampleRate: 1}, nil)
	for range 1000 {
		require.True(t, all.Sampled())
	}
	var none *Tracker = NewTracker(shardcast.Options{HotSampleRate: -1}, nil)
	assert.Nil(t, none)
	assert.False(t, none.Sampled())
	assert.Nil(t, none.HotChannels())
}

// TestHotSamplerRate: a Sampler samples the asked fraction, with gaps
// as long on average as independent draws give (mean (1-p)/p), every
// message at rate 1, none without a tracker, and exactly one in n under a
// test's every-nth source.
func TestHotSamplerRate(t *testing.T) {
	tr := NewTracker(shardcast.Options{}, nil)
	s := tr.Sampler()
	n, last, gaps, gapSum := 0, -1, 0, 0
	for i := range 1_000_000 {
		if s.Sampled() {
			n++
			if last >= 0 {
				gaps++
				gapSum += i - last - 1
			}
			last = i
		}
	}
	assert.InDelta(t, 10_000, n, 500, "1% by default") // 5 standard deviations
	// The gaps' standard deviation is about 99.5, so their mean over
	// ~10,000 of them is within 5 deviations of 99 by about ±5.
	assert.InDelta(t, 99, float64(gapSum)/float64(gaps), 5, "mean gap")
	all := NewTracker(shardcast.Options{HotSampleRate: 1}, nil).Sampler()
	for range 1000 {
		require.True(t, all.Sampled())
	}
	var none *Tracker
	off, zero := none.Sampler(), Sampler{}
	for range 1000 {
		require.False(t, off.Sampled())
		require.False(t, zero.Sampled())
	}
	tr4, _ := newTestTracker(t, shardcast.Options{HotSampleRate: 0.25}, &fakeClock{}, everyNth(4))
	s4 := tr4.Sampler()
	for i := range 100 {
		assert.Equal(t, i%4 == 0, s4.Sampled(), "message %d, as Sampled would pick", i)
	}
}

func TestHotOptions(t *testing.T) {
	d := shardcast.Options{}.WithDefaults()
	assert.Equal(t, shardcast.DefaultHotSampleRate, d.HotSampleRate)
	assert.Equal(t, time.Minute, d.HotWindow)
	assert.Equal(t, 32, d.HotTopK)
	assert.Equal(t, 0.2, d.HotShare)
	assert.NoError(t, shardcast.Options{HotSampleRate: -1, HotShare: -1}.Validate())
	for _, o := range []shardcast.Options{
		{HotSampleRate: 1.5}, {HotSampleRate: math.NaN()}, {HotWindow: -time.Second},
		{HotTopK: -1}, {HotShare: 2},
	} {
		err := o.Validate()
		assert.True(t, errors.Is(err, shardcast.ErrInvalidConfig), "%+v: %v", o, err)
	}
	assert.Equal(t, "in", shardcast.HotIn.String())
	assert.Equal(t, "out", shardcast.HotOut.String())
	assert.Equal(t, "hot_channel", shardcast.EventHotChannel.String())
}

// BenchmarkHotSampled is the cost every message pays for detection at
// the default rate: one random number.
func BenchmarkHotSampled(b *testing.B) {
	tr := NewTracker(shardcast.Options{}, nil)
	n := 0
	for b.Loop() {
		if tr.Sampled() {
			n++
		}
	}
	_ = n
}

// BenchmarkHotSampler is the cost a read loop's message pays for
// detection at the default rate: a decrement, and a logarithm per sample.
func BenchmarkHotSampler(b *testing.B) {
	s := NewTracker(shardcast.Options{}, nil).Sampler()
	n := 0
	for b.Loop() {
		if s.Sampled() {
			n++
		}
	}
	_ = n
}

// BenchmarkHotRecord is the cost of one sampled message, among 1,000
// channels on 6 nodes at the default K.
func BenchmarkHotRecord(b *testing.B) {
	tr := NewTracker(shardcast.Options{HotWindow: time.Hour}, nil)
	names := make([]string, 1000)
	for i := range names {
		names[i] = "channel:" + strconv.Itoa(i)
	}
	nodes := []string{"a:1", "b:1", "c:1", "d:1", "e:1", "f:1"}
	i := 0
	b.ReportAllocs()
	for b.Loop() {
		tr.Record(shardcast.HotIn, nodes[i%len(nodes)], names[i%len(names)])
		i++
	}
}

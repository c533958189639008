package shardcastprom_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/shardcast/shardcast"
	shardcastprom "github.com/shardcast/shardcast/contrib/prometheus"
	"github.com/shardcast/shardcast/redistest"
	"github.com/shardcast/shardcast/sharded"
)

// TestHotChannelsLive: one channel gets most of a broker's traffic; once a
// hot-channel window ended, the collector exports it for both directions,
// with its instance as the node and most of the node's share.
func TestHotChannelsLive(t *testing.T) {
	s := redistest.StartStandalone(t)
	b, err := sharded.New(sharded.Config{Addrs: []string{s.Addr()}, Options: shardcast.Options{
		Handler:       func(shardcast.Message) {},
		HotSampleRate: 1,
		HotWindow:     100 * time.Millisecond,
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	ctx := context.Background()
	cold := channelNames("cold", 4)
	if err := b.Subscribe(ctx, append(cold, "hot")...); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(shardcastprom.NewCollector(b, shardcastprom.Options{}), "shardcast_hot_channel_share"); n != 0 {
		t.Errorf("%d hot-channel series without Options.HotChannels", n)
	}
	c := shardcastprom.NewCollector(b, shardcastprom.Options{HotChannels: true})
	hotSeries := func(dir string) bool {
		mfs := gather(t, c)
		if _, ok := mfs["shardcast_hot_channel_share"]; !ok {
			return false
		}
		for _, m := range mfs["shardcast_hot_channel_share"].GetMetric() {
			if hasLabel(m, "channel", "hot") && hasLabel(m, "direction", dir) {
				return true
			}
		}
		return false
	}
	// Windows end on traffic, so keep it going: 80% to one channel.
	waitFor(t, func() bool {
		for i := range 100 {
			ch := "hot"
			if i%5 == 0 {
				ch = cold[i/5%len(cold)]
			}
			if err := b.Publish(ctx, ch, []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
		return hotSeries("in") && hotSeries("out")
	}, "the hot channel exported in both directions")
	mfs := gather(t, c)
	for _, dir := range []string{"in", "out"} {
		if got := value(t, mfs, "shardcast_hot_channel_share", "channel", "hot", "direction", dir, "node", s.Addr()); got <= 0.5 || got > 1 {
			t.Errorf("%s share = %v, want above 0.5", dir, got)
		}
		if got := value(t, mfs, "shardcast_hot_channel_messages_per_second", "channel", "hot", "direction", dir, "node", s.Addr()); got <= 0 {
			t.Errorf("%s rate = %v, want > 0", dir, got)
		}
	}
	if n, m := len(mfs["shardcast_hot_channel_share"].GetMetric()), len(mfs["shardcast_hot_channel_messages_per_second"].GetMetric()); n != m || n > shardcast.DefaultHotTopK {
		t.Errorf("%d share and %d rate series, want as many, at most %d", n, m, shardcast.DefaultHotTopK)
	}
}

// hotOnly has Stats and a fixed HotChannels list.
type hotOnly struct {
	statsOnly
	hot []shardcast.HotChannel
}

func (h hotOnly) HotChannels() []shardcast.HotChannel { return h.hot }

// A publish-only broker's publishes name no node; a list that names one
// channel twice for one node and direction gives one series, not a failed
// scrape.
func TestHotChannelsListed(t *testing.T) {
	b := hotOnly{hot: []shardcast.HotChannel{
		{Channel: "a", Direction: shardcast.HotOut, Rate: 10, Share: 0.5},
		{Channel: "a", Direction: shardcast.HotOut, Rate: 9, Share: 0.4},
		{Channel: "a", Direction: shardcast.HotIn, Node: "n:1", Rate: 7, Share: 0.7},
	}}
	mfs := gather(t, shardcastprom.NewCollector(b, shardcastprom.Options{HotChannels: true}))
	if n := len(mfs["shardcast_hot_channel_share"].GetMetric()); n != 2 {
		t.Errorf("%d share series, want 2", n)
	}
	if got := value(t, mfs, "shardcast_hot_channel_messages_per_second", "channel", "a", "direction", "out", "node", ""); got != 10 {
		t.Errorf("out rate = %v, want 10 (the first listed)", got)
	}
	if got := value(t, mfs, "shardcast_hot_channel_share", "direction", "in", "node", "n:1"); got != 0.7 {
		t.Errorf("in share = %v, want 0.7", got)
	}
	if n := testutil.CollectAndCount(shardcastprom.NewCollector(hotOnly{}, shardcastprom.Options{HotChannels: true})); n != 10 {
		t.Errorf("no hot channels: %d metrics, want the 10 of Stats", n)
	}
}

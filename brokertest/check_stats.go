package brokertest

import (
	"fmt"

	"github.com/shardcast/shardcast"
)

// checkStats: on a broker with a Stats method, Published counts accepted
// publishes, Received and Delivered count the messages handled (and only
// those), and Channels counts distinct subscribed channels through
// repeated and partial calls.
func checkStats(t T, h Harness) {
	r := newRig(t, h, shardcast.Options{})
	sub, ok := r.sub.(StatsReporter)
	pub, ok2 := r.pub.(StatsReporter)
	if !ok || !ok2 {
		t.Skipf("the broker has no Stats method")
	}
	chans := names("stats:", 20)
	r.subscribe(chans...)
	r.subscribe(chans[:10]...)
	r.subscribe(chans[5], chans[5])
	if got := sub.Stats().Channels; got != len(chans) {
		t.Errorf("Stats().Channels = %d after repeated Subscribe calls on %d channels, want %d", got, len(chans), len(chans))
	}
	r.unsubscribe(chans[:4]...)
	r.unsubscribe(chans[:6]...)
	kept := chans[6:]
	if got := sub.Stats().Channels; got != len(kept) {
		t.Errorf("Stats().Channels = %d after unsubscribing 6 of %d channels, want %d", got, len(chans), len(kept))
	}

	before := pub.Stats().Published
	r.stillSubscribed(kept, "counted")
	// One publish to a channel nobody holds: published, never received.
	r.publish("stats:nobody", "x")
	want := uint64(len(kept))
	if got := pub.Stats().Published - before; got != want+1 {
		t.Errorf("publisher's Stats().Published grew by %d over %d accepted publishes", got, want+1)
	}
	waitFor(t, h, "Stats().Delivered to count every handled message", func() (bool, string) {
		st := sub.Stats()
		return st.Delivered >= want, fmt.Sprintf("Delivered = %d, want %d", st.Delivered, want)
	})
	st := sub.Stats()
	if st.Received != want || st.Delivered != want {
		t.Errorf("subscriber's Stats(): Received = %d, Delivered = %d, want both %d (messages handled)", st.Received, st.Delivered, want)
	}
	if st.Published != 0 || st.Dropped != 0 || st.BadFrames != 0 {
		t.Errorf("subscriber's Stats(): Published = %d, Dropped = %d, BadFrames = %d, want 0 each", st.Published, st.Dropped, st.BadFrames)
	}
	if pst := pub.Stats(); pst.Channels != 0 || pst.Received != 0 || pst.Delivered != 0 {
		t.Errorf("publish-only broker's Stats(): Channels = %d, Received = %d, Delivered = %d, want 0 each", pst.Channels, pst.Received, pst.Delivered)
	}
}

package centrifugebroker

import (
	"testing"
	"time"

	"github.com/centrifugal/centrifuge"
	"github.com/shardcast/shardcast"
	"github.com/stretchr/testify/require"
)

// recordingEvents keeps the publications it is handed.
type recordingEvents struct{ pubs []*centrifuge.Publication }

func (r *recordingEvents) HandlePublication(_ string, pub *centrifuge.Publication, _ centrifuge.StreamPosition, _ bool, _ *centrifuge.Publication) error {
	r.pubs = append(r.pubs, pub)
	return nil
}
func (r *recordingEvents) HandleJoin(string, *centrifuge.ClientInfo) error  { return nil }
func (r *recordingEvents) HandleLeave(string, *centrifuge.ClientInfo) error { return nil }

// With the engine's Options.ReusePayloads, the payload's memory is reused
// once deliver returns: the Publication handed to Centrifuge must not
// share it.
func TestDeliverReusePayloads(t *testing.T) {
	for _, reuse := range []bool{false, true} {
		rec := &recordingEvents{}
		b := &Broker{control: DefaultControlChannel, reusePayloads: reuse}
		var h centrifuge.BrokerEventHandler = rec
		b.events.Store(&h)
		frame, err := encodePublication([]byte("hello"), centrifuge.PublishOptions{})
		require.NoError(t, err)
		b.deliver(shardcast.Message{Channel: "ch", Payload: frame, PublishedAt: time.Now()})
		require.Len(t, rec.pubs, 1)
		clear(frame) // what the engine's next message may do
		if reuse {
			require.Equal(t, "hello", string(rec.pubs[0].Data))
		} else {
			// Without it the payload is the message's own: shared, not copied.
			require.NotEqual(t, "hello", string(rec.pubs[0].Data))
		}
	}
}

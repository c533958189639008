package centrifugebroker

import (
	"testing"
	"time"

	"github.com/centrifugal/centrifuge"
	"github.com/centrifugal/protocol"
	"github.com/shardcast/shardcast"
	"github.com/stretchr/testify/require"
)

// recordingEvents keeps the publications it is handed.
type recordingEvents struct {
	pubs, prevs []*centrifuge.Publication
	sps         []centrifuge.StreamPosition
}

func (r *recordingEvents) HandlePublication(_ string, pub *centrifuge.Publication, sp centrifuge.StreamPosition, _ bool, prev *centrifuge.Publication) error {
	r.pubs, r.sps = append(r.pubs, pub), append(r.sps, sp)
	if prev != nil {
		r.prevs = append(r.prevs, prev)
	}
	return nil
}
func (r *recordingEvents) HandleJoin(string, *centrifuge.ClientInfo) error  { return nil }
func (r *recordingEvents) HandleLeave(string, *centrifuge.ClientInfo) error { return nil }

// The adapter runs the engine with Options.ReusePayloads: the payload's
// memory is reused once deliver returns, so nothing handed to Centrifuge
// may share it: not a publication's data (plain, positioned, or the
// previous publication of a delta), its client info, tags or epoch.
func TestDeliverCopiesPayload(t *testing.T) {
	info := &centrifuge.ClientInfo{ClientID: "c1", UserID: "u1", ConnInfo: []byte("conn"), ChanInfo: []byte("chan")}
	plain, err := encodePublication([]byte("hello"), centrifuge.PublishOptions{ClientInfo: info, Tags: map[string]string{"k": "v"}})
	require.NoError(t, err)
	stored, err := (&protocol.Publication{Data: []byte("hello"), Info: infoToProto(info), Tags: map[string]string{"k": "v"}, Time: 1}).MarshalCF()
	require.NoError(t, err)
	prev, err := (&protocol.Publication{Data: []byte("before"), Time: 1}).MarshalCF()
	require.NoError(t, err)
	sp := centrifuge.StreamPosition{Offset: 7, Epoch: "ep"}
	frames := map[string][]byte{
		"plain":      plain,
		"positioned": encodePositioned(sp, false, nil, stored),
		"delta":      encodePositioned(sp, true, prev, stored),
	}
	for name, frame := range frames {
		rec := &recordingEvents{}
		b := &Broker{control: DefaultControlChannel}
		var h centrifuge.BrokerEventHandler = rec
		b.events.Store(&h)
		b.deliver(shardcast.Message{Channel: "ch", Payload: frame, PublishedAt: time.Now()})
		require.Len(t, rec.pubs, 1, name)
		for i := range frame {
			frame[i] = 'x' // what the engine's next message may do
		}
		p := rec.pubs[0]
		require.Equal(t, "hello", string(p.Data), name)
		require.NotNil(t, p.Info, name)
		require.Equal(t, "c1", p.Info.ClientID, name)
		require.Equal(t, "u1", p.Info.UserID, name)
		require.Equal(t, "conn", string(p.Info.ConnInfo), name)
		require.Equal(t, "chan", string(p.Info.ChanInfo), name)
		require.Equal(t, map[string]string{"k": "v"}, p.Tags, name)
		if name == "delta" {
			require.Len(t, rec.prevs, 1, name)
			require.Equal(t, "before", string(rec.prevs[0].Data), name)
		}
		if name != "plain" {
			require.Equal(t, sp, rec.sps[0], name)
		}
	}
}

// The engine the adapter builds runs with Options.ReusePayloads and
// InlineHandling, whatever the user's Options hold, with the adapter's
// Handler and OnEvent.
func TestOwnOptions(t *testing.T) {
	o := ownOptions(shardcast.Options{Workers: 3}, func(shardcast.Message) {}, func(shardcast.Event) {})
	require.True(t, o.ReusePayloads)
	require.True(t, o.InlineHandling)
	require.NotNil(t, o.Handler)
	require.NotNil(t, o.OnEvent)
	require.Equal(t, 3, o.Workers, "the user's Workers stay")
}

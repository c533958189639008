package centrifugebroker

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/centrifugal/centrifuge"
	"github.com/centrifugal/protocol"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPublicationRoundTrip(t *testing.T) {
	info := &centrifuge.ClientInfo{ClientID: "c1", UserID: "u1", ConnInfo: []byte(`{"a":1}`), ChanInfo: []byte("x")}
	at := time.UnixMilli(1_700_000_000_123)
	for _, tc := range []struct {
		name      string
		opts      centrifuge.PublishOptions
		wantPub   centrifuge.Publication
		wantSP    centrifuge.StreamPosition
		wantDelta bool
		wantPrev  *centrifuge.Publication
	}{
		{name: "plain", wantPub: centrifuge.Publication{Data: []byte("hello"), Time: at.UnixMilli()}},
		{
			name:    "info tags key version",
			opts:    centrifuge.PublishOptions{ClientInfo: info, Tags: map[string]string{"k": "v"}, Key: "key", Removed: true, Version: 7},
			wantPub: centrifuge.Publication{Data: []byte("hello"), Info: info, Tags: map[string]string{"k": "v"}, Key: "key", Removed: true, Version: 7, Time: at.UnixMilli()},
		},
		{
			name:      "delta",
			opts:      centrifuge.PublishOptions{UseDelta: true},
			wantPub:   centrifuge.Publication{Data: []byte("hello"), Time: at.UnixMilli()},
			wantDelta: true,
		},
		{
			name:      "map fan-out position and previous data",
			opts:      centrifuge.PublishOptions{Offset: 42, Epoch: "ep", PrevData: []byte("old")},
			wantPub:   centrifuge.Publication{Data: []byte("hello"), Offset: 42, Time: at.UnixMilli()},
			wantSP:    centrifuge.StreamPosition{Offset: 42, Epoch: "ep"},
			wantDelta: true,
			wantPrev:  &centrifuge.Publication{Data: []byte("old")},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := encodePublication([]byte("hello"), tc.opts)
			require.NoError(t, err)
			assert.Equal(t, byte(kindPublication), b[0])
			f, err := decode(b, at)
			require.NoError(t, err)
			assert.Equal(t, kindPublication, f.kind)
			require.NotNil(t, f.pub)
			assert.Equal(t, tc.wantPub, *f.pub)
			assert.Equal(t, tc.wantSP, f.sp)
			assert.Equal(t, tc.wantDelta, f.delta)
			assert.Equal(t, tc.wantPrev, f.prevPub)
		})
	}
}

// A publication kept in history arrives with its stream position ahead of
// it, and for a delta the stream's previous publication.
func TestPositionedRoundTrip(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_123)
	stored, err := (&protocol.Publication{Data: []byte("now"), Key: "k", Version: 3, Time: 1}).MarshalCF()
	require.NoError(t, err)
	prev, err := (&protocol.Publication{Data: []byte("before"), Time: 2}).MarshalCF()
	require.NoError(t, err)
	sp := centrifuge.StreamPosition{Offset: 18446744073709551615, Epoch: "ep0ch"}
	want := centrifuge.Publication{Data: []byte("now"), Key: "k", Version: 3, Offset: sp.Offset, Time: at.UnixMilli()}
	for _, tc := range []struct {
		name     string
		delta    bool
		prev     []byte
		wantPrev *centrifuge.Publication
	}{
		{name: "plain"},
		{name: "delta", delta: true, prev: prev, wantPrev: &centrifuge.Publication{Data: []byte("before"), Time: 2}},
		{name: "delta without a previous publication", delta: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := decode(encodePositioned(sp, tc.delta, tc.prev, stored), at)
			require.NoError(t, err)
			assert.Equal(t, want, *f.pub)
			assert.Equal(t, sp, f.sp)
			assert.Equal(t, tc.delta, f.delta)
			assert.Equal(t, tc.wantPrev, f.prevPub)
		})
	}
	for _, bad := range []string{"\x05", "\x05:e:", "\x05x:e:", "\x051e", "\x0518446744073709551616:e:", "\x061:e:", "\x061:e:5:ab", "\x061:e:-1:"} {
		_, err := decode([]byte(bad), at)
		assert.ErrorIs(t, err, errPosition, "%q", bad)
	}
}

// Without an envelope (the engine's raw mode) there is no publish time;
// Time stays what the frame says (nothing, from this adapter).
func TestPublicationWithoutPublishTime(t *testing.T) {
	b, err := encodePublication([]byte("x"), centrifuge.PublishOptions{})
	require.NoError(t, err)
	f, err := decode(b, time.Time{})
	require.NoError(t, err)
	assert.Zero(t, f.pub.Time)
}

func TestInfoRoundTrip(t *testing.T) {
	info := &centrifuge.ClientInfo{ClientID: "c1", UserID: "u1", ConnInfo: []byte("ci"), ChanInfo: []byte("chi")}
	for _, k := range []kind{kindJoin, kindLeave} {
		b, err := encodeInfo(k, info)
		require.NoError(t, err)
		f, err := decode(b, time.Now())
		require.NoError(t, err)
		assert.Equal(t, k, f.kind)
		assert.Equal(t, info, f.info)
	}
	// A nil info (Centrifuge never sends one) still decodes to a non-nil
	// one: Node.HandleJoin panics on nil.
	b, err := encodeInfo(kindJoin, nil)
	require.NoError(t, err)
	f, err := decode(b, time.Now())
	require.NoError(t, err)
	assert.Equal(t, &centrifuge.ClientInfo{}, f.info)
}

func TestControlRoundTrip(t *testing.T) {
	for _, target := range []string{"", "6f1c0c3e-3a4d-4a61-9c1b-0d1e2f3a4b5c"} {
		for _, data := range [][]byte{nil, []byte("command")} {
			f, err := decode(encodeControl(target, data), time.Now())
			require.NoError(t, err)
			assert.Equal(t, kindControl, f.kind)
			assert.Equal(t, target, f.target)
			assert.Equal(t, string(data), string(f.control))
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	pub, err := encodePublication([]byte("hello world"), centrifuge.PublishOptions{Tags: map[string]string{"a": "b"}})
	require.NoError(t, err)
	for _, tc := range []struct {
		name    string
		payload []byte
		want    error
	}{
		{"empty", nil, errEmptyFrame},
		{"unknown kind", []byte{0x7f, 1, 2}, errUnknownKind},
		{"text from a foreign publisher", []byte(`{"hello":"world"}`), errUnknownKind},
		{"truncated publication", pub[:len(pub)-3], nil},
		{"control without a length", []byte{byte(kindControl)}, errControlHead},
		{"control target longer than the frame", []byte{byte(kindControl), 10, 'a'}, errControlHead},
		{"control length overflowing", append([]byte{byte(kindControl)}, bytes.Repeat([]byte{0xff}, 10)...), errControlHead},
		{"join with a broken field", []byte{byte(kindJoin), 0x0a, 0x05, 'a'}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decode(tc.payload, time.Now())
			require.Error(t, err)
			if tc.want != nil {
				assert.True(t, errors.Is(err, tc.want), "got %v, want %v", err, tc.want)
			}
		})
	}
}

// FuzzDecode checks that decode never panics, always hands Centrifuge
// the non-nil values it requires, and that what it accepts survives being
// encoded again.
func FuzzDecode(f *testing.F) {
	pub, _ := encodePublication([]byte("data"), centrifuge.PublishOptions{
		ClientInfo: &centrifuge.ClientInfo{ClientID: "c", UserID: "u"}, Tags: map[string]string{"t": "v"},
		Key: "k", Offset: 3, Epoch: "e", PrevData: []byte("p"), Version: 2, UseDelta: true,
	})
	join, _ := encodeInfo(kindJoin, &centrifuge.ClientInfo{ClientID: "c", UserID: "u", ConnInfo: []byte("x")})
	leave, _ := encodeInfo(kindLeave, nil)
	stored, _ := (&protocol.Publication{Data: []byte("d"), Tags: map[string]string{"t": "v"}, Version: 4, Time: 1_700_000_000_000}).MarshalCF()
	prev, _ := (&protocol.Publication{Data: []byte("prev"), Time: 1_600_000_000_000}).MarshalCF()
	sp := centrifuge.StreamPosition{Offset: 12, Epoch: "xyz"}
	for _, seed := range [][]byte{
		pub, join, leave,
		encodePositioned(sp, false, nil, stored),
		encodePositioned(sp, true, prev, stored),
		encodePositioned(sp, true, nil, stored),
		asKind(kindMapPublication, encodePositioned(sp, false, nil, stored)),
		asKind(kindMapDelta, encodePositioned(sp, true, prev, stored)),
		[]byte("\x05:e:"), []byte("\x0618446744073709551616:e:0:"), []byte("\x061:e:99:x"),
		encodeControl("node", []byte("cmd")), encodeControl("", nil),
		{}, {0}, {0xff}, []byte("plain text"),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		at := time.UnixMilli(1_700_000_000_000)
		fr, err := decode(payload, at)
		if err != nil {
			return
		}
		switch fr.kind {
		case kindPublication:
			if fr.pub == nil || fr.pub.Time != at.UnixMilli() {
				t.Fatalf("publication %+v: want non-nil with Time from the envelope", fr.pub)
			}
		case kindJoin, kindLeave:
			if fr.info == nil {
				t.Fatal("nil ClientInfo")
			}
		}
		again, err := decode(reencode(t, fr), at)
		if err != nil {
			t.Fatalf("re-encoded frame does not decode: %v", err)
		}
		if a, b := canonical(fr), canonical(again); a != b {
			t.Fatalf("round trip changed the frame:\n%s\n%s", a, b)
		}
	})
}

// asKind returns frame b with its kind byte set to k.
func asKind(k kind, b []byte) []byte {
	b[0] = byte(k)
	return b
}

// reencode encodes a decoded frame again, every field included.
func reencode(t *testing.T, f frame) []byte {
	t.Helper()
	switch f.kind {
	case kindPositioned, kindPositionedDelta, kindMapPublication, kindMapDelta:
		var prev []byte
		if f.prevPub != nil {
			prev = marshalStored(t, f.prevPub)
			if len(prev) == 0 {
				// An empty previous publication is still one: spell
				// its empty Data (field 4) out.
				prev = []byte{0x22, 0x00}
			}
		}
		b := encodePositioned(f.sp, f.delta, prev, marshalStored(t, f.pub))
		b[0] = byte(f.kind) // a map frame is laid out as a positioned one
		return b
	case kindPublication:
		p := &protocol.Publication{
			Data: f.pub.Data, Info: infoToProto(f.pub.Info), Tags: f.pub.Tags, Channel: f.pub.Channel,
			Key: f.pub.Key, Removed: f.pub.Removed, Score: f.pub.Score, Version: f.pub.Version,
			Offset: f.sp.Offset, Epoch: f.sp.Epoch, Delta: f.delta,
		}
		if f.prevPub != nil {
			p.PrevData = f.prevPub.Data
		}
		b, err := p.MarshalCF()
		require.NoError(t, err)
		return append([]byte{byte(kindPublication)}, b...)
	case kindJoin, kindLeave:
		b, err := encodeInfo(f.kind, f.info)
		require.NoError(t, err)
		return b
	case kindControl:
		return encodeControl(f.target, f.control)
	}
	t.Fatalf("reencode: no encoder for %s", f.kind)
	return nil
}

// marshalStored encodes p as a history stream keeps it.
func marshalStored(t *testing.T, p *centrifuge.Publication) []byte {
	t.Helper()
	b, err := (&protocol.Publication{
		Data: p.Data, Info: infoToProto(p.Info), Tags: p.Tags, Channel: p.Channel, Key: p.Key,
		Removed: p.Removed, Score: p.Score, Version: p.Version, Time: p.Time,
	}).MarshalCF()
	require.NoError(t, err)
	return b
}

// canonical renders a frame so that equal contents compare equal (nil and
// empty slices and maps alike).
func canonical(f frame) string {
	var pub, prev, info string
	if f.pub != nil {
		p := *f.pub
		p.Info = nil
		pub = fmt.Sprintf("%+v info=%s", p, canonicalInfo(f.pub.Info))
	}
	if f.prevPub != nil {
		prev = fmt.Sprintf("%+v", *f.prevPub)
	}
	info = canonicalInfo(f.info)
	return fmt.Sprintf("%s pub={%s} sp=%+v delta=%v prev={%s} info=%s target=%q control=%q",
		f.kind, pub, f.sp, f.delta, prev, info, f.target, f.control)
}

func canonicalInfo(i *centrifuge.ClientInfo) string {
	if i == nil {
		return "nil"
	}
	return fmt.Sprintf("%+v", *i)
}

// A decoded publication's data is the frame's memory, not a copy, capped so
// that an append to it cannot overwrite the fields after it.
func TestPublicationDataShared(t *testing.T) {
	b, err := encodePublication([]byte("hello"), centrifuge.PublishOptions{Key: "k"})
	require.NoError(t, err)
	f, err := decode(b, time.Now())
	require.NoError(t, err)
	require.Equal(t, "hello", string(f.pub.Data))
	assert.Same(t, &b[3], &f.pub.Data[0], "data copied")
	assert.Equal(t, len(f.pub.Data), cap(f.pub.Data))
	_ = append(f.pub.Data, "!!!"...)
	f, err = decode(b, time.Now())
	require.NoError(t, err)
	assert.Equal(t, "k", f.pub.Key)
}

// FuzzUnmarshalPublication checks that unmarshalPublication decodes every
// input as UnmarshalCF does: Publications whose data is not the first
// field (a foreign encoder), repeated data fields (the last wins) and
// malformed ones included.
func FuzzUnmarshalPublication(f *testing.F) {
	first, _ := (&protocol.Publication{Data: []byte("d"), Key: "k", Time: 5}).MarshalCF()
	empty, _ := (&protocol.Publication{Key: "k"}).MarshalCF()
	for _, seed := range [][]byte{
		first, empty,
		append(slices.Clone(empty), first...),           // data after another field
		append(slices.Clone(first), 0x22, 1, 'x'),       // data repeated: the last wins
		append(slices.Clone(first), 0x22, 0),            // ... even when empty
		{0x22, 0}, {0x22}, {0x22, 5, 'a'}, {0x22, 0xff}, // empty, truncated, malformed
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var want, got protocol.Publication
		wantErr := want.UnmarshalCF(b)
		gotErr := unmarshalPublication(b, &got)
		if (wantErr == nil) != (gotErr == nil) {
			t.Fatalf("error %v, UnmarshalCF's %v", gotErr, wantErr)
		}
		if wantErr == nil && !reflect.DeepEqual(&want, &got) {
			t.Fatalf("decoded\n%+v\nUnmarshalCF decoded\n%+v", &got, &want)
		}
	})
}

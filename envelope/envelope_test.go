package envelope

import (
	"bytes"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRoundTrip(t *testing.T) {
	big := bytes.Repeat([]byte{0xAB, 0x00, 0xC1}, 1<<18)
	cases := []struct {
		name    string
		at      time.Time
		payload []byte
	}{
		{"now", time.Now(), []byte("hello")},
		{"empty payload", time.Now(), []byte{}},
		{"nil payload", time.Now(), nil},
		{"binary payload that looks like a frame", time.Now(), Append(nil, time.Now(), []byte("inner"))},
		{"large payload", time.Now(), big},
		{"unknown time", time.Time{}, []byte("no clock")},
		{"earliest time", MinTime, []byte("x")},
		{"latest time", MaxTime, []byte("x")},
		{"non-UTC location", time.Date(2026, 3, 1, 12, 0, 0, 123456000, time.FixedZone("X", 5*3600)), []byte("x")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			frame := Append(nil, tc.at, tc.payload)
			require.Len(t, frame, Size(len(tc.payload)))

			at, payload, err := Decode(frame)
			require.NoError(t, err)
			assert.True(t, tc.at.Truncate(time.Microsecond).Equal(at), "time: got %v want %v", at, tc.at)
			if !tc.at.IsZero() {
				assert.Equal(t, time.UTC, at.Location())
			} else {
				assert.True(t, at.IsZero())
			}
			assert.Equal(t, len(tc.payload), len(payload))
			assert.True(t, bytes.Equal(tc.payload, payload))
			assert.NotNil(t, payload, "an empty payload decodes as empty, not nil")
		})
	}
}

func TestAppendTruncatesToMicroseconds(t *testing.T) {
	at := time.Unix(1_700_000_000, 123_456_789)
	got, _, err := Decode(Append(nil, at, nil))
	require.NoError(t, err)
	assert.Equal(t, time.UnixMicro(1_700_000_000_123_456).UTC(), got)
}

func TestAppendClampsOutOfRangeTimes(t *testing.T) {
	cases := []struct {
		name string
		at   time.Time
		want time.Time
	}{
		{"Unix epoch", time.Unix(0, 0), MinTime},
		{"before the epoch", time.Date(1969, 7, 20, 20, 17, 0, 0, time.UTC), MinTime},
		{"just before the range", MinTime.Add(-time.Microsecond), MinTime},
		{"far future", time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC), MaxTime},
		{"end of the range", MaxTime.Add(time.Microsecond), MaxTime},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, payload, err := Decode(Append(nil, tc.at, []byte("kept")))
			require.NoError(t, err, "a bad clock must not make the message undecodable")
			assert.Equal(t, tc.want, got)
			assert.Equal(t, []byte("kept"), payload)
		})
	}
}

// TestGoldenBytes pins the encoding: if it fails, the wire contract changed
// and nodes of different versions would no longer understand each other.
func TestGoldenBytes(t *testing.T) {
	cases := []struct {
		name    string
		at      time.Time
		payload string
		want    string
	}{
		{"documented example", time.UnixMicro(1_700_000_000_123_456), "hello", "c101" + "00060a2418202240" + "68656c6c6f"},
		{"unknown time, empty payload", time.Time{}, "", "c101" + "0000000000000000"},
		{"earliest time", MinTime, "\x00", "c101" + "00038d7ea4c68000" + "00"},
		{"latest time", MaxTime, "", "c101" + "002386f26fc0ffff"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, hex.EncodeToString(Append(nil, tc.at, []byte(tc.payload))))
		})
	}
	assert.Equal(t, byte(0xC1), Magic)
	assert.Equal(t, byte(0x01), Version)
	assert.Equal(t, 10, HeaderSize)
}

func TestAppendKeepsPrefix(t *testing.T) {
	dst := []byte("prefix:")
	frame := Append(dst, time.UnixMicro(1_700_000_000_123_456), []byte("hello"))
	assert.Equal(t, "prefix:", string(frame[:7]))
	at, payload, err := Decode(frame[7:])
	require.NoError(t, err)
	assert.Equal(t, "hello", string(payload))
	assert.Equal(t, int64(1_700_000_000_123_456), at.UnixMicro())
}

func TestSize(t *testing.T) {
	assert.Equal(t, 10, Size(0))
	assert.Equal(t, 15, Size(5))
	assert.Equal(t, 10, Size(-1))
}

func TestDecodeRejects(t *testing.T) {
	valid := Append(nil, time.UnixMicro(1_700_000_000_123_456), []byte("hello"))
	with := func(i int, b byte) []byte {
		f := bytes.Clone(valid)
		f[i] = b
		return f
	}
	withTime := func(us string) []byte {
		b, err := hex.DecodeString("c101" + us + "aa")
		require.NoError(t, err)
		return b
	}
	cases := []struct {
		name  string
		frame []byte
		msg   string
	}{
		{"nil", nil, "shorter"},
		{"empty", []byte{}, "shorter"},
		{"header cut short", valid[:HeaderSize-1], "shorter"},
		{"just the magic", []byte{0xC1}, "shorter"},
		{"JSON", []byte(`{"event":"message","data":42}`), "not a shardcast frame"},
		{"text", []byte("hello, subscribers"), "not a shardcast frame"},
		{"UTF-8 text starting with a two-byte sequence", []byte("Ärger im Büro heute"), "not a shardcast frame"},
		{"MessagePack map", []byte{0x82, 0xa1, 0x61, 0x01, 0xa1, 0x62, 0x02, 0x00, 0x00, 0x00, 0x00}, "not a shardcast frame"},
		{"wrong magic", with(0, 0xC0), "not a shardcast frame"},
		{"future version", with(1, 0x02), "version 2"},
		{"version zero", with(1, 0x00), "version 0"},
		{"high time byte set", with(2, 0x01), "out of range"},
		{"time just below the range", withTime("00038d7ea4c67fff"), "out of range"},
		{"time at the end of the range", withTime("002386f26fc10000"), "out of range"},
		{"time of one microsecond", withTime("0000000000000001"), "out of range"},
		{"all ones", withTime("ffffffffffffffff"), "out of range"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			at, payload, err := Decode(tc.frame)
			require.Error(t, err)
			assert.True(t, errors.Is(err, ErrBadFrame), "error %v must wrap ErrBadFrame", err)
			assert.Contains(t, err.Error(), tc.msg)
			assert.True(t, at.IsZero())
			assert.Nil(t, payload)
		})
	}
}

func TestDecodePayloadAliasesFrame(t *testing.T) {
	frame := Append(nil, time.Now(), []byte("abc"))
	_, payload, err := Decode(frame)
	require.NoError(t, err)
	assert.Same(t, &frame[HeaderSize], &payload[0])
	frame[HeaderSize] = 'X'
	assert.Equal(t, "Xbc", string(payload))
}

func TestAllocations(t *testing.T) {
	payload := bytes.Repeat([]byte("p"), 256)
	now := time.Now()
	buf := make([]byte, 0, Size(len(payload)))
	var frame []byte

	allocs := testing.AllocsPerRun(1000, func() {
		frame = Append(buf[:0], now, payload)
	})
	assert.Zero(t, allocs, "Append with capacity")

	allocs = testing.AllocsPerRun(1000, func() {
		_ = Append(nil, now, payload)
	})
	assert.Equal(t, 1.0, allocs, "Append without capacity grows once")

	var sink []byte
	allocs = testing.AllocsPerRun(1000, func() {
		_, p, err := Decode(frame)
		if err != nil {
			panic(err)
		}
		sink = p
	})
	assert.Zero(t, allocs, "Decode")
	assert.Len(t, sink, len(payload))

	foreign := []byte(`{"not":"a frame"}`)
	allocs = testing.AllocsPerRun(1000, func() {
		_, _, _ = Decode(foreign)
	})
	assert.Zero(t, allocs, "rejecting foreign data")
}

// FuzzDecode checks that Decode survives any input, and that whatever it
// accepts is exactly what Append writes for the decoded parts, so no two
// byte strings decode to the same message.
func FuzzDecode(f *testing.F) {
	f.Add(Append(nil, time.UnixMicro(1_700_000_000_123_456), []byte("hello")))
	f.Add(Append(nil, time.Time{}, nil))
	f.Add([]byte(`{"a":1}`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, frame []byte) {
		at, payload, err := Decode(frame)
		if err != nil {
			if !errors.Is(err, ErrBadFrame) {
				t.Fatalf("error %v does not wrap ErrBadFrame", err)
			}
			if !at.IsZero() || payload != nil {
				t.Fatalf("failed decode returned data: %v %q", at, payload)
			}
			return
		}
		if len(payload) != len(frame)-HeaderSize {
			t.Fatalf("payload is %d bytes of a %d-byte frame", len(payload), len(frame))
		}
		again := Append(nil, at, payload)
		if !bytes.Equal(again, frame) {
			t.Fatalf("re-encoding differs:\n got %x\nwant %x", again, frame)
		}
	})
}

func BenchmarkAppend(b *testing.B) {
	payload := make([]byte, 256)
	buf := make([]byte, 0, Size(len(payload)))
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		buf = Append(buf[:0], now, payload)
	}
}

func BenchmarkDecode(b *testing.B) {
	frame := Append(nil, time.Now(), make([]byte, 256))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Decode(frame); err != nil {
			b.Fatal(err)
		}
	}
}

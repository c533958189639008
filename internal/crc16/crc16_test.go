package crc16

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// bitwiseChecksum is the textbook bit-at-a-time CRC-16/XMODEM, kept apart
// from the table-driven code so that a wrong table cannot go unnoticed.
func bitwiseChecksum(b []byte) uint16 {
	var crc uint16
	for _, c := range b {
		crc ^= uint16(c) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

func TestCRCChecksumKnownVectors(t *testing.T) {
	// 0x31C3 is the published check value of CRC-16/XMODEM; Redis' own
	// crc16.c documents the same value.
	assert.Equal(t, uint16(0x31C3), Checksum([]byte("123456789")))
	assert.Equal(t, uint16(0x31C3), ChecksumString("123456789"))
	assert.Equal(t, uint16(0), Checksum(nil))
	assert.Equal(t, uint16(0), ChecksumString(""))
	assert.Equal(t, uint16(0x1021), Checksum([]byte{0x01}))
}

func TestCRCChecksumMatchesBitwise(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 64)
	for range 2000 {
		n := rng.IntN(len(buf) + 1)
		for i := range n {
			buf[i] = byte(rng.Uint32())
		}
		b := buf[:n]
		want := bitwiseChecksum(b)
		require.Equal(t, want, Checksum(b), "bytes %x", b)
		require.Equal(t, want, ChecksumString(string(b)), "bytes %x", b)
	}
}

// TestCRCSlotMatchesRedis pins Slot against values CLUSTER KEYSLOT returned
// on redis-server 7.0.15 for the same keys.
func TestCRCSlotMatchesRedis(t *testing.T) {
	cases := []struct {
		key  string
		slot uint16
	}{
		{"foo", 12182},
		{"bar", 5061},
		{"hello", 866},
		{"123456789", 12739},
		{"{user1000}.following", 3443},
		{"{user1000}.followers", 3443},
		{"foo{}{bar}", 8363},    // empty first tag: the whole key is hashed
		{"foo{{bar}}zap", 4015}, // tag is "{bar"
		{"foo{bar}{zap}", 5061}, // only the first tag counts: same as "bar"
		{"{", 4092},             // no closing brace
		{"}", 12090},            // closing brace only
		{"{}", 15257},           // empty tag
		{"}{x}", 16287},         // tag "x" after a stray '}'
		{"a{b", 13340},          // unclosed tag
		{"", 0},                 // empty key
		{"ümlaut-ключ", 5298},   // UTF-8 bytes are hashed as bytes
		{"{tag}.chat:{room}", 8338},
		{"a\x00b\xff{\x01}", 4129}, // binary key with a one-byte tag
	}
	for _, c := range cases {
		assert.Equal(t, c.slot, Slot(c.key), "key %q", c.key)
	}
}

func TestCRCHashTag(t *testing.T) {
	cases := map[string]string{
		"plain":        "plain",
		"{a}":          "a",
		"x{ab}y":       "ab",
		"{a}{b}":       "a",
		"{}{a}":        "{}{a}",
		"{{a}":         "{a",
		"a}{b}":        "b",
		"{abc":         "{abc",
		"":             "",
		"{tag}.{x}.ch": "tag",
	}
	for key, want := range cases {
		assert.Equal(t, want, HashTag(key), "key %q", key)
	}
}

func TestCRCSlotRangeAndTagEquivalence(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 1000 {
		tag := make([]byte, 1+rng.IntN(8))
		for i := range tag {
			tag[i] = 'a' + byte(rng.IntN(26))
		}
		s := Slot(string(tag))
		require.Less(t, s, uint16(SlotCount))
		assert.Equal(t, s, Slot("{"+string(tag)+"}.anything{else}"))
		assert.Equal(t, s, Slot("prefix{"+string(tag)+"}"))
	}
}

func TestCRCSlotDoesNotAllocate(t *testing.T) {
	key := "{user1000}.following"
	allocs := testing.AllocsPerRun(100, func() { _ = Slot(key) })
	assert.Zero(t, allocs)
}

func BenchmarkCRCSlot(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		_ = Slot("{a1b}.chat:room:12345")
	}
}

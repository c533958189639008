// Package crc16 computes Redis Cluster key hash slots.
//
// Redis Cluster maps a key to one of 16384 slots with CRC16 in the
// CRC-16/XMODEM variant (polynomial 0x1021, initial value 0, no bit
// reflection, no final XOR), taken modulo 16384. If the key contains a
// non-empty hash tag, only the tag is hashed. Slot returns exactly what
// CLUSTER KEYSLOT returns for the same key.
package crc16

// SlotCount is the number of hash slots in a Redis Cluster.
const SlotCount = 16384

// poly is the CRC-16/XMODEM generator polynomial x^16 + x^12 + x^5 + 1.
const poly = 0x1021

// table holds the CRC of every byte value so that the checksum consumes a
// byte per step instead of a bit per step.
var table = makeTable()

func makeTable() *[256]uint16 {
	var t [256]uint16
	for i := range t {
		crc := uint16(i) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ poly
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return &t
}

// Checksum returns the CRC-16/XMODEM checksum of b, the CRC Redis Cluster
// uses for keys. Checksum([]byte("123456789")) is 0x31C3.
func Checksum(b []byte) uint16 {
	var crc uint16
	for _, c := range b {
		crc = crc<<8 ^ table[byte(crc>>8)^c]
	}
	return crc
}

// ChecksumString is Checksum for a string; it does not allocate.
func ChecksumString(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc = crc<<8 ^ table[byte(crc>>8)^s[i]]
	}
	return crc
}

// Slot returns the Redis Cluster hash slot of key, in [0, SlotCount).
//
// It follows the hash tag rule of Redis: if key contains a '{' and, after
// it, a '}', and at least one byte lies between the first '{' and the first
// '}' that follows it, only those bytes are hashed; otherwise the whole key
// is. Braces further on never matter, so "{a}{b}" hashes "a" and "{}{a}"
// hashes the whole key. Slot does not allocate.
func Slot(key string) uint16 {
	return ChecksumString(HashTag(key)) & (SlotCount - 1)
}

// HashTag returns the part of key that Redis hashes: the non-empty hash tag
// if key has one, the whole key otherwise.
func HashTag(key string) string {
	for i := 0; i < len(key); i++ {
		if key[i] != '{' {
			continue
		}
		for j := i + 1; j < len(key); j++ {
			if key[j] == '}' {
				if j == i+1 {
					return key // "{}" disables the tag rule for the whole key
				}
				return key[i+1 : j]
			}
		}
		return key // a '{' without a later '}'
	}
	return key
}

package cluster

import "github.com/shardcast/shardcast/internal/crc16"

// KeySlot returns the hash slot, 0 to 16383, that Redis Cluster stores
// key in, exactly as CLUSTER KEYSLOT answers: CRC16 of the key, or of its
// hash tag when it has a non-empty one (the bytes between the first '{'
// and the first '}' after it). With a slot map (ParseSlots,
// shardcast.SlotMap.MasterOf) it tells which master holds a key, such as
// a layout record's (shardcast.Agreement.RecordKey), without asking the
// cluster; the engine places its own keys with the same function.
func KeySlot(key string) uint16 { return crc16.Slot(key) }

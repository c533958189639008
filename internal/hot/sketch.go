package hot

import (
	"cmp"
	"slices"

	"github.com/cespare/xxhash/v2"
)

// spaceSaving counts the most frequent channels of a stream in a fixed
// number of slots, the Space-Saving scheme of Metwally, Agrawal and El
// Abbadi (2005): a channel already in a slot gets its count raised; a new
// one takes the slot with the smallest count and inherits that count, as
// an error it may have over-counted by. Whatever the number of distinct
// channels, a slot's count never under-counts its channel, over-counts it
// by at most its err, and a channel seen more than n/k times always holds
// a slot.
//
// Slots keep their name buffers across reset, so counting allocates
// nothing once every slot has held a channel of the longest length seen.
type spaceSaving struct {
	slots []hotSlot // len ≤ k = cap
	n     uint64    // channels counted since the last reset
}

type hotSlot struct {
	hash  uint64 // of name, to skip most comparisons
	count uint64
	err   uint64 // count exceeds the channel's true count by at most this
	name  []byte
}

// maxKeptName bounds the name buffer a slot keeps across a reset, so that
// one very long channel name does not hold its memory for good.
const maxKeptName = 1024

func newSpaceSaving(k int) *spaceSaving {
	return &spaceSaving{slots: make([]hotSlot, 0, k)}
}

// add counts one occurrence of channel. It copies channel, which may be
// a view of a read buffer.
func (s *spaceSaving) add(channel string) {
	s.n++
	h := xxhash.Sum64String(channel)
	low := -1
	for i := range s.slots {
		sl := &s.slots[i]
		if sl.hash == h && string(sl.name) == channel {
			sl.count++
			return
		}
		if low < 0 || sl.count < s.slots[low].count {
			low = i
		}
	}
	if len(s.slots) < cap(s.slots) {
		s.slots = s.slots[:len(s.slots)+1]
		sl := &s.slots[len(s.slots)-1]
		sl.hash, sl.count, sl.err = h, 1, 0
		sl.name = append(sl.name[:0], channel...)
		return
	}
	sl := &s.slots[low]
	sl.hash, sl.err = h, sl.count
	sl.count++
	sl.name = append(sl.name[:0], channel...)
}

// top returns the counted slots, highest count first (ties by name). The
// slots are the sketch's own: they are valid until the next add or reset.
func (s *spaceSaving) top() []hotSlot {
	slices.SortFunc(s.slots, func(a, b hotSlot) int {
		if c := cmp.Compare(b.count, a.count); c != 0 {
			return c
		}
		return slices.Compare(a.name, b.name)
	})
	return s.slots
}

// reset empties the sketch for a new window.
func (s *spaceSaving) reset() {
	s.n = 0
	all := s.slots[:cap(s.slots)]
	for i := range all {
		if cap(all[i].name) > maxKeptName {
			all[i].name = nil
		}
	}
	s.slots = s.slots[:0]
}

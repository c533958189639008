package hist

import "time"

// Tally gathers durations for a histogram only one goroutine records
// into, and adds them with one store per run of equal buckets and one for
// the sum, where RecordOwned stores twice per duration: on amd64 an atomic
// store is a locked instruction that drains the store buffer, which made
// the stores most of a worker's cost of recording a lag. Until Flush,
// the durations gathered are not in the histogram; at most tallySize of
// them, since Record flushes a full tally.
type Tally struct {
	n     int
	sum   int64
	index [tallySize]uint16
}

const tallySize = 16

// Record gathers d for h; a negative d goes to h at once (it is rare).
func (t *Tally) Record(h *Histogram, d time.Duration) {
	if d < 0 {
		h.RecordOwned(d)
		return
	}
	if t.n == len(t.index) {
		t.Flush(h)
	}
	t.index[t.n] = uint16(Index(int64(d)))
	t.n++
	t.sum += SumPart(int64(d)) // at most tallySize × Max: no overflow
}

// Flush adds the gathered durations to h: buckets first, then the sum, as
// a snapshot expects of a Record in progress.
func (t *Tally) Flush(h *Histogram) {
	for i := 0; i < t.n; {
		j := i + 1
		for j < t.n && t.index[j] == t.index[i] {
			j++
		}
		b := &h.buckets[t.index[i]]
		b.Store(b.Load() + uint64(j-i))
		i = j
	}
	if t.n > 0 {
		h.sum.Store(SatAdd(h.sum.Load(), t.sum))
	}
	t.n, t.sum = 0, 0
}

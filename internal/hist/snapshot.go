package hist

import "time"

// Bucket is one bucket of a snapshot: Count durations d with
// Lower <= d < Upper.
type Bucket struct {
	Lower, Upper time.Duration
	Count        uint64
}

// Snapshot is a histogram's counts at one moment, as plain data. Its
// fields are those of the root package's HistogramSnapshot, which
// converts from it and documents them; Buckets lists every bucket of the
// layout once it is not empty.
type Snapshot struct {
	Count       uint64
	Sum         time.Duration
	Negative    uint64
	NegativeSum time.Duration
	Buckets     []Bucket
}

// Init gives s the layout's buckets, all empty, unless it has them.
func (s *Snapshot) Init() {
	if s.Buckets != nil {
		return
	}
	s.Buckets = make([]Bucket, Buckets)
	for i := range s.Buckets {
		s.Buckets[i].Lower, s.Buckets[i].Upper = Bounds(i)
	}
}

// AddFrom adds h's counts to s.
func (s *Snapshot) AddFrom(h *Histogram) {
	s.Init()
	s.Sum = time.Duration(SatAdd(int64(s.Sum), h.sum.Load()))
	s.Negative += h.negative.Load()
	s.NegativeSum = time.Duration(SatAdd(int64(s.NegativeSum), h.negativeSum.Load()))
	for i := range h.buckets {
		n := h.buckets[i].Load()
		s.Buckets[i].Count += n
		s.Count += n
	}
}

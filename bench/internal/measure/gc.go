package measure

import (
	"runtime/metrics"
	"time"
)

// Runtime is a reading of the Go runtime's own accounts: its estimates of
// the CPU time its garbage collector and all Go code used so far, and the
// heap the last collection found live.
type Runtime struct {
	GCCPU, TotalCPU time.Duration
	LiveHeap        uint64 // bytes
}

var runtimeMetrics = []string{
	"/cpu/classes/gc/total:cpu-seconds",
	"/cpu/classes/total:cpu-seconds",
	"/gc/heap/live:bytes",
}

// ReadRuntime reads the runtime's accounts now.
func ReadRuntime() Runtime {
	s := make([]metrics.Sample, len(runtimeMetrics))
	for i, name := range runtimeMetrics {
		s[i].Name = name
	}
	metrics.Read(s)
	var r Runtime
	if s[0].Value.Kind() == metrics.KindFloat64 {
		r.GCCPU = time.Duration(s[0].Value.Float64() * 1e9)
	}
	if s[1].Value.Kind() == metrics.KindFloat64 {
		r.TotalCPU = time.Duration(s[1].Value.Float64() * 1e9)
	}
	if s[2].Value.Kind() == metrics.KindUint64 {
		r.LiveHeap = s[2].Value.Uint64()
	}
	return r
}

// GCShare is the share of the runtime's CPU time between r and later that
// went to the garbage collector, 0 when no time passed.
func (r Runtime) GCShare(later Runtime) float64 {
	total := later.TotalCPU - r.TotalCPU
	if total <= 0 {
		return 0
	}
	return float64(later.GCCPU-r.GCCPU) / float64(total)
}

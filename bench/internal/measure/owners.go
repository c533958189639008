package measure

import (
	"bytes"
	"fmt"
	"runtime/pprof"
	"time"

	"github.com/google/pprof/profile"
)

// CPUSplit samples the process's CPU with Go's profiler (user and system
// time, 100 samples per second of CPU) and counts the samples by the
// value of one profiler label. A goroutine started under pprof.Do with
// that label carries it, and so does every goroutine it starts; the
// runtime's own work (the scheduler, the collector's background workers,
// goroutines a timer starts) carries none.
type CPUSplit struct {
	key string
	buf bytes.Buffer
	raw []byte
}

// StartCPUSplit starts the profiler. It fails if a CPU profile is already
// running (shardbench -cpuprofile).
func StartCPUSplit(key string) (*CPUSplit, error) {
	s := &CPUSplit{key: key}
	if err := pprof.StartCPUProfile(&s.buf); err != nil {
		return nil, err
	}
	return s, nil
}

// Stop stops the profiler and returns the CPU time it sampled while it
// ran, by the label's value ("" for samples without the label).
func (s *CPUSplit) Stop() (map[string]time.Duration, error) {
	pprof.StopCPUProfile()
	s.raw = s.buf.Bytes()
	p, err := profile.Parse(bytes.NewReader(s.raw))
	if err != nil {
		return nil, fmt.Errorf("cpu split: %w", err)
	}
	return splitSamples(p, s.key)
}

// Raw returns the profile Stop read, as go tool pprof reads it.
func (s *CPUSplit) Raw() []byte { return s.raw }

// splitSamples sums the CPU time of p's samples by the value of label key.
func splitSamples(p *profile.Profile, key string) (map[string]time.Duration, error) {
	cpu := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" && st.Unit == "nanoseconds" {
			cpu = i
		}
	}
	if cpu < 0 {
		return nil, fmt.Errorf("cpu split: the profile has no cpu/nanoseconds values")
	}
	out := map[string]time.Duration{}
	for _, sm := range p.Sample {
		v := ""
		if vs := sm.Label[key]; len(vs) > 0 {
			v = vs[0]
		}
		out[v] += time.Duration(sm.Value[cpu])
	}
	return out, nil
}

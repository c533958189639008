package redistest

import (
	"context"
	"testing"
	"time"
)

// Start-up and failover costs, for planning test suites. They take seconds
// per iteration; run them with a fixed count, e.g.
//
//	go test -run '^$' -bench . -benchtime 5x ./redistest/

// iterationTB runs the harness's cleanups at the end of each benchmark
// iteration instead of the end of the benchmark, so servers do not pile up.
type iterationTB struct {
	testing.TB
	cleanups []func()
}

func (t *iterationTB) Cleanup(f func()) { t.cleanups = append(t.cleanups, f) }

func (t *iterationTB) runCleanups() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
	t.cleanups = nil
}

func BenchmarkStartStandalone(b *testing.B) {
	for b.Loop() {
		tb := &iterationTB{TB: b}
		StartStandalone(tb)
		b.StopTimer()
		tb.runCleanups()
		b.StartTimer()
	}
}

func benchmarkStartCluster(b *testing.B, masters, replicas int) {
	for b.Loop() {
		tb := &iterationTB{TB: b}
		StartCluster(tb, masters, replicas)
		b.StopTimer()
		tb.runCleanups()
		b.StartTimer()
	}
}

func BenchmarkStartCluster3x0(b *testing.B) { benchmarkStartCluster(b, 3, 0) }
func BenchmarkStartCluster3x1(b *testing.B) { benchmarkStartCluster(b, 3, 1) }
func BenchmarkStartCluster6x0(b *testing.B) { benchmarkStartCluster(b, 6, 0) }
func BenchmarkStartCluster6x1(b *testing.B) { benchmarkStartCluster(b, 6, 1) }

// BenchmarkFailoverAfterKill times SIGKILL of a master until the whole
// 3×1 cluster agrees on its promoted replica.
func BenchmarkFailoverAfterKill(b *testing.B) {
	var total time.Duration
	n := 0
	for b.Loop() {
		b.StopTimer()
		tb := &iterationTB{TB: b}
		c := StartCluster(tb, 3, 1)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		old, err := c.MasterOfSlot(ctx, 0)
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		began := time.Now()
		if err := old.Kill(); err != nil {
			b.Fatal(err)
		}
		if _, err := c.WaitFailover(ctx, old); err != nil {
			b.Fatal(err)
		}
		total += time.Since(began)
		n++
		b.StopTimer()
		cancel()
		tb.runCleanups()
		b.StartTimer()
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(n), "ms/failover")
}

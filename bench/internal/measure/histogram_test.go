package measure

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBucketUpperBoundsItsValues(t *testing.T) {
	for _, v := range []uint64{0, 1, 15, 16, 17, 31, 32, 100, 1000, 123456, 1 << 30, 1<<40 + 12345} {
		b := bucketOf(v)
		assert.GreaterOrEqual(t, bucketUpper(b), v, "value %d", v)
		if b > 0 {
			assert.Less(t, bucketUpper(b-1), v, "value %d belongs above bucket %d", v, b-1)
		}
	}
}

func TestQuantilesWithinBucketError(t *testing.T) {
	var h Histogram
	for i := 1; i <= 10000; i++ {
		h.Record(time.Duration(i) * time.Microsecond)
	}
	require.EqualValues(t, 10000, h.Count())
	for _, q := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 5000 * time.Microsecond}, {0.99, 9900 * time.Microsecond}, {0.999, 9990 * time.Microsecond}} {
		got := h.Quantile(q.q)
		assert.GreaterOrEqual(t, got, q.want, "q=%v", q.q)
		assert.LessOrEqual(t, float64(got), float64(q.want)*1.07, "q=%v", q.q)
	}
}

func TestEmptyAndNegative(t *testing.T) {
	var h Histogram
	assert.Zero(t, h.Quantile(0.99))
	h.Record(-time.Second)
	assert.Zero(t, h.Quantile(1))
}

func TestConcurrentRecord(t *testing.T) {
	var h Histogram
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 1000 {
				h.Record(time.Duration(i))
			}
		}()
	}
	wg.Wait()
	assert.EqualValues(t, 8000, h.Count())
}

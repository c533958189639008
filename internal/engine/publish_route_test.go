package engine

import (
	"testing"

	"github.com/redis/rueidis"
	"github.com/stretchr/testify/assert"
)

type namedClient struct {
	rueidis.Client
	name string
}

func TestPublishRoutePicksByConcurrency(t *testing.T) {
	direct, batched := &namedClient{name: "direct"}, &namedClient{name: "batched"}
	r := &PublishRoute{Direct: direct, Batched: batched, Threshold: 4}
	for n, want := range map[int64]string{1: "direct", 4: "direct", 5: "batched", 128: "batched"} {
		assert.Equal(t, want, r.pick(n).(*namedClient).name, "%d in flight", n)
	}
	only := &PublishRoute{Direct: direct, Threshold: 4}
	assert.Equal(t, "direct", only.pick(1000).(*namedClient).name, "without a batched client")
}

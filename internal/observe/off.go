//go:build shardcast_noobserve

// The per-message observability is off in this build: workers
// record no lag and no handler time, and hot-channel detection is off
// whatever Options.HotSampleRate says (counters stay). The tag exists to
// measure what that observability costs, comparing
//
//	go test -c -o on.test ./sharded/
//	go test -c -tags shardcast_noobserve -o off.test ./sharded/
//
// in alternating runs of BenchmarkPublishDeliver. It is not for
// production, and the tests of those features fail in it.

package observe

// Deliveries is false: see the package doc.
const Deliveries = false

//go:build shardcast_noobserve

package shardcast

// observeDeliveries is false only in a build with the shardcast_noobserve
// tag, which compiles out the per-message observability: workers record no
// lag and no handler time, and hot-channel detection is off whatever
// Options.HotSampleRate says (counters stay). It exists to measure what
// that observability costs (issue 12: within 3% of it off), comparing
//
//	go test -c -o on.test ./sharded/
//	go test -c -tags shardcast_noobserve -o off.test ./sharded/
//
// in alternating runs of BenchmarkPublishDeliver. It is not for
// production, and the tests of those features fail in it.
const observeDeliveries = false

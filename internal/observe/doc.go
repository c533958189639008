// Package observe says whether the per-message observability (delivery lag,
// handler time, hot-channel sampling) is compiled in: always, except in a
// build with the shardcast_noobserve tag, which exists only to measure what
// that observability costs (see off.go).
package observe

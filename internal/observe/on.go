//go:build !shardcast_noobserve

package observe

// Deliveries is true in every normal build; see off.go.
const Deliveries = true

//go:build !shardcast_noobserve

package shardcast

// observeDeliveries is true in every normal build; see observe_off.go.
const observeDeliveries = true

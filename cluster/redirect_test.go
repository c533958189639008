package cluster

import (
	"strconv"
	"testing"

	"github.com/shardcast/shardcast/internal/resp"
	"github.com/stretchr/testify/assert"
)

// TestRefusedForNow: the server's own refusals (Redis's and Valkey's
// LOADING) are refusals for now; a script's error that only shares their
// code is not.
func TestRefusedForNow(t *testing.T) {
	for msg, want := range map[string]bool{
		"TRYAGAIN Multiple keys request during rehashing of slot":        true,
		"CLUSTERDOWN The cluster is down":                                true,
		"CLUSTERDOWN Hash slot not served":                               true,
		"CLUSTERDOWN The cluster is down and only accepts read commands": true,
		"LOADING Redis is loading the dataset in memory":                 true,
		"LOADING Valkey is loading the dataset in memory":                true,
		"TRYAGAIN later": false,
		"CLUSTERDOWN":    false,
		"LOADING  is loading the dataset in memory":       false,
		"LOADING my app is loading the dataset in memory": false,
		"ERR CLUSTERDOWN The cluster is down":             false,
	} {
		assert.Equal(t, want, refusedForNow(&resp.ServerError{Msg: msg}), msg)
	}
	assert.False(t, refusedForNow(nil))
}

// TestRedirectionNamesTheSlot: a MOVED or ASK is a redirection of a
// command of partition p only when it names p's slot.
func TestRedirectionNamesTheSlot(t *testing.T) {
	p := 7
	slot := wide.Slot(p)
	own := &resp.ServerError{Msg: "MOVED " + strconv.Itoa(int(slot)) + " 127.0.0.1:7001"}
	r, ok := redirection(own, p)
	assert.True(t, ok)
	assert.Equal(t, "127.0.0.1:7001", r.Addr)
	_, ok = redirection(&resp.ServerError{Msg: "ASK " + strconv.Itoa(int(slot+1)%16384) + " 127.0.0.1:7001"}, p)
	assert.False(t, ok, "another slot")
	_, ok = redirection(&resp.ServerError{Msg: "MOVED nowhere"}, p)
	assert.False(t, ok)
}

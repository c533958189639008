package redistest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseInfo(t *testing.T) {
	info := parseInfo("# Replication\r\nrole:master\r\nconnected_slaves:1\r\nslave0:ip=127.0.0.1,port=7001,state=online\r\n\r\n# Other\r\n")
	assert.Equal(t, map[string]string{
		"role": "master", "connected_slaves": "1", "slave0": "ip=127.0.0.1,port=7001,state=online",
	}, info)
}

func TestParseCommandStats(t *testing.T) {
	info := parseInfo("# Commandstats\r\n" +
		"cmdstat_spublish:calls=12,usec=30,usec_per_call=2.50,rejected_calls=0,failed_calls=1\r\n" +
		"cmdstat_client|list:calls=3,usec=9,usec_per_call=3.00,rejected_calls=0,failed_calls=0\r\n" +
		"errorstat_MOVED:count=1\r\n")
	calls, err := parseCommandStats(info)
	require.NoError(t, err)
	assert.Equal(t, map[string]int64{"spublish": 12, "client|list": 3}, calls)

	_, err = parseCommandStats(map[string]string{"cmdstat_get": "calls=x"})
	assert.ErrorIs(t, err, ErrProtocol)
}

func TestParseClientList(t *testing.T) {
	clients := parseClientList("id=3 addr=127.0.0.1:5000 laddr=127.0.0.1:6379 name= ssub=2 cmd=ssubscribe\n" +
		"id=4 addr=127.0.0.1:5001 name=pub sub=0 cmd=client|list\n")
	require.Len(t, clients, 2)
	assert.Equal(t, "3", clients[0]["id"])
	assert.Equal(t, "", clients[0]["name"])
	assert.Equal(t, "2", clients[0]["ssub"])
	assert.Equal(t, "client|list", clients[1]["cmd"])
}

// TestReadOnlyScripts: EVAL_RO calls are summed over the servers, plain
// EVAL is not counted, and a stopped server counts none.
func TestReadOnlyScripts(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 30*time.Second)
	a, b := StartStandalone(t), StartStandalone(t)
	for _, s := range []*Server{a, a, b} {
		_, err := s.Do(ctx, "EVAL_RO", "return 1", "0")
		require.NoError(t, err)
	}
	_, err := a.Do(ctx, "EVAL", "return 1", "0")
	require.NoError(t, err)
	n, err := ReadOnlyScripts(ctx, a, b)
	require.NoError(t, err)
	assert.Equal(t, int64(3), n)
	require.NoError(t, b.Kill())
	n, err = ReadOnlyScripts(ctx, a, b)
	require.NoError(t, err)
	assert.Equal(t, int64(2), n)
}

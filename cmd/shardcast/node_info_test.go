package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestParseInfo(t *testing.T) {
	text := "# Server\r\nredis_version:7.0.15\r\nserver_time_usec:1700000000123456\r\n\r\n" +
		"# Clients\r\nconnected_clients:7\r\nclient_recent_max_output_buffer:20504\r\n" +
		"# Stats\r\npubsub_channels:3\r\npubsubshard_channels:42\r\n" +
		"# Replication\r\nrole:master\r\nconnected_slaves:2\r\n" +
		"slave0:ip=127.0.0.1,port=17007,state=online,offset=98,lag=1\r\n" +
		"slave1:ip=::1,port=17008,state=wait_bgsave,offset=0,lag=0\r\n" +
		"slave_repl_offset:98\r\n" +
		"# CPU\r\nused_cpu_sys:1.500000\r\nused_cpu_user:2.250000\r\nused_cpu_sys_children:9.0\r\n" +
		"# Commandstats\r\ncmdstat_spublish:calls=1000,usec=3,usec_per_call=3.00\r\ncmdstat_client|list:calls=2,usec=1\r\n" +
		"cmdstat_bad:usec=1\r\n# Cluster\r\ncluster_enabled:1\r\n"
	got := parseInfo(text)
	assert.Equal(t, time.UnixMicro(1700000000123456), got.At)
	assert.True(t, got.ClusterEnabled)
	assert.Equal(t, "master", got.Role)
	assert.Equal(t, 7, got.Clients)
	assert.Equal(t, int64(20504), got.RecentMaxOutput)
	assert.Equal(t, 3, got.Channels)
	assert.Equal(t, 42, got.ShardChannels)
	assert.InDelta(t, 3.75, got.CPU, 1e-9)
	assert.Equal(t, map[string]int64{"spublish": 1000, "client|list": 2}, got.Calls)
	assert.Equal(t, []replicaLink{
		{Addr: "127.0.0.1:17007", State: "online", Lag: 1},
		{Addr: "[::1]:17008", State: "wait_bgsave"},
	}, got.Replicas)

	replica := parseInfo("role:slave\nmaster_link_status:down\n")
	assert.Equal(t, "down", replica.MasterLink)
	assert.Zero(t, parseInfo("garbage\n:\nconnected_clients:x\n").Clients)
}

func TestParseClientList(t *testing.T) {
	text := "id=3 addr=127.0.0.1:1 sub=0 psub=0 ssub=12 omem=0 cmd=ssubscribe\n" +
		"id=4 addr=127.0.0.1:2 sub=2 psub=0 ssub=0 omem=16384 cmd=subscribe\n" +
		"id=5 addr=127.0.0.1:3 sub=0 psub=0 ssub=0 omem=100 cmd=info\n" +
		"id=6 addr=127.0.0.1:4 flags=N omem=bad\n" +
		"id=7 addr=127.0.0.1:5 flags=S sub=0 omem=20504 cmd=replconf\n"
	assert.Equal(t, outputStats{Subscribers: 2, Backlogged: 2, Total: 16484, Max: 16384}, parseClientList(text))
	assert.Equal(t, outputStats{}, parseClientList(""))
}

func TestParseClusterNodes(t *testing.T) {
	text := "" +
		"aaa 127.0.0.1:17001@27001 myself,master - 0 0 1 connected 0-5460\n" +
		"bbb 127.0.0.1:17004@27004,host-b slave aaa 0 1 1 connected\n" +
		"ccc :0@0 master,noaddr - 0 0 0 disconnected\n" +
		"ddd 127.0.0.1:17003@27003 master,fail - 0 0 3 disconnected 5461-16383\n" +
		"short line\n"
	got := parseClusterNodes(text)
	assert.Len(t, got, 4)
	assert.Equal(t, clusterNode{ID: "aaa", Addr: "127.0.0.1:17001", IPAddr: "127.0.0.1:17001", Flags: []string{"myself", "master"}, Link: "connected", HasSlots: true}, got[0])
	assert.Equal(t, clusterNode{ID: "bbb", Addr: "127.0.0.1:17004", IPAddr: "127.0.0.1:17004", HostAddr: "host-b:17004", Flags: []string{"slave"}, MasterID: "aaa", Link: "connected"}, got[1])
	assert.Empty(t, got[2].Addr)
	assert.True(t, got[3].master())
	assert.True(t, got[3].failing())
	assert.False(t, got[0].failing())
}

package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestProcStatTicksSumsUtimeAndStime(t *testing.T) {
	// A real redis-server line, with utime 1234 and stime 567.
	line := "4242 (redis-server) S 1 4242 4242 0 -1 4194560 1543 0 0 0 1234 567 0 0 20 0 5 0 123456 12345678 2345 18446744073709551615 1 1 0 0 0 0 0 4096 17987 0 0 0 17 1 0 0 0 0 0\n"
	got, err := procStatTicks(line)
	require.NoError(t, err)
	assert.Equal(t, int64(1234+567), got)

	// The command name may hold spaces and parentheses.
	got, err = procStatTicks("7 (redis-server *:6379 (x)) R 1 7 7 0 -1 0 0 0 0 0 10 20 0 0 20 0 1 0 1 1 1")
	require.NoError(t, err)
	assert.Equal(t, int64(30), got)

	_, err = procStatTicks("7 redis-server R 1 7")
	assert.Error(t, err)
	_, err = procStatTicks("7 (redis-server) R 1 7 7")
	assert.Error(t, err)
	_, err = procStatTicks("7 (redis-server) R 1 7 7 0 -1 0 0 0 0 0 x 20 0")
	assert.Error(t, err)
}

func TestSsubConnsCountsShardedSubscribers(t *testing.T) {
	list := "id=3 addr=127.0.0.1:5 laddr=127.0.0.1:6 fd=8 name= age=1 idle=0 flags=P db=0 sub=0 psub=0 ssub=12 multi=-1 cmd=ssubscribe\n" +
		"id=4 addr=127.0.0.1:7 fd=9 name= age=1 idle=0 flags=N db=0 sub=3 psub=0 ssub=0 multi=-1 cmd=subscribe\n" +
		"id=5 addr=127.0.0.1:8 fd=10 name= age=1 idle=0 flags=N db=0 sub=0 psub=0 ssub=0 multi=-1 cmd=client|list\n" +
		"id=6 addr=127.0.0.1:9 fd=11 name= age=1 idle=0 flags=P db=0 sub=0 psub=0 ssub=1 multi=-1 cmd=ssubscribe\n"
	assert.Equal(t, 2, ssubConns(list))
	assert.Equal(t, 0, ssubConns(""))
}

func TestSetRatiosDividesByTheMastersRowOfTheSameRound(t *testing.T) {
	rs := []fanoutResult{
		{Row: "shardcast Masters", Round: 1, BusiestCPUPerMsg: 200},
		{Row: "shardcast AllNodes", Round: 1, BusiestCPUPerMsg: 100},
		{Row: "shardcast Masters", Round: 2, BusiestCPUPerMsg: 400},
		{Row: "shardcast AllNodes", Round: 2, BusiestCPUPerMsg: 100},
		{Row: "shardcast AllNodes", Round: 3, BusiestCPUPerMsg: 100}, // no Masters row
		{Row: "shardcast Replicas", Round: 2, BusiestCPUPerMsg: 50, Error: "boom"},
	}
	setRatios(rs)
	assert.InDelta(t, 1.0, rs[0].Ratio, 1e-9)
	assert.InDelta(t, 0.5, rs[1].Ratio, 1e-9)
	assert.InDelta(t, 0.25, rs[3].Ratio, 1e-9)
	assert.Zero(t, rs[4].Ratio)
	assert.Zero(t, rs[5].Ratio)
	assert.Equal(t, "0.25×", fmtRatio(rs[3].Ratio))
	assert.Equal(t, "–", fmtRatio(0))
}

func TestTicksPerMsg(t *testing.T) {
	// 50 ticks at 100/s is 0.5 s of CPU; over 1e6 messages, 500 ns each.
	assert.InDelta(t, 500.0, ticksPerMsg(50, 100, 1e6), 1e-9)
	assert.Zero(t, ticksPerMsg(50, 100, 0))
}

func TestFanoutRowsOfKeepsRunOrder(t *testing.T) {
	rows, err := fanoutRowsOf("centrifuge-replica, masters,allnodes")
	require.NoError(t, err)
	var names []string
	for _, r := range rows {
		names = append(names, r.label())
	}
	assert.Equal(t, []string{"shardcast Masters", "shardcast AllNodes", "centrifuge SubscribeOnReplica"}, names)
	_, err = fanoutRowsOf("masters,nope")
	assert.Error(t, err)
	_, err = fanoutRowsOf("")
	assert.Error(t, err)
}

func TestKeyInSlotsAndMinMax(t *testing.T) {
	k := keyInSlots("w:", 10923, 16383)
	s := keySlot(k)
	assert.True(t, s >= 10923 && s <= 16383, "%s in slot %d", k, s)
	lo, hi := minMax(map[string]int{"a": 3, "b": 0, "c": 7})
	assert.Equal(t, [2]int{0, 7}, [2]int{lo, hi})
}

func TestFanoutTargetIsTheMedianAndNeedsRedis74(t *testing.T) {
	rs := []fanoutResult{
		{Row: "shardcast AllNodes", Ratio: 0.9},
		{Row: "shardcast AllNodes", Ratio: 0.5},
		{Row: "shardcast AllNodes", Ratio: 0.6},
		{Row: "shardcast Replicas", Ratio: 0.1},
	}
	tg, ok := fanoutTarget(rs, "7.4.1")
	require.True(t, ok)
	assert.Equal(t, "met", tg.Met)
	assert.Contains(t, tg.Got, "0.60×")
	tg, _ = fanoutTarget(rs, "7.0.15")
	assert.Contains(t, tg.Met, "n/a")
	_, ok = fanoutTarget(rs[3:], "7.4.1")
	assert.False(t, ok)
	assert.Equal(t, "1.0k of 2.0k", fmtPubRate(1000, 2000))
	assert.Equal(t, "2.0k", fmtPubRate(1990, 2000))
}

func TestSkipBacklogBoundsTheCatchUp(t *testing.T) {
	assert.Equal(t, 5, skipBacklog(8, 5, 10))    // 3 overdue: catch up
	assert.Equal(t, 90, skipBacklog(100, 5, 10)) // 95 overdue: only the last 10
	assert.Equal(t, 7, skipBacklog(7, 7, 10))
}

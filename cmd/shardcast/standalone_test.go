package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/redistest"
	"github.com/shardcast/shardcast/sharded"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

func TestStandalone(t *testing.T) {
	a, b := redistest.StartStandalone(t), redistest.StartStandalone(t)
	shards := a.Addr() + "," + b.Addr()
	t.Run("InspectShards", func(t *testing.T) { testInspectShards(t, a, b) })
	t.Run("KeyShards", func(t *testing.T) { testKeyShards(t, a, b) })
	t.Run("InspectRecordedInstances", func(t *testing.T) { testInspectRecordedInstances(t, a, b) })
	t.Run("SubPub", func(t *testing.T) { roundTrip(t, "-shards", shards) })
	t.Run("SubPubURL", func(t *testing.T) { roundTrip(t, "-shards", "redis://"+a.Addr()+",redis://"+b.Addr()) })
	t.Run("SubEndsOnCancel", func(t *testing.T) { testSubEndsOnCancel(t, shards) })
	t.Run("PubFollow", func(t *testing.T) { testPubFollow(t, a, b) })
	t.Run("PubStdinEndsOnCancel", func(t *testing.T) { testPubStdinEndsOnCancel(t, shards) })
	t.Run("PubKeyedBadLine", func(t *testing.T) {
		r := runCmd(testCtx(t, 20*time.Second), "ok payload\nnospace\n", nil, "pub", "-shards", shards, "-keyed")
		assert.ErrorContains(t, r.runErr, "stdin line 2")
	})
	t.Run("StandaloneGivenToCluster", func(t *testing.T) {
		r := runCmd(testCtx(t, 20*time.Second), "", nil, "inspect", "-cluster", a.Addr())
		assert.True(t, errors.Is(r.runErr, ErrNotCluster), "%v", r.runErr)
		assert.ErrorContains(t, r.runErr, "-shards")
		r = runCmd(testCtx(t, 20*time.Second), "", nil, "key", "-cluster", a.Addr(), "x")
		assert.True(t, errors.Is(r.runErr, ErrNotCluster), "%v", r.runErr)
	})
}

func testInspectShards(t *testing.T, a, b *redistest.Server) {
	ctx := testCtx(t, 30*time.Second)
	sub, err := sharded.New(sharded.Config{Addrs: []string{a.Addr(), b.Addr()}, Options: shardcastHandler()})
	require.NoError(t, err)
	defer func() { require.NoError(t, sub.Close()) }()
	channels := []string{"c1", "c2", "c3", "c4", "c5", "c6", "c7", "c8"}
	require.NoError(t, sub.Subscribe(ctx, channels...))
	want := make([]int, 2)
	for _, ch := range channels {
		want[sub.Shard(ch)]++
	}

	var r shardsReport
	out := mustRun(t, ctx, "inspect", "-json", "-sample", "50ms", "-shards", a.Addr()+","+b.Addr())
	require.NoError(t, json.Unmarshal([]byte(out), &r))
	require.Len(t, r.Instances, 2)
	assert.Equal(t, sub.Fingerprint(), r.Fingerprint)
	for i, in := range r.Instances {
		assert.Equal(t, want[i], in.Channels, in.Addr)
		assert.GreaterOrEqual(t, in.Output.Subscribers, 1, in.Addr)
	}

	text := mustRun(t, ctx, "inspect", "-sample", "10ms", "-shards", a.Addr()+","+b.Addr())
	assert.Contains(t, text, "sharded: 2 instances; fingerprint "+sub.Fingerprint())
	assert.Contains(t, text, "channels per instance, busiest/mean")

	// One instance down: the report shows it, and the command fails.
	down := closedAddr(t)
	res := runCmd(ctx, "", nil, "inspect", "-sample", "10ms", "-shards", a.Addr()+","+down)
	assert.ErrorIs(t, res.runErr, ErrUnreadNodes)
	assert.Contains(t, res.out, down+"  unreadable")
	assert.Contains(t, res.out, "unreadable: "+down+": cannot connect")
}

func testKeyShards(t *testing.T, a, b *redistest.Server) {
	ctx := testCtx(t, 30*time.Second)
	pub, err := sharded.New(sharded.Config{Addrs: []string{a.Addr(), b.Addr()}})
	require.NoError(t, err)
	defer func() { require.NoError(t, pub.Close()) }()
	channels := []string{"room:1", "room:2", "room:3", "room:4", "room:5"}
	var got []shardKey
	out := mustRun(t, ctx, append([]string{"key", "-json", "-shards", a.Addr() + "," + b.Addr()}, channels...)...)
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	addrs := []string{a.Addr(), b.Addr()}
	for i, ch := range channels {
		assert.Equal(t, shardKey{Channel: ch, Instance: pub.Shard(ch), Addr: addrs[pub.Shard(ch)]}, got[i])
	}
}

func testSubEndsOnCancel(t *testing.T, shards string) {
	ctx := testCtx(t, 30*time.Second)
	subCtx, cancel := context.WithCancel(ctx)
	var errOut syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(subCtx, []string{"sub", "-shards", shards, "quiet"}, stdio{out: &syncBuffer{}, err: &errOut})
	}()
	waitFor(t, ctx, "sub to subscribe", func() bool { return strings.Contains(errOut.String(), "subscribed") })
	cancel() // what Ctrl-C does through signal.NotifyContext
	select {
	case err := <-done:
		assert.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("sub did not return after its context ended")
	}
	assert.Contains(t, errOut.String(), "received 0 message(s)")
}

func TestInspectUnreachable(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	down := closedAddr(t)
	r := runCmd(ctx, "", nil, "inspect", "-cluster", down)
	assert.ErrorContains(t, r.runErr, down+": cannot connect")
	r = runCmd(ctx, "", nil, "key", "-cluster", down, "x")
	assert.ErrorContains(t, r.runErr, down+": cannot connect")
}

func TestPassword(t *testing.T) {
	// An ACL user for -user; the password of the default user is set
	// after the start, as the harness cannot log in.
	s := redistest.StartStandalone(t, redistest.WithArgs("--user", "ops", "on", ">opspw", "~*", "&*", "+@all"))
	ctx := testCtx(t, 20*time.Second)
	_, err := s.Do(ctx, "CONFIG", "SET", "requirepass", "s3cret")
	require.NoError(t, err)
	r := runCmd(ctx, "", nil, "inspect", "-sample", "10ms", "-shards", s.Addr())
	assert.ErrorIs(t, r.runErr, ErrUnreadNodes)
	assert.Contains(t, r.out, "NOAUTH")
	r = runCmd(ctx, "", map[string]string{"REDISCLI_AUTH": "s3cret"}, "inspect", "-sample", "10ms", "-shards", s.Addr())
	assert.NoError(t, r.runErr, r.out)
	r = runCmd(ctx, "", nil, "inspect", "-sample", "10ms", "-password", "s3cret", "-shards", s.Addr())
	assert.NoError(t, r.runErr, r.out)
	r = runCmd(ctx, "", nil, "inspect", "-sample", "10ms", "-shards", "redis://:s3cret@"+s.Addr())
	assert.NoError(t, r.runErr, r.out)
	r = runCmd(ctx, "", nil, "inspect", "-sample", "10ms", "-user", "ops", "-password", "opspw", "-shards", s.Addr())
	assert.NoError(t, r.runErr, r.out)
	r = runCmd(ctx, "", nil, "inspect", "-sample", "10ms", "-user", "ops", "-password", "wrong", "-shards", s.Addr())
	assert.ErrorIs(t, r.runErr, ErrUnreadNodes)
	assert.Contains(t, r.out, "WRONGPASS")
}

// testPubFollow: while a broker over both instances runs, `pub -shards A`
// is refused as a layout mismatch, and with -follow it adopts both
// instances and its message reaches the running broker on any channel.
func testPubFollow(t *testing.T, a, b *redistest.Server) {
	ctx := testCtx(t, 30*time.Second)
	rec := make(chan string, 16)
	opts := shardcastHandler()
	opts.Handler = func(m shardcast.Message) { rec <- m.Channel + " " + string(m.Payload) }
	fleet, err := sharded.New(sharded.Config{Addrs: []string{a.Addr(), b.Addr()}, Options: opts,
		Agreement: shardcast.Agreement{App: "clifollow:"}})
	require.NoError(t, err)
	defer func() { require.NoError(t, fleet.Close()) }()
	// A channel on the second instance, which -shards A does not name.
	ch := "follow-0"
	for i := 0; fleet.Shard(ch) != 1; i++ {
		ch = "follow-" + strconv.Itoa(i)
	}
	require.NoError(t, fleet.Subscribe(ctx, ch))

	r := runCmd(ctx, "", nil, "pub", "-shards", a.Addr(), "-app", "clifollow:", ch, "refused")
	assert.ErrorIs(t, r.runErr, shardcast.ErrLayoutMismatch)
	r = runCmd(ctx, "", nil, "pub", "-shards", a.Addr(), "-app", "clifollow:", "-follow", ch, "followed")
	require.NoError(t, r.runErr, r.err)
	assert.Contains(t, r.err, "sharded engine, 2 instances, fingerprint "+fleet.Fingerprint())
	select {
	case got := <-rec:
		assert.Equal(t, ch+" followed", got)
	case <-ctx.Done():
		t.Fatal("the followed publish did not arrive")
	}
}

// testPubStdinEndsOnCancel: pub reading an open stdin that sends nothing
// returns when its context ends (Ctrl-C), with an error that says it was
// interrupted.
func testPubStdinEndsOnCancel(t *testing.T, shards string) {
	ctx := testCtx(t, 30*time.Second)
	pubCtx, cancel := context.WithCancel(ctx)
	in, feed := io.Pipe()
	defer feed.Close() // ends the reader goroutine pub leaves behind
	var errOut syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(pubCtx, []string{"pub", "-shards", shards, "room"}, stdio{in: in, out: &syncBuffer{}, err: &errOut})
	}()
	time.Sleep(200 * time.Millisecond) // pub connects and waits for a line
	cancel()
	select {
	case err := <-done:
		require.Error(t, err)
		assert.ErrorContains(t, err, "interrupted after 0 message(s)")
		assert.ErrorIs(t, err, context.Canceled)
	case <-ctx.Done():
		t.Fatal("pub did not return after its context ended")
	}
}

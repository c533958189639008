package pubconn

import (
	"bufio"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardcast/shardcast/internal/resp"
	"github.com/shardcast/shardcast/internal/subconn"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDo: commands of any reply type share the pipeline with publishes,
// and each caller gets its own reply decoded.
func TestDo(t *testing.T) {
	s := redistest.StartStandalone(t)
	p := newPub(t, subconn.Dialer{Addr: s.Addr()}, 5*time.Second)
	ctx := testCtx(t)

	for _, tc := range []struct {
		args []string
		want any
	}{
		{[]string{"SET", "k", "v"}, "OK"},
		{[]string{"GET", "k"}, "v"},
		{[]string{"GET", "missing"}, nil},
		{[]string{"INCR", "n"}, int64(1)},
		{[]string{"RPUSH", "l", "a", "b"}, int64(2)},
		{[]string{"LRANGE", "l", "0", "-1"}, []any{"a", "b"}},
		{[]string{"EVAL", "return {1, 'x', {2}}", "0"}, []any{int64(1), "x", []any{int64(2)}}},
	} {
		got, err := p.Do(ctx, tc.args...)
		require.NoError(t, err, "%v", tc.args)
		assert.Equal(t, tc.want, got, "%v", tc.args)
	}
	_, err := p.Do(ctx, "INCR", "k")
	se, ok := resp.IsServerError(err)
	require.True(t, ok, "an error reply is the error: %v", err)
	assert.Contains(t, se.Msg, "not an integer")
	_, err = p.Do(ctx)
	assert.Error(t, err)

	// Interleaved with publishes from other goroutines, every reply still
	// reaches its own caller.
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			key := "c" + strconv.Itoa(g)
			for i := 1; i <= 200; i++ {
				if g%2 == 0 {
					assert.NoError(t, p.Publish(ctx, "ch", []byte("x"), true, time.Time{}))
					continue
				}
				v, err := p.Do(ctx, "INCR", key)
				assert.NoError(t, err)
				assert.Equal(t, int64(i), v, key)
			}
		})
	}
	wg.Wait()
}

// TestDoAsking: ASKING precedes each command of DoAsking, its reply (here
// an error: the server is not a cluster node) is swallowed, and the
// pipeline stays matched while other callers' commands interleave.
func TestDoAsking(t *testing.T) {
	s := redistest.StartStandalone(t)
	p := newPub(t, subconn.Dialer{Addr: s.Addr()}, 5*time.Second)
	ctx := testCtx(t)
	_, err := p.DoAsking(ctx)
	assert.Error(t, err)

	const rounds = 100
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			key := "a" + strconv.Itoa(g)
			for i := 1; i <= rounds; i++ {
				do := p.Do
				if g%2 == 0 {
					do = p.DoAsking
				}
				v, err := do(ctx, "INCR", key)
				assert.NoError(t, err)
				assert.Equal(t, int64(i), v, key)
			}
		})
	}
	wg.Wait()
	stats, err := s.CommandStats(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(2*rounds), stats["asking"], "one ASKING per command of DoAsking")
	assert.Equal(t, int64(4*rounds), stats["incr"])

	before := p.Published()
	_, err = p.DoAsking(ctx, "SPUBLISH", "ch", "x")
	require.NoError(t, err)
	_, err = p.Do(ctx, "PUBLISH", "ch", "x")
	require.NoError(t, err)
	assert.Equal(t, before+2, p.Published(), "publishes sent with Do count as published")
}

// TestScript: a script call goes out as EVALSHA or EVAL with its keys and
// args in place (numkeys counted), NOSCRIPT comes back as the error,
// asking sends ASKING first, and only an uncounted call stays out of
// Published.
func TestScript(t *testing.T) {
	s := redistest.StartStandalone(t)
	p := newPub(t, subconn.Dialer{Addr: s.Addr()}, 5*time.Second)
	ctx := testCtx(t)
	src := "return {KEYS[1], KEYS[2], ARGV[1], #KEYS, #ARGV}"
	want := []any{"k1", "k2", "a1", int64(2), int64(2)}

	got, err := p.Script(ctx, false, false, false, "EVAL", src, []string{"k1", "k2"}, []string{"a1", ""})
	require.NoError(t, err)
	assert.Equal(t, want, got)

	sha, err := p.Do(ctx, "SCRIPT", "LOAD", src)
	require.NoError(t, err)
	got, err = p.Script(ctx, false, false, false, "EVALSHA", sha.(string), []string{"k1", "k2"}, []string{"a1", ""})
	require.NoError(t, err)
	assert.Equal(t, want, got)
	got, err = p.Script(ctx, false, false, false, "EVAL", "return #KEYS + #ARGV", nil, nil)
	require.NoError(t, err)
	assert.Equal(t, int64(0), got, "no keys, no args")

	_, err = p.Script(ctx, false, false, false, "EVALSHA", "0000000000000000000000000000000000000000", nil, nil)
	se, ok := resp.IsServerError(err)
	require.True(t, ok, "%v", err)
	assert.Contains(t, se.Msg, "NOSCRIPT")

	before := p.Published()
	_, err = p.Script(ctx, false, true, false, "EVAL", "return 1", nil, nil)
	require.NoError(t, err)
	assert.Equal(t, before, p.Published(), "an uncounted script")
	_, err = p.Script(ctx, true, false, false, "EVAL", "return 1", nil, nil)
	require.NoError(t, err)
	assert.Equal(t, before+1, p.Published(), "a script may publish: counted")
	stats, err := s.CommandStats(ctx)
	require.NoError(t, err)
	assert.Equal(t, int64(1), stats["asking"], "ASKING before the asking call only")
}

// TestScriptRunID: a script that asks for it gets its server's run_id as
// its last ARGV, learned once per wire; after a restart the new wire
// gives the new process's. A user INFO is denied to gets "", and the
// script still runs.
func TestScriptRunID(t *testing.T) {
	s := redistest.StartStandalone(t, redistest.WithArgs("--user", "noinfo", "on", ">pw", "~*", "&*", "+@all", "-info"))
	p := newPub(t, subconn.Dialer{Addr: s.Addr()}, 5*time.Second)
	ctx := testCtx(t)
	runID := func() string {
		info, err := s.Do(ctx, "INFO", "server")
		require.NoError(t, err)
		id := runIDOf(info.(string))
		require.Len(t, id, 40)
		return id
	}
	last := "return {ARGV[#ARGV], #ARGV}"

	first := runID()
	got, err := p.Script(ctx, false, false, true, "EVAL", last, []string{"k"}, []string{"a"})
	require.NoError(t, err)
	assert.Equal(t, []any{first, int64(2)}, got)
	got, err = p.Script(ctx, false, false, false, "EVAL", last, []string{"k"}, []string{"a"})
	require.NoError(t, err)
	assert.Equal(t, []any{"a", int64(1)}, got, "no run_id unless asked")
	stats, err := s.CommandStats(ctx)
	require.NoError(t, err)
	got, err = p.Script(ctx, false, false, true, "EVAL", last, nil, nil)
	require.NoError(t, err)
	assert.Equal(t, []any{first, int64(1)}, got)
	after, err := s.CommandStats(ctx)
	require.NoError(t, err)
	assert.Equal(t, stats["info"]+1, after["info"], "INFO once per wire (the +1 is CommandStats' own)")

	require.NoError(t, s.Restart(ctx))
	second := runID()
	require.NotEqual(t, first, second)
	require.Eventually(t, func() bool {
		got, err = p.Script(ctx, false, false, true, "EVAL", last, nil, nil)
		return err == nil
	}, 10*time.Second, 20*time.Millisecond)
	assert.Equal(t, []any{second, int64(1)}, got, "a new wire learns the restarted server's run_id")

	denied := newPub(t, subconn.Dialer{Addr: s.Addr(), Username: "noinfo", Password: "pw"}, 5*time.Second)
	got, err = denied.Script(ctx, false, false, true, "EVAL", last, nil, []string{"a"})
	require.NoError(t, err)
	assert.Equal(t, []any{"", int64(2)}, got, "INFO denied: an empty run_id")
}

// TestScriptRunIDRetriedAfterLoading: a run_id the server could not give
// for now (LOADING) fails that call and is asked again by the next; only
// a lasting refusal (NOPERM, INFO renamed away) leaves it unknown for the
// wire's life.
func TestScriptRunIDRetriedAfterLoading(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	var infos atomic.Int32
	go func() {
		nc, err := ln.Accept()
		if err != nil {
			return
		}
		defer nc.Close()
		r := bufio.NewReader(nc)
		for {
			args, err := redistest.ReadCommand(r)
			if err != nil {
				return
			}
			var reply string
			switch strings.ToUpper(args[0]) {
			case "INFO":
				if infos.Add(1) == 1 {
					reply = "-LOADING Redis is loading the dataset in memory\r\n"
				} else {
					body := "# Server\r\nrun_id:0123456789abcdef0123456789abcdef01234567\r\n"
					reply = "$" + strconv.Itoa(len(body)) + "\r\n" + body + "\r\n"
				}
			default: // the script: its last argument back
				last := args[len(args)-1]
				reply = "$" + strconv.Itoa(len(last)) + "\r\n" + last + "\r\n"
			}
			if _, err := nc.Write([]byte(reply)); err != nil {
				return
			}
		}
	}()
	p := newPub(t, subconn.Dialer{Addr: ln.Addr().String()}, 5*time.Second)
	ctx := testCtx(t)
	_, err = p.Script(ctx, false, false, true, "EVAL", "return ARGV[#ARGV]", nil, nil)
	require.Error(t, err)
	assert.ErrorContains(t, err, "LOADING")
	assert.ErrorIs(t, err, ErrNotSent, "the script was not sent")
	got, err := p.Script(ctx, false, false, true, "EVAL", "return ARGV[#ARGV]", nil, nil)
	require.NoError(t, err)
	assert.Equal(t, "0123456789abcdef0123456789abcdef01234567", got)
	assert.Equal(t, int32(2), infos.Load(), "asked again after LOADING")
}

// TestIntReplies: the reader's fast path takes only whole integer replies
// from the front of the buffer, up to its room, and stops at anything
// else, which the reply-by-reply path then reads.
func TestIntReplies(t *testing.T) {
	ends := make([]int, 3)
	for _, tc := range []struct {
		buf  string
		want []int
	}{
		{":1\r\n:22\r\n", []int{4, 9}},
		{":1\r\n:-5\r\n:0\r\n:7\r\n", []int{4, 9, 13}}, // room for 3
		{":1\r\n+OK\r\n", []int{4}},
		{":1\r\n:2\r", []int{4}},
		{":1\r\n:2", []int{4}},
		{":\r\n", nil},
		{":-\r\n", nil},
		{":1x\r\n", nil},
		{":1\n", nil},
		{"$1\r\nx\r\n", nil},
		{"-ERR x\r\n", nil},
		{":12345678901234567890\r\n", []int{23}},
		{":123456789012345678901\r\n", nil},
		{"", nil},
	} {
		n := intReplies([]byte(tc.buf), ends)
		assert.Equal(t, len(tc.want), n, "%q", tc.buf)
		if len(tc.want) > 0 {
			assert.Equal(t, tc.want, ends[:n], "%q", tc.buf)
		}
	}
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestUsage(t *testing.T) {
	ctx := context.Background()
	r := runCmd(ctx, "", nil)
	assert.Error(t, r.runErr)
	assert.Contains(t, r.err, "inspect")
	r = runCmd(ctx, "", nil, "-h")
	assert.ErrorIs(t, r.runErr, flag.ErrHelp)
	r = runCmd(ctx, "", nil, "bogus")
	assert.ErrorContains(t, r.runErr, `unknown command "bogus"`)
	r = runCmd(ctx, "", nil, "inspect", "-h")
	assert.ErrorIs(t, r.runErr, flag.ErrHelp)
	assert.Contains(t, r.err, "-sample")
}

func TestBadFlags(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"inspect"}, "give -cluster host:port or -shards a,b,c"},
		{[]string{"inspect", "-cluster", "a:1", "-shards", "b:1"}, "not both"},
		{[]string{"inspect", "-cluster", "a:1", "-sample", "0s"}, "-sample"},
		{[]string{"inspect", "-cluster", "a:1", "-partitions", "100"}, "100 partitions has no tag table"},
		{[]string{"inspect", "-cluster", "ftp://a:1"}, "scheme"},
		{[]string{"inspect", "-cluster", "a:1", "extra"}, "no arguments"},
		{[]string{"key"}, "at least one CHANNEL"},
		{[]string{"key", ""}, "empty channel"},
		{[]string{"key", "-shards", "nohost", "c"}, "not host:port"},
		{[]string{"sub", "-cluster", "a:1"}, "at least one CHANNEL"},
		{[]string{"sub", "c"}, "give -cluster"},
		{[]string{"pub", "-shards", "a:1"}, "give a CHANNEL"},
		{[]string{"pub", "-shards", "a:1", "-keyed", "c"}, "give no arguments"},
		{[]string{"tags", "-partitions", "3"}, "3 partitions"},
		{[]string{"relayout", "-cluster", "a:1", "-shards", "b:1,c:1", "-control", "b:1"}, "not both"},
		{[]string{"relayout", "-cluster", "a:1", "-control", "b:1", "-partitions", "256"}, "-control is for a sharded application"},
		{[]string{"key", "-tls-ca", "/nonexistent.pem", "-shards", "a:1", "c"}, "-tls-ca"},
	} {
		r := runCmd(ctx, "", nil, tc.args...)
		assert.ErrorContains(t, r.runErr, tc.want, tc.args)
	}
}

func TestConnFlags(t *testing.T) {
	tg := target{user: "ops", timeout: 1}
	o, err := tg.conn(func(k string) string { return map[string]string{"REDISCLI_AUTH": "envpw"}[k] })
	require.NoError(t, err)
	assert.Equal(t, "ops", o.Username)
	assert.Equal(t, "envpw", o.Password, "REDISCLI_AUTH fills in a missing -password")
	assert.Nil(t, o.TLS)

	tg.password = "flagpw"
	o, err = tg.conn(func(string) string { return "envpw" })
	require.NoError(t, err)
	assert.Equal(t, "flagpw", o.Password, "-password wins")

	tg.tls = true
	o, err = tg.conn(func(string) string { return "" })
	require.NoError(t, err)
	require.NotNil(t, o.TLS)
	assert.Nil(t, o.TLS.RootCAs)

	bad := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(bad, []byte("not a certificate"), 0o600))
	tg.tlsCA = bad
	_, err = tg.conn(func(string) string { return "" })
	assert.ErrorContains(t, err, "no PEM certificate")
}

func TestTags(t *testing.T) {
	ctx := context.Background()
	for _, n := range []int{16, 128, 4096} {
		var got []partitionInfo
		require.NoError(t, json.Unmarshal([]byte(mustRun(t, ctx, "tags", "-json", "-partitions", strconv.Itoa(n))), &got))
		l, err := shardcast.NewLayout(n, "")
		require.NoError(t, err)
		require.Len(t, got, n)
		for p, pi := range got {
			assert.Equal(t, partitionInfo{Partition: p, Tag: l.Tag(p), Slot: l.Slot(p)}, pi)
		}
	}
	text := mustRun(t, ctx, "tags", "-partitions", "16")
	lines := strings.Split(strings.TrimSpace(text), "\n")
	require.Len(t, lines, 17)
	l, _ := shardcast.NewLayout(16, "")
	for p, line := range lines[1:] {
		assert.Equal(t, []string{strconv.Itoa(p), l.Tag(p), strconv.Itoa(int(l.Slot(p)))}, strings.Fields(line))
	}
}

func TestKeyLayout(t *testing.T) {
	ctx := context.Background()
	channels := []string{"room:42", "user:{7}", "a b", "ünïcode"}
	var got []clusterKey
	out := mustRun(t, ctx, append([]string{"key", "-json", "-partitions", "256", "-prefix", "app:"}, channels...)...)
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	l, err := shardcast.NewLayout(256, "app:")
	require.NoError(t, err)
	require.Len(t, got, len(channels))
	for i, ch := range channels {
		p := l.Partition(ch)
		assert.Equal(t, clusterKey{Channel: ch, Partition: p, Tag: l.Tag(p), Slot: l.Slot(p), Key: l.Key(ch)}, got[i])
	}
	text := mustRun(t, ctx, "key", "room:42")
	l128, _ := shardcast.NewLayout(128, "")
	assert.Contains(t, text, l128.Key("room:42"))
	assert.NotContains(t, text, "MASTER", "no -cluster, no owner column")
}

func TestShardKeys(t *testing.T) {
	got := shardKeys([]string{"x", "y"}, []string{"a:1"})
	assert.Equal(t, []shardKey{{"x", 0, "a:1"}, {"y", 0, "a:1"}}, got)
}

func TestSplitKeyed(t *testing.T) {
	for _, tc := range []struct {
		line, channel, payload string
		ok                     bool
	}{
		{"room:1 hello world", "room:1", "hello world", true},
		{"room:1 ", "room:1", "", true},
		{"room:1", "", "", false},
		{" hello", "", "", false},
	} {
		ch, p, ok := splitKeyed([]byte(tc.line))
		assert.Equal(t, tc.ok, ok, tc.line)
		assert.Equal(t, tc.channel, ch, tc.line)
		assert.Equal(t, tc.payload, string(p), tc.line)
	}
}

func TestPrintHelpers(t *testing.T) {
	assert.Equal(t, "0B", bytesString(0))
	assert.Equal(t, "1023B", bytesString(1023))
	assert.Equal(t, "1.0KiB", bytesString(1024))
	assert.Equal(t, "32.0MiB", bytesString(32<<20))
	assert.Equal(t, "21.33", trimFloat(128.0/6))
	assert.Equal(t, "27", trimFloat(27))
	assert.Equal(t, "0", trimFloat(0))
	assert.Equal(t, "n/a", balanceString(balance{}))
	assert.Equal(t, "lag=?", lagString(timeZero, timeZero))
	var b strings.Builder
	writeWrapped(&b, "  ", []string{"aaaa", "bbbb", "cccc"}, 12)
	assert.Equal(t, "  aaaa bbbb\n  cccc\n", b.String())
}

func TestUnreadError(t *testing.T) {
	errs := []string{"", "down", ""}
	err := unreadError(3, func(i int) string { return errs[i] })
	assert.True(t, errors.Is(err, ErrUnreadNodes))
	assert.ErrorContains(t, err, "1 of 3")
	assert.NoError(t, unreadError(1, func(int) string { return "" }))
}

var timeZero time.Time

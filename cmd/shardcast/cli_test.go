package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/sharded"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestExitCodes: help that was asked for exits 0 with the usage on
// stdout; a wrong command line exits 2 with one message and the usage on
// stderr; a command that fails exits 1 with one message and no usage.
func TestExitCodes(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		args []string
		code int
		// out and errOut must each contain every string listed; msg is
		// stderr's first line.
		out, errOut []string
		msg         string
	}{
		{args: nil, code: exitUsage, msg: "shardcast: no command given", errOut: []string{"commands:", "inspect", "version"}},
		{args: []string{"-h"}, code: exitOK, out: []string{"usage: shardcast <command>", "commands:", "relayout", "help"}},
		{args: []string{"--help"}, code: exitOK, out: []string{"commands:"}},
		{args: []string{"help"}, code: exitOK, out: []string{"commands:", "shardcast help <command>"}},
		{args: []string{"help", "key"}, code: exitOK, out: []string{"usage: shardcast key", "-partitions"}},
		{args: []string{"inspect", "-h"}, code: exitOK, out: []string{"usage: shardcast inspect", "-sample"}},
		{args: []string{"version", "-help"}, code: exitOK, out: []string{"usage: shardcast version"}},
		{args: []string{"bogus"}, code: exitUsage, msg: `shardcast: unknown command "bogus"`, errOut: []string{"commands:"}},
		{args: []string{"-cluster", "a:1"}, code: exitUsage, msg: "shardcast: flag -cluster before the command; flags follow it"},
		{args: []string{"help", "bogus"}, code: exitUsage, msg: `shardcast help: unknown command "bogus"`, errOut: []string{"usage: shardcast help [COMMAND]"}},
		{args: []string{"help", "key", "sub"}, code: exitUsage, msg: "shardcast help: give one COMMAND at most"},
		{args: []string{"version", "extra"}, code: exitUsage, msg: `shardcast version: takes no arguments, got ["extra"]`},
		{args: []string{"key"}, code: exitUsage, msg: "shardcast key: give at least one CHANNEL", errOut: []string{"usage: shardcast key", "flags:", "-partitions"}},
		{args: []string{"key", "-nope", "c"}, code: exitUsage, msg: "shardcast key: flag provided but not defined: -nope", errOut: []string{"usage: shardcast key"}},
		{args: []string{"tags", "-partitions", "3"}, code: exitUsage, msg: "shardcast tags: ", errOut: []string{"usage: shardcast tags"}},
		{args: []string{"sub", "-shards", "redis//127.0.0.1:6379", "c"}, code: exitUsage,
			msg: `shardcast sub: invalid config: address "redis//127.0.0.1:6379": host "redis//127.0.0.1" holds '/', which no host name or IP address does; a URL is written redis://host:port`},
		{args: []string{"pub", "-shards", "127.0.0.1:6379,redis://127.0.0.1", "c", "m"}, code: exitUsage,
			msg: `shardcast pub: invalid config: -shards lists the instance 127.0.0.1:6379 twice (entries 0 and 1: "127.0.0.1:6379" and "redis://127.0.0.1")`},
		{args: []string{"inspect", "-cluster", "a:7000,A:7000"}, code: exitUsage, msg: "shardcast inspect: invalid config: -cluster lists the instance A:7000 twice"},
		{args: []string{"sub", "-shards", "127.0.0.1:6379", "-app", "a{b}", "c"}, code: exitUsage,
			msg: `shardcast sub: -app: invalid config: Agreement.App "a{b}" contains a brace`},
		{args: []string{"relayout", "-cluster", "a:1"}, code: exitUsage, msg: "shardcast relayout: give -partitions and/or -prefix with the new layout"},
		{args: []string{"key", "-tls-ca", "/nonexistent.pem", "-shards", "127.0.0.1:6379", "c"}, code: exitFailed,
			msg: "shardcast key: -tls-ca: open /nonexistent.pem: no such file or directory"},
	} {
		code, out, errOut := runCLI(ctx, tc.args...)
		assert.Equal(t, tc.code, code, "%q: exit status; stderr:\n%s", tc.args, errOut)
		for _, want := range tc.out {
			assert.Contains(t, out, want, "%q: stdout", tc.args)
		}
		for _, want := range tc.errOut {
			assert.Contains(t, errOut, want, "%q: stderr", tc.args)
		}
		first, rest, _ := strings.Cut(errOut, "\n")
		switch tc.code {
		case exitOK:
			assert.Empty(t, errOut, "%q: help goes to stdout", tc.args)
		case exitUsage:
			assert.Empty(t, out, "%q: a usage error prints nothing on stdout", tc.args)
			assert.True(t, strings.HasPrefix(first, tc.msg), "%q: message %q, want it to start with %q", tc.args, first, tc.msg)
			assert.Contains(t, rest, "usage: shardcast", "%q: the usage follows the message", tc.args)
		case exitFailed:
			assert.Equal(t, tc.msg, first, "%q", tc.args)
			assert.NotContains(t, rest, "usage:", "%q: a failure is no usage error", tc.args)
		}
		if tc.code != exitOK {
			assert.Equal(t, 1, strings.Count(first, "shardcast"), "%q: one prefix in %q", tc.args, first)
		}
	}
}

// TestMessage: the library's own "shardcast: " is dropped wherever it
// starts a part of the message, so that each message has one prefix.
func TestMessage(t *testing.T) {
	_, err := sharded.New(sharded.Config{})
	require.ErrorIs(t, err, shardcast.ErrInvalidConfig)
	require.True(t, strings.HasPrefix(err.Error(), "shardcast: "), "the library's errors carry their prefix: %q", err)
	assert.Equal(t, "shardcast sub: invalid config: sharded.Config.Addrs is empty", message(&commandError{name: "sub", err: err}))
	assert.Equal(t, "shardcast: subscribe: broker closed", message(fmt.Errorf("subscribe: %w", shardcast.ErrClosed)))
	assert.Equal(t, "shardcast pub: a: broker closed\nb: not sent",
		message(&commandError{name: "pub", err: errors.Join(fmt.Errorf("a: %w", shardcast.ErrClosed), errors.New("b: shardcast: not sent"))}))
	assert.Equal(t, "shardcast: room shardcast:1: gone", message(errors.New("room shardcast:1: gone")), "a channel name is left alone")
}

// TestProcessExit runs the command as a process: main passes cli's status
// to os.Exit.
func TestProcessExit(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		msg  string // stderr's first line, or stdout's for code 0
	}{
		{[]string{"-h"}, exitOK, "usage: shardcast <command> [flags] [arguments]"},
		{[]string{"version"}, exitOK, "shardcast "},
		{[]string{"bogus"}, exitUsage, `shardcast: unknown command "bogus"`},
		{[]string{"key", "-tls-ca", "/nonexistent.pem", "-shards", "127.0.0.1:6379", "c"}, exitFailed, "shardcast key: -tls-ca: open /nonexistent.pem"},
	} {
		cmd := exec.Command(os.Args[0], tc.args...)
		cmd.Env = append(os.Environ(), runAsMainEnv+"=1")
		var out, errOut strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else {
			require.NoError(t, err, "%q", tc.args)
		}
		assert.Equal(t, tc.code, code, "%q: exit status; stderr:\n%s", tc.args, errOut.String())
		text := errOut.String()
		if tc.code == exitOK {
			text = out.String()
		}
		assert.True(t, strings.HasPrefix(text, tc.msg), "%q: %q, want it to start with %q", tc.args, text, tc.msg)
	}
}

// TestVersion: the version line names the module version the binary was
// built at, the commit when Go stamped one, and the Go version.
func TestVersion(t *testing.T) {
	plat := " " + runtime.GOOS + "/" + runtime.GOARCH
	installed := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/shardcast/shardcast", Version: "v0.0.0-20261202004229-3a0f839abcde"}}
	assert.Equal(t, "shardcast v0.0.0-20261202004229-3a0f839abcde go1.26.8"+plat, versionLine(installed, true))
	clone := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "3a0f839abcdef0123456789abcdef0123456789a"}, {Key: "vcs.modified", Value: "true"},
	}}
	assert.Equal(t, "shardcast (devel) commit 3a0f839abcdef0123456789abcdef0123456789a (modified) go1.26.8"+plat, versionLine(clone, true))
	assert.Equal(t, "shardcast (unknown) "+runtime.Version()+plat, versionLine(nil, false))

	out := mustRun(t, context.Background(), "version")
	info, ok := debug.ReadBuildInfo()
	require.True(t, ok)
	assert.Equal(t, versionLine(info, ok)+"\n", out)
	assert.Contains(t, out, runtime.Version())
}

// TestBadFlags: each wrong command line is refused before anything is
// dialled, as a usage error.
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
		{[]string{"inspect", "-cluster", "a:1", "-timeout", "0s"}, "-timeout 0s: want > 0"},
		{[]string{"key"}, "at least one CHANNEL"},
		{[]string{"key", ""}, "empty channel"},
		{[]string{"key", "-shards", "nohost", "c"}, "not host:port"},
		{[]string{"key", "-shards", "a:1,b:1", "-control", "redis//a:1", "c"}, "-control: shardcast: invalid config"},
		{[]string{"sub", "-cluster", "a:1"}, "at least one CHANNEL"},
		{[]string{"sub", "c"}, "give -cluster"},
		{[]string{"sub", "-cluster", "a:1", "-n", "-1", "c"}, "-n -1"},
		{[]string{"pub", "-shards", "a:1"}, "give a CHANNEL"},
		{[]string{"pub", "-shards", "a:1", "-keyed", "c"}, "give no arguments"},
		{[]string{"pub", "-shards", "a:1", ""}, "empty channel"},
		{[]string{"tags", "-partitions", "3"}, "3 partitions"},
		{[]string{"relayout", "-cluster", "a:1", "-shards", "b:1,c:1", "-control", "b:1"}, "not both"},
		{[]string{"relayout", "-cluster", "a:1", "-control", "b:1", "-partitions", "256"}, "-control is for a sharded application"},
		{[]string{"relayout", "-shards", "b:1", "-partitions", "256", "-control", "b:1"}, "-partitions and -prefix are for a cluster"},
		{[]string{"relayout", "-shards", "b:1,c:1"}, "give -control"},
		{[]string{"relayout", "-control", "b:1"}, "give -shards with the new instance list"},
		{[]string{"relayout", "-shards", "b:1,c:1,b:1", "-control", "b:1"}, "-shards lists the instance b:1 twice"},
	} {
		r := runCmd(ctx, "", nil, tc.args...)
		assert.ErrorContains(t, r.runErr, tc.want, tc.args)
		var u *usageError
		assert.True(t, errors.As(r.runErr, &u), "%q is a usage error: %v", tc.args, r.runErr)
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
	assert.Equal(t, "envpw", o.SentinelPassword, "SHARDCAST_SENTINEL_PASSWORD fills in a missing -sentinel-password")

	tg.sentinelUser, tg.sentinelPassword = "sops", "spw"
	o, err = tg.conn(func(string) string { return "envpw" })
	require.NoError(t, err)
	assert.Equal(t, "sops", o.SentinelUsername)
	assert.Equal(t, "spw", o.SentinelPassword, "-sentinel-password wins")
	assert.Equal(t, "flagpw", o.Password, "the data nodes' password is apart")

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

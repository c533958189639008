package main

import (
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// shardcastHandler is Options with a Handler that drops messages: enough
// to make a broker a subscriber.
func shardcastHandler() shardcast.Options {
	return shardcast.Options{Handler: func(shardcast.Message) {}}
}

// roundTrip runs sub -n 4 in the background, publishes two stdin lines,
// an argument and a -keyed stdin line with pub, and checks what sub
// printed.
func roundTrip(t *testing.T, engine ...string) {
	ctx := testCtx(t, 30*time.Second)
	var out, errOut syncBuffer
	done := make(chan error, 1)
	go func() {
		args := append(append([]string{"sub"}, engine...), "-n", "4", "smoke:a", "smoke:b")
		done <- run(ctx, args, stdio{out: &out, err: &errOut})
	}()
	waitFor(t, ctx, "sub to subscribe", func() bool {
		select {
		case err := <-done:
			t.Fatalf("sub ended early: %v\n%s", err, errOut.String())
		default:
		}
		return strings.Contains(errOut.String(), "subscribed to 2 channel(s)")
	})

	r := runCmd(ctx, "first line\nsecond line\n", nil, append(append([]string{"pub"}, engine...), "smoke:a")...)
	require.NoError(t, r.runErr, r.err)
	assert.Contains(t, r.err, `published 2 message(s) to "smoke:a"`)
	mustRun(t, ctx, append(append([]string{"pub"}, engine...), "smoke:b", "third")...)
	r = runCmd(ctx, "smoke:b fourth message\n", nil, append(append([]string{"pub"}, engine...), "-keyed")...)
	require.NoError(t, r.runErr, r.err)

	select {
	case err := <-done:
		require.NoError(t, err, errOut.String())
	case <-ctx.Done():
		t.Fatalf("sub did not get 4 messages; printed:\n%s", out.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 4, out.String())
	var got []string
	for _, line := range lines {
		f := strings.Split(line, "\t")
		require.Len(t, f, 3, line)
		assert.Regexp(t, `^lag=-?[0-9]+\.[0-9]{3}ms$`, f[1])
		got = append(got, f[0]+" "+f[2])
	}
	// One channel's messages arrive in order; the two channels interleave.
	assert.Less(t, indexOf(lines, "first line"), indexOf(lines, "second line"))
	sort.Strings(got)
	assert.Less(t, indexOf(lines, "third"), indexOf(lines, "fourth message"))
	assert.Equal(t, []string{"smoke:a first line", "smoke:a second line", "smoke:b fourth message", "smoke:b third"}, got)
	assert.Contains(t, errOut.String(), "received 4 message(s)")
}

func indexOf(lines []string, payload string) int {
	for i, l := range lines {
		if strings.HasSuffix(l, "\t"+payload) {
			return i
		}
	}
	return -1
}

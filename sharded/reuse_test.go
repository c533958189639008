package sharded

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"unsafe"

	"github.com/shardcast/shardcast"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// reusePayload is message i's payload: its number, padded to a length
// that varies with it (so recycled buffers are sometimes too small).
func reusePayload(i int) []byte {
	p := []byte(strconv.Itoa(i) + ":")
	return append(p, bytes.Repeat([]byte{byte('a' + i%26)}, 50+(i*37)%400)...)
}

// reuseIndex returns the number of a payload reusePayload made, and
// whether the payload is intact: exactly what reusePayload makes for it.
func reuseIndex(p []byte) (int, bool) {
	num, _, _ := bytes.Cut(p, []byte(":"))
	i, err := strconv.Atoi(string(num))
	return i, err == nil && bytes.Equal(p, reusePayload(i))
}

// TestReusePayloads: with Options.ReusePayloads a Handler sees every
// payload intact while it runs, and the broker does reuse the memory of
// payloads (later messages arrive in buffers earlier ones had), which is
// safe for a handler that keeps nothing: under -race, a buffer refilled
// while a handler still read it would be reported. Without the option
// (the default) a handler may keep every payload: after all arrived, each
// kept one is still intact, and no two share memory. Channel names stay
// safe to keep under both.
func TestReusePayloads(t *testing.T) {
	servers := startServers(t, 1)
	ctx := context.Background()
	const n = 3000
	chans := channelNames("reuse:", 8)
	for _, reuse := range []bool{false, true} {
		t.Run(fmt.Sprintf("reuse=%v", reuse), func(t *testing.T) {
			var (
				mu       sync.Mutex
				bad      []string
				kept     [][]byte
				names    []string
				pointers = map[*byte]bool{}
			)
			handler := func(m shardcast.Message) {
				_, intact := reuseIndex(m.Payload)
				mu.Lock()
				defer mu.Unlock()
				if !intact {
					bad = append(bad, fmt.Sprintf("%.20q", m.Payload))
				}
				pointers[unsafe.SliceData(m.Payload)] = true
				names = append(names, m.Channel)
				if !reuse {
					kept = append(kept, m.Payload) // allowed by default
				}
			}
			sub := newBroker(t, Config{Addrs: addrs(servers...), Options: shardcast.Options{
				Handler: handler, ReusePayloads: reuse, Workers: 4,
			}})
			pub := newBroker(t, Config{Addrs: addrs(servers...)})
			require.NoError(t, sub.Subscribe(ctx, chans...))
			// Publish from several goroutines so that the read loop gets
			// bursts, and workers hand buffers back while it fills others.
			var wg sync.WaitGroup
			for g := range 4 {
				wg.Go(func() {
					for i := g; i < n; i += 4 {
						if err := pub.Publish(ctx, chans[i%len(chans)], reusePayload(i)); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			waitFor(t, "every message", func() bool {
				st := sub.Stats()
				return st.Delivered+st.Dropped >= n
			})
			require.Zero(t, sub.Stats().Dropped, "the queues are deep enough for this test")

			mu.Lock()
			defer mu.Unlock()
			assert.Empty(t, len(bad), "payloads seen by the handler, wrong: %q", bad[:min(len(bad), 5)])
			for _, name := range names {
				require.Contains(t, chans, name)
			}
			if reuse {
				t.Logf("%d messages in %d buffers", n, len(pointers))
				assert.Less(t, len(pointers), n/2, "payload buffers are reused")
				return
			}
			assert.Len(t, pointers, n, "every payload has memory of its own")
			for _, p := range kept {
				_, intact := reuseIndex(p)
				require.True(t, intact, "a kept payload stays intact: %.20q", p)
			}
		})
	}
}

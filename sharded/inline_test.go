package sharded

import (
	"bytes"
	"context"
	"runtime"
	"strconv"
	"sync"
	"testing"

	"github.com/shardcast/shardcast"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestInlineHandling: with Options.InlineHandling (and ReusePayloads, as
// the Centrifuge adapter runs it) the subscribe connections' read loops
// hand messages to the Handler themselves, and nothing else changes: every
// message arrives once, intact and in its channel's order, while several
// publishers send to channels spread over two Redis instances. Without
// the option no handler call runs on a read loop.
func TestInlineHandling(t *testing.T) {
	servers := startServers(t, 2)
	ctx := context.Background()
	const (
		publishers = 4
		perPub     = 1500
	)
	chans := channelNames("inline:", 16)
	for _, inline := range []bool{false, true} {
		t.Run("inline="+strconv.FormatBool(inline), func(t *testing.T) {
			var (
				mu     sync.Mutex
				next   = map[string]int{} // channel → next number expected
				wrong  []string
				onRead int
				stack  = make([]byte, 8<<10)
			)
			handler := func(m shardcast.Message) {
				i, intact := reuseIndex(m.Payload)
				mu.Lock()
				defer mu.Unlock()
				if !intact {
					wrong = append(wrong, "corrupt "+m.Channel)
				} else if want := next[m.Channel]; i != want {
					wrong = append(wrong, m.Channel+": got "+strconv.Itoa(i)+", want "+strconv.Itoa(want))
				}
				next[m.Channel] = i + publishers*len(chans)
				if bytes.Contains(stack[:runtime.Stack(stack, false)], []byte("subconn.(*Conn).readLoop")) {
					onRead++
				}
			}
			sub := newBroker(t, Config{Addrs: addrs(servers...), Options: shardcast.Options{
				Handler: handler, ReusePayloads: true, InlineHandling: inline, Workers: 4,
			}})
			pub := newBroker(t, Config{Addrs: addrs(servers...)})
			require.NoError(t, sub.Subscribe(ctx, chans...))
			// Channel c gets messages c, c+P·C, c+2·P·C, … in order; each
			// publisher owns its channels, so that it alone orders them.
			mu.Lock()
			for c, ch := range chans {
				next[ch] = c
			}
			mu.Unlock()
			var wg sync.WaitGroup
			for g := range publishers {
				wg.Go(func() {
					for k := range perPub {
						c := g + publishers*(k%(len(chans)/publishers))
						i := c + publishers*len(chans)*(k/(len(chans)/publishers))
						if err := pub.Publish(ctx, chans[c], reusePayload(i)); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			const total = publishers * perPub
			waitFor(t, "every message", func() bool {
				st := sub.Stats()
				return st.Delivered+st.Dropped >= total
			})
			st := sub.Stats()
			require.Zero(t, st.Dropped, "the queues are deep enough for this test")
			assert.Equal(t, uint64(total), st.Delivered)

			mu.Lock()
			defer mu.Unlock()
			assert.Empty(t, wrong, "messages lost, repeated, reordered or corrupt")
			t.Logf("%d of %d handler calls on a read loop", onRead, total)
			if inline {
				assert.Positive(t, onRead, "read loops run handler calls themselves")
			} else {
				assert.Zero(t, onRead, "only workers run handler calls")
			}
		})
	}
}

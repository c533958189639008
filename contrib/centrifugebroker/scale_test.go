package centrifugebroker

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Sizes of TestManyChannelsInOrder: every client subscribes to every
// channel, and each channel gets scaleMessages publications, so the nodes
// push scaleChannels × scaleClients × scaleMessages messages.
const (
	scaleChannels = 1000
	scaleClients  = 20
	scaleMessages = 5
)

// TestManyChannelsInOrder: 20 clients spread over three nodes, each
// subscribed to 1,000 channels (20,000 subscriptions, made server-side on
// connect), receive every publication of every channel, in publish order,
// whichever node published it.
func TestManyChannelsInOrder(t *testing.T) {
	for name, config := range engines(t) {
		t.Run(name, func(t *testing.T) {
			nodes := startNodes(t, 3, config())
			channels := make([]string, scaleChannels)
			for i := range channels {
				channels[i] = "scale-" + name + "-" + strconv.Itoa(i)
			}
			start := time.Now()
			clients := make([]*testClient, scaleClients)
			for i := range clients {
				user, nd := "user"+strconv.Itoa(i), nodes[i%len(nodes)]
				nd.subscribeOnConnect(user, channels)
				clients[i] = connect(t, nd, user) // connected: subscribed to every channel
			}
			t.Logf("%d subscriptions in %v", scaleChannels*scaleClients, time.Since(start).Round(time.Millisecond))

			// Each channel is published from one goroutine (so its
			// publications leave in order), by the node of its index.
			start = time.Now()
			const publishers = 8
			errs := make([]error, publishers)
			var wg sync.WaitGroup
			for w := range publishers {
				wg.Go(func() {
					for i := w; i < len(channels); i += publishers {
						for n := 1; n <= scaleMessages; n++ {
							if _, err := nodes[i%len(nodes)].node.Publish(channels[i], []byte(strconv.Itoa(n))); err != nil {
								errs[w] = err
								return
							}
						}
					}
				})
			}
			wg.Wait()
			for _, err := range errs {
				require.NoError(t, err)
			}
			want := make([]string, scaleMessages)
			for n := range want {
				want[n] = strconv.Itoa(n + 1)
			}
			var short int
			waitFor(t, func() bool {
				short = 0
				for _, c := range clients {
					short += c.serverShort(channels, scaleMessages)
				}
				return short == 0
			}, func() string {
				return fmt.Sprintf("%d subscriptions still short of %d messages: %s", short, scaleMessages, shortDetail(clients, nodes, channels, scaleMessages))
			})
			t.Logf("%d publications, %d deliveries in %v", scaleChannels*scaleMessages,
				scaleChannels*scaleClients*scaleMessages, time.Since(start).Round(time.Millisecond))
			var bad []string
			for i, c := range clients {
				for _, ch := range channels {
					if got := c.serverReceived(ch); fmt.Sprint(got) != fmt.Sprint(want) {
						bad = append(bad, fmt.Sprintf("client %d %s: %q", i, ch, got))
					}
				}
			}
			require.Empty(t, head(bad, 10), "%d subscriptions got other than %q", len(bad), want)
			for _, nd := range nodes {
				require.Zero(t, nd.broker.Stats().Engine.Dropped)
			}
		})
	}
}

// shortDetail says which subscriptions are short of n messages (the
// first 5: client, its node, channel, what it got) with each short
// client's disconnect codes, and each node's engine drops, so that a
// failure tells a loss in the engine (every client of a channel on one
// node short, drops counted) from one client's (a reconnect).
func shortDetail(clients []*testClient, nodes []*testNode, channels []string, n int) string {
	var b strings.Builder
	shown := 0
	for i, c := range clients {
		c.mu.Lock()
		for _, ch := range channels {
			if got := c.server[ch]; len(got) < n && shown < 5 {
				shown++
				fmt.Fprintf(&b, "[client %d on node %d, %s: got %q, disconnects %v] ", i, i%len(nodes), ch, got, c.disconnects)
			}
		}
		c.mu.Unlock()
	}
	for i, nd := range nodes {
		st := nd.broker.Stats().Engine
		fmt.Fprintf(&b, "[node %d: engine delivered %d, dropped %d] ", i, st.Delivered, st.Dropped)
	}
	return b.String()
}

func head[T any](s []T, n int) []T {
	if len(s) > n {
		return s[:n]
	}
	return s
}

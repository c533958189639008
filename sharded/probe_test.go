package sharded

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// dropProxy forwards TCP connections to a Redis server and, while drop is
// set, swallows the message pushes the server sends (everything else, PONG
// and subscribe confirmations included, passes): a subscribe connection
// that answers pings while its messages no longer arrive.
type dropProxy struct {
	ln      net.Listener
	target  string
	drop    atomic.Bool
	dropped atomic.Int64
	wg      sync.WaitGroup
	mu      sync.Mutex
	conns   []net.Conn
}

func startDropProxy(t *testing.T, target string) *dropProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &dropProxy{ln: ln, target: target}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

func (p *dropProxy) addr() string { return p.ln.Addr().String() }

func (p *dropProxy) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.Dial("tcp", p.target)
		if err != nil {
			client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		p.wg.Go(func() { _, _ = io.Copy(server, client); server.Close() })
		p.wg.Go(func() { p.pushes(client, server); client.Close() })
	}
}

// pushes copies server replies to the client one RESP value at a time,
// leaving out message pushes while drop is set.
func (p *dropProxy) pushes(client, server net.Conn) {
	r := bufio.NewReader(server)
	var buf []byte
	for {
		var err error
		buf, err = readValue(r, buf[:0])
		if err != nil {
			return
		}
		if p.drop.Load() && bytes.HasPrefix(buf, []byte("*3\r\n$7\r\nmessage\r\n")) {
			p.dropped.Add(1)
			continue
		}
		if _, err := client.Write(buf); err != nil {
			return
		}
	}
}

// readValue appends one whole RESP2 value read from r to buf.
func readValue(r *bufio.Reader, buf []byte) ([]byte, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return buf, err
	}
	buf = append(buf, line...)
	if len(line) < 3 {
		return buf, errors.New("short line")
	}
	n, _ := strconv.Atoi(string(line[1 : len(line)-2]))
	switch line[0] {
	case '$':
		if n >= 0 {
			start := len(buf)
			buf = append(buf, make([]byte, n+2)...)
			if _, err := io.ReadFull(r, buf[start:]); err != nil {
				return buf, err
			}
		}
	case '*':
		for range max(n, 0) {
			if buf, err = readValue(r, buf); err != nil {
				return buf, err
			}
		}
	}
	return buf, nil
}

func (p *dropProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// sameServerOtherName is the Agreement of a subscriber that reaches the
// publisher's instance through a proxy: the layout record compares
// addresses as configured, and would take the proxy's for another layout.
var sameServerOtherName = shardcast.Agreement{Off: true}

// TestProbesCatchASilentPath: a subscribe connection whose message pushes
// stop arriving while it still answers pings is reported Interrupted with
// ErrSilentPath by the delivery probes, resubscribed, and reported
// Restored once probes come back, after which messages flow. Without
// probes the same fault stays silent: no event, nothing delivered.
func TestProbesCatchASilentPath(t *testing.T) {
	srv := redistest.StartStandalone(t)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	pub := newBroker(t, Config{Addrs: addrs(srv)})

	t.Run("probes", func(t *testing.T) {
		proxy := startDropProxy(t, srv.Addr())
		rec := newRecorder()
		var evs events
		sub := newBroker(t, Config{Addrs: []string{proxy.addr()}, Agreement: sameServerOtherName,
			Options: shardcast.Options{Handler: rec.handle, OnEvent: evs.Add},
			Conn:    shardcast.ConnOptions{ProbeInterval: 50 * time.Millisecond, ProbeTimeout: 200 * time.Millisecond}})
		require.NoError(t, sub.Subscribe(ctx, "watched"))
		require.NoError(t, pub.Publish(ctx, "watched", []byte("before")))
		waitFor(t, "the first message", func() bool { return rec.count("watched") == 1 })

		proxy.drop.Store(true)
		silentAt := time.Now()
		waitFor(t, "the silent path to be reported", func() bool { return len(evs.Of(shardcast.EventInterrupted)) > 0 })
		ev := evs.Of(shardcast.EventInterrupted)[0]
		t.Logf("FIGURE probes: silent path reported %v after the pushes stopped (interval 50ms, timeout 200ms)", time.Since(silentAt).Round(time.Millisecond))
		assert.ErrorIs(t, ev.Err, shardcast.ErrSilentPath)
		assert.Equal(t, []string{"watched"}, ev.Channels, "the probe channel is not reported")
		assert.Empty(t, evs.Of(shardcast.EventRestored), "no restore while probes stay lost")

		proxy.drop.Store(false)
		waitFor(t, "the restore", func() bool { return len(evs.Of(shardcast.EventRestored)) > 0 })
		assert.Equal(t, []string{"watched"}, evs.Of(shardcast.EventRestored)[0].Channels)
		require.NoError(t, pub.Publish(ctx, "watched", []byte("after")))
		waitFor(t, "delivery after the restore", func() bool { return rec.count("watched") == 2 })
		assert.Equal(t, 1, sub.Stats().Channels, "probe channels are not counted")
	})

	t.Run("no probes", func(t *testing.T) {
		proxy := startDropProxy(t, srv.Addr())
		rec := newRecorder()
		var evs events
		sub := newBroker(t, Config{Addrs: []string{proxy.addr()}, Agreement: sameServerOtherName,
			Options: shardcast.Options{Handler: rec.handle, OnEvent: evs.Add}})
		require.NoError(t, sub.Subscribe(ctx, "watched"))
		proxy.drop.Store(true)
		for i := range 5 {
			require.NoError(t, pub.Publish(ctx, "watched", []byte(strconv.Itoa(i))))
		}
		waitFor(t, "the proxy to swallow the messages", func() bool { return proxy.dropped.Load() == 5 })
		// A health ping goes through after the loss, proving the
		// connection looks healthy while its messages are gone.
		pings := func() int64 {
			st, err := srv.CommandStats(ctx)
			require.NoError(t, err)
			return st["ping"]
		}
		before := pings()
		waitFor(t, "a health ping after the loss", func() bool { return pings() > before })
		assert.Zero(t, rec.count("watched"), "nothing was delivered")
		assert.Empty(t, evs.All(), "and nothing was reported: the loss is silent without probes")
	})
}

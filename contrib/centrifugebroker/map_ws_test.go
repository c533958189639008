package centrifugebroker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/centrifugal/centrifuge"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// mapClientDir holds the centrifuge-js map client (testdata/mapclient):
// centrifuge-go v0.12.1 has no map subscriptions, centrifuge-js 5.8.0 has.
const mapClientDir = "testdata/mapclient"

// mapClientInstallHint is what makes the map client runnable.
const mapClientInstallHint = "run `make mapclient` (bash contrib/centrifugebroker/testdata/mapclient/install.sh) from the repository root"

// mapClientPageSize is the page size the client asks for: Centrifuge's
// smallest by default.
const mapClientPageSize = 100

// mapWSInitialKeys returns how many keys to write before the client
// subscribes so that their state takes at least three pages: HSCAN
// returns a hash still in listpack encoding whole, whatever the page size
// (the MapBroker documents Limit as a hint, as Centrifuge's Redis map
// broker does), so the hash must be past the server's listpack limit.
func mapWSInitialKeys(t *testing.T, env *mapEnv, ch string) int {
	t.Helper()
	v, err := env.serverOf(ch).Do(bg, "CONFIG", "GET", "hash-max-listpack-entries")
	require.NoError(t, err)
	reply, ok := v.([]any)
	require.True(t, ok && len(reply) == 2, "CONFIG GET reply %v", v)
	s, _ := reply[1].(string)
	listpack, err := strconv.Atoi(s)
	require.NoError(t, err)
	return max(listpack+1, 2*mapClientPageSize) + mapClientPageSize/2
}

// mapWSEntry is a map entry or a key change as the client prints it.
type mapWSEntry struct {
	Key     string          `json:"key"`
	Data    json.RawMessage `json:"data"`
	Offset  uint64          `json:"offset"`
	Removed bool            `json:"removed"`
}

// mapWSEvent is one line the client prints; which fields are set depends
// on Ev (see testdata/mapclient/client.js).
type mapWSEvent struct {
	Ev string `json:"ev"`
	mapWSEntry
	Entries       []mapWSEntry `json:"entries"`
	Recovered     bool         `json:"recovered"`
	WasRecovering bool         `json:"wasRecovering"`
	Epoch         string       `json:"epoch"`
	Phase         int32        `json:"phase"`
	Limit         int          `json:"limit"`
	Cursor        string       `json:"cursor"`
	Recover       bool         `json:"recover"`
	Code          int          `json:"code"`
	Reason        string       `json:"reason"`
	Type          string       `json:"type"`
	Message       string       `json:"message"`
}

// mapWSClient is the centrifuge-js map client running under node, with
// every event it printed and the map as it sees it: the last sync's
// entries with the updates since applied.
type mapWSClient struct {
	stdin io.WriteCloser
	done  chan struct{} // closed once the reader has seen stdout end

	mu     sync.Mutex
	events []mapWSEvent
	view   map[string]string // key → "offset:data"
	stderr bytes.Buffer
}

// findMapClient returns node's path, or skips the test saying how to
// install what is missing. Under CI (CI set) it fails instead: .ci/run
// installs the client, so a skip there would hide a broken install.
func findMapClient(t *testing.T) string {
	t.Helper()
	missing := ""
	node, err := exec.LookPath("node")
	if err != nil {
		missing = "node not found on PATH"
	}
	for _, m := range []string{"centrifuge", "ws"} {
		if _, err := os.Stat(filepath.Join(mapClientDir, "node_modules", m, "package.json")); err != nil && missing == "" {
			missing = mapClientDir + "/node_modules/" + m + " is missing"
		}
	}
	if missing == "" {
		return node
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s; %s", missing, mapClientInstallHint)
	}
	t.Skipf("SKIP: %s; %s", missing, mapClientInstallHint)
	return ""
}

// startMapWSClient runs the map client against url, subscribed to map
// channel ch, and stops it when the test ends: it closes the client's
// stdin, and kills it if it has not exited within waitTimeout.
func startMapWSClient(t *testing.T, url, ch string) *mapWSClient {
	t.Helper()
	node := findMapClient(t)
	cmd := exec.Command(node, "client.js", url, ch, strconv.Itoa(mapClientPageSize))
	cmd.Dir = mapClientDir
	mc := &mapWSClient{done: make(chan struct{}), view: map[string]string{}}
	var err error
	mc.stdin, err = cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = &lockedWriter{mu: &mc.mu, w: &mc.stderr}
	require.NoError(t, cmd.Start())
	go mc.read(stdout)
	t.Cleanup(func() {
		_ = mc.stdin.Close()
		select {
		case <-mc.done:
		case <-time.After(waitTimeout):
			_ = cmd.Process.Kill()
			<-mc.done
		}
		_ = cmd.Wait()
		if t.Failed() {
			mc.mu.Lock()
			t.Logf("map client stderr:\n%s", mc.stderr.String())
			if os.Getenv("MAPWS_DEBUG") != "" {
				for _, e := range mc.events {
					t.Logf("event %+v", e)
				}
			}
			mc.mu.Unlock()
		}
	})
	return mc
}

// lockedWriter writes to w under mu: the client's stderr is copied on
// exec's goroutine and read by the test.
type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

// Write writes p to w while holding mu.
func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// read records each line the client prints and applies it to the view,
// until stdout ends. A line that is not an event is kept on stderr's
// record, where a failing test shows it.
func (mc *mapWSClient) read(stdout io.Reader) {
	defer close(mc.done)
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 0, 1<<16), 16<<20) // a sync of many entries is one line
	for sc.Scan() {
		var ev mapWSEvent
		err := json.Unmarshal(sc.Bytes(), &ev)
		mc.mu.Lock()
		if err != nil {
			fmt.Fprintf(&mc.stderr, "unparsed stdout line %q: %v\n", sc.Text(), err)
			mc.mu.Unlock()
			continue
		}
		mc.events = append(mc.events, ev)
		switch ev.Ev {
		case "sync":
			mc.view = make(map[string]string, len(ev.Entries))
			for _, e := range ev.Entries {
				mc.view[e.Key] = e.state()
			}
		case "update":
			if ev.Removed {
				delete(mc.view, ev.Key)
			} else {
				mc.view[ev.Key] = ev.state()
			}
		}
		mc.mu.Unlock()
	}
}

// state is an entry as mapWSClient.view and serverState hold it.
func (e mapWSEntry) state() string {
	var data bytes.Buffer
	if json.Compact(&data, e.Data) != nil {
		data.Reset()
		data.Write(e.Data)
	}
	return fmt.Sprintf("%d:%s", e.Offset, data.String())
}

// snapshot returns a copy of the client's events and view.
func (mc *mapWSClient) snapshot() ([]mapWSEvent, map[string]string) {
	mc.mu.Lock()
	defer mc.mu.Unlock()
	view := make(map[string]string, len(mc.view))
	for k, v := range mc.view {
		view[k] = v
	}
	return slices.Clone(mc.events), view
}

// send writes command cmd to the client (see testdata/mapclient/client.js).
func (mc *mapWSClient) send(t *testing.T, cmd string) {
	t.Helper()
	_, err := io.WriteString(mc.stdin, cmd+"\n")
	require.NoError(t, err)
}

// count returns how many events named ev the client printed.
func (mc *mapWSClient) count(ev string) int {
	events, _ := mc.snapshot()
	n := 0
	for _, e := range events {
		if e.Ev == ev {
			n++
		}
	}
	return n
}

// last returns the client's last event named ev, if any.
func (mc *mapWSClient) last(ev string) (mapWSEvent, bool) {
	events, _ := mc.snapshot()
	for i := len(events) - 1; i >= 0; i-- {
		if events[i].Ev == ev {
			return events[i], true
		}
	}
	return mapWSEvent{}, false
}

// describe summarises the client's events for a failure message: the
// count of each kind, the errors and the last few events.
func (mc *mapWSClient) describe() string {
	events, view := mc.snapshot()
	counts := map[string]int{}
	var errs []string
	for _, e := range events {
		counts[e.Ev]++
		if e.Ev == "error" || e.Ev == "unsubscribed" || e.Ev == "disconnected" {
			errs = append(errs, fmt.Sprintf("%s %s %d %s%s", e.Ev, e.Type, e.Code, e.Message, e.Reason))
		}
	}
	tail := events[max(0, len(events)-8):]
	var last []string
	for _, e := range tail {
		last = append(last, e.Ev+" "+e.Key+" "+e.Reason)
	}
	return fmt.Sprintf("client saw %v, %d keys in view; errors %q; last %q", counts, len(view), errs, last)
}

// serverState returns ch's state as node reads it, key → "offset:data",
// and its stream position.
func serverState(t *testing.T, node *centrifuge.Node, ch string) (map[string]string, centrifuge.StreamPosition, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	r, err := node.MapStateRead(ctx, ch, centrifuge.MapReadStateOptions{Limit: -1})
	if err != nil {
		return nil, centrifuge.StreamPosition{}, err
	}
	out := make(map[string]string, len(r.Publications))
	for _, p := range r.Publications {
		out[p.Key] = mapWSEntry{Data: p.Data, Offset: p.Offset}.state()
	}
	return out, r.Position, nil
}

// waitSameState waits until the client's view equals ch's state on node,
// read afresh each time: the client has caught up with everything written.
func waitSameState(t *testing.T, mc *mapWSClient, node *centrifuge.Node, ch string) map[string]string {
	t.Helper()
	var server, view map[string]string
	var err error
	waitFor(t, func() bool {
		server, _, err = serverState(t, node, ch)
		_, view = mc.snapshot()
		return err == nil && assert.ObjectsAreEqual(server, view)
	}, func() string {
		return fmt.Sprintf("the client's view (%d keys) to equal the server's state (%d keys, err %v); missing or different: %v; %s",
			len(view), len(server), err, diffState(server, view), mc.describe())
	})
	return server
}

// diffState lists up to 10 keys whose value differs between want and got.
func diffState(want, got map[string]string) []string {
	var out []string
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			out = append(out, fmt.Sprintf("%s: want %q got %q", k, w, g))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			out = append(out, fmt.Sprintf("%s: want none got %q", k, g))
		}
	}
	slices.Sort(out)
	return out[:min(len(out), 10)]
}

// mapWSPublish publishes data (JSON) under key of ch on node, retrying
// while the channel's Redis is coming back, and returns the result.
func mapWSPublish(t *testing.T, node *centrifuge.Node, ch, key, data string) centrifuge.MapUpdateResult {
	t.Helper()
	var r centrifuge.MapUpdateResult
	var err error
	waitFor(t, func() bool {
		r, err = node.MapPublish(context.Background(), ch, key, centrifuge.MapPublishOptions{Data: []byte(data)})
		return err == nil
	}, func() string { return fmt.Sprintf("publishing %s on %s: %v", key, ch, err) })
	return r
}

// TestMapWebSocket runs a real centrifuge-js client (testdata/mapclient,
// under Node.js) with a map subscription against two Centrifuge nodes
// sharing the shardcast Broker and MapBroker, on each engine: the client
// subscribes on node B, every write goes through node A.
//   - InitialState: keys written before the client subscribes arrive in its
//     first sync, over several state pages.
//   - Live: keys set and removed after it subscribed arrive as updates, in
//     the order they were written.
//   - Clear: after MapClear gives the channel a new epoch, the client
//     re-syncs from scratch and ends with the new state.
//   - RedisRestart: after the channel's Redis is killed and restarted
//     without persistence, the client recovers or re-syncs and ends with
//     the new state.
//
// Each step ends with the client's view equal to the server's
// MapStateRead, offsets included. RecoverAfterRestart, on servers that
// keep every write, checks the other way back: the epoch survives the
// restart, so the client recovers the missed updates from the stream
// without a re-sync.
func TestMapWebSocket(t *testing.T) {
	findMapClient(t)
	for name, start := range mapEngines() {
		t.Run(name, func(t *testing.T) {
			env := start(t) // its servers; the nodes below are its cfg's
			a := startNodeWith(t, env.cfg, nil, true)
			b := startNodeWith(t, env.cfg, nil, true)
			ch := mapRecoverable + "ws-" + name
			testMapWebSocket(t, env, a.node, b, ch)
		})
		t.Run(name+"/RecoverAfterRestart", func(t *testing.T) {
			env := start(t, persistent)
			a := startNodeWith(t, env.cfg, nil, true)
			b := startNodeWith(t, env.cfg, nil, true)
			testMapWebSocketRecover(t, env, a.node, b, mapRecoverable+"ws-recover-"+name)
		})
	}
}

// testMapWebSocketRecover: a client with a live map subscription on node
// b, the channel's Redis killed and restarted with its writes kept, keys
// written through node a once it is back. The client is made to
// resubscribe, recovers from the stream at the same epoch without a
// re-sync, and ends with the server's state: the keys from before the
// restart and after it.
func testMapWebSocketRecover(t *testing.T, env *mapEnv, a *centrifuge.Node, b *testNode, ch string) {
	for i := range 5 {
		mapWSPublish(t, a, ch, fmt.Sprintf("before-%d", i), strconv.Quote(fmt.Sprintf("before-%d", i)))
	}
	mc := startMapWSClient(t, b.url, ch)
	waitSameState(t, mc, a, ch)
	_, before, err := serverState(t, a, ch)
	require.NoError(t, err)
	subscribing := mc.count("subscribing")

	victim := env.serverOf(ch)
	require.NoError(t, victim.Kill())
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	require.NoError(t, env.restart(ctx, victim))
	for i := range 3 {
		mapWSPublish(t, a, ch, fmt.Sprintf("after-%d", i), strconv.Quote(fmt.Sprintf("after-%d", i)))
	}
	server := waitSameState(t, mc, a, ch)
	assert.Len(t, server, 8, "the keys from before the restart and after it")
	_, after, err := serverState(t, a, ch)
	require.NoError(t, err)
	assert.Equal(t, before.Epoch, after.Epoch, "the restart kept the epoch")
	assert.Greater(t, mc.count("subscribing"), subscribing, "the client was made to resubscribe")
	assert.Equal(t, 1, mc.count("sync"), "the client recovered without a re-sync: %s", mc.describe())
	last, _ := mc.last("subscribed")
	assert.Equal(t, after.Epoch, last.Epoch)
}

// testMapWebSocket runs TestMapWebSocket's steps on one engine; see there.
func testMapWebSocket(t *testing.T, env *mapEnv, a *centrifuge.Node, b *testNode, ch string) {
	initial := mapWSInitialKeys(t, env, ch)
	for i := range initial {
		mapWSPublish(t, a, ch, fmt.Sprintf("k%03d", i), strconv.Quote(fmt.Sprintf("initial-%d", i)))
	}
	mc := startMapWSClient(t, b.url, ch)

	t.Run("InitialState", func(t *testing.T) {
		waitFor(t, func() bool { return mc.count("sync") > 0 }, mc.describe)
		events, _ := mc.snapshot()
		var syncs []mapWSEvent
		var pages []mapWSEvent // state-phase subscribe commands
		for _, e := range events {
			switch {
			case e.Ev == "sync":
				syncs = append(syncs, e)
			case e.Ev == "cmd" && e.Phase == centrifuge.MapPhaseState:
				pages = append(pages, e)
			}
		}
		assert.Len(t, syncs[0].Entries, initial, "the first sync holds every key written before")
		// More than 200 keys at 100 a page: the first page and at least
		// two more, asked for with the cursor each page returned.
		t.Logf("%d keys arrived in %d state pages", initial, len(pages))
		require.GreaterOrEqual(t, len(pages), 3, "state pages asked for")
		assert.Equal(t, mapClientPageSize, pages[0].Limit)
		assert.Empty(t, pages[0].Cursor, "the first page has no cursor")
		for _, p := range pages[1:3] {
			assert.NotEmpty(t, p.Cursor, "a later page continues from a cursor")
		}
		server := waitSameState(t, mc, a, ch)
		assert.Len(t, server, initial)
	})

	t.Run("Live", func(t *testing.T) {
		type change struct {
			key, data string // data "" removes the key
		}
		changes := []change{
			{"k000", `"live-1"`}, {"new-1", `"live-2"`}, {"k001", ""}, {"k000", `"live-3"`},
			{"new-2", `"live-4"`}, {"new-1", ""}, {"k002", `"live-5"`},
		}
		before, subscribing := mc.count("update"), mc.count("subscribing")
		var want []string
		for _, c := range changes {
			if c.data == "" {
				r, err := a.MapRemove(context.Background(), ch, c.key, centrifuge.MapRemoveOptions{})
				require.NoError(t, err)
				want = append(want, fmt.Sprintf("%s %d removed", c.key, r.Position.Offset))
			} else {
				r := mapWSPublish(t, a, ch, c.key, c.data)
				want = append(want, fmt.Sprintf("%s %d %s", c.key, r.Position.Offset, c.data))
			}
		}
		var got []string
		waitFor(t, func() bool {
			events, _ := mc.snapshot()
			got = got[:0]
			n := 0
			for _, e := range events {
				if e.Ev != "update" {
					continue
				}
				if n++; n <= before {
					continue
				}
				if e.Removed {
					got = append(got, fmt.Sprintf("%s %d removed", e.Key, e.Offset))
				} else {
					got = append(got, fmt.Sprintf("%s %d %s", e.Key, e.Offset, e.Data))
				}
			}
			return len(got) >= len(want)
		}, func() string { return fmt.Sprintf("%d live updates, got %q; %s", len(want), got, mc.describe()) })
		assert.Equal(t, want, got, "live updates, in write order")
		assert.Equal(t, 1, mc.count("sync"), "no re-sync while live")
		// A lost publication would heal itself: the node sees the offset
		// gap, makes the client resubscribe and recover from the stream,
		// and the updates above would still come in order. Nothing is
		// lost on a healthy engine, so no resubscribe is allowed here.
		assert.Equal(t, subscribing, mc.count("subscribing"), "no resubscribe while live: %s", mc.describe())
		waitSameState(t, mc, a, ch)
	})

	t.Run("Clear", func(t *testing.T) {
		_, before, err := serverState(t, a, ch)
		require.NoError(t, err)
		syncs := mc.count("sync")
		require.NoError(t, a.MapClear(context.Background(), ch, centrifuge.MapClearOptions{}))
		// The client learns of the new epoch from the next publication.
		for i := range 3 {
			mapWSPublish(t, a, ch, fmt.Sprintf("after-clear-%d", i), strconv.Quote(fmt.Sprintf("cleared-%d", i)))
		}
		server := waitSameState(t, mc, a, ch)
		assert.Len(t, server, 3, "only what was written after the clear")
		_, after, err := serverState(t, a, ch)
		require.NoError(t, err)
		assert.NotEqual(t, before.Epoch, after.Epoch, "the clear started a new epoch")
		assert.Greater(t, mc.count("sync"), syncs, "the client re-synced from scratch")
		last, _ := mc.last("subscribed")
		assert.Equal(t, after.Epoch, last.Epoch, "the client is subscribed at the new epoch")
	})

	t.Run("RedisRestart", func(t *testing.T) {
		_, before, err := serverState(t, a, ch)
		require.NoError(t, err)
		subscribing := mc.count("subscribing")
		victim := env.serverOf(ch)
		require.NoError(t, victim.Kill())
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		require.NoError(t, env.restart(ctx, victim))
		for i := range 3 {
			mapWSPublish(t, a, ch, fmt.Sprintf("after-restart-%d", i), strconv.Quote(fmt.Sprintf("restarted-%d", i)))
		}
		server := waitSameState(t, mc, a, ch)
		assert.Len(t, server, 3, "the restart without persistence lost what was written before")
		_, after, err := serverState(t, a, ch)
		require.NoError(t, err)
		assert.NotEqual(t, before.Epoch, after.Epoch, "the restart lost the epoch")
		assert.Greater(t, mc.count("subscribing"), subscribing, "the client was made to resubscribe")
		last, _ := mc.last("subscribed")
		assert.Equal(t, after.Epoch, last.Epoch, "the client is subscribed at the new epoch")
	})
}

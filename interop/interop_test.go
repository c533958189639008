// Package interop_test runs the Python and Node.js reference
// implementations of docs/LAYOUT.md: their vector runners, and publishers
// in both languages whose messages a Go subscriber must receive through
// both engines. A language whose interpreter or packages are missing is
// skipped with the command that installs them (bash interop/install.sh).
package interop_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/cluster"
	"github.com/shardcast/shardcast/internal/layoutgen"
	"github.com/shardcast/shardcast/redistest"
	"github.com/shardcast/shardcast/sharded"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const installHint = "run `bash interop/install.sh` from the repository root"

// language is one reference implementation and how to run it.
type language struct {
	name    string
	dir     string // interop/<name>, where its scripts live
	interp  string // the interpreter's absolute path
	vectors string // the vector runner's file name
	publish string // the publisher's file name
}

// findPython finds an interpreter that imports xxhash (and redis, when
// withClient), or says why there is none. SHARDCAST_PYTHON names one
// explicitly; otherwise interop/python/.venv, python3 on PATH and the
// system's /usr/bin/python3 (where Debian's python3-xxhash lands) are
// tried in turn.
func findPython(withClient bool) (language, string) {
	imports := "import xxhash"
	if withClient {
		imports += ", redis"
	}
	candidates := []string{os.Getenv("SHARDCAST_PYTHON"), filepath.Join("python", ".venv", "bin", "python"), "python3", "/usr/bin/python3"}
	for _, c := range candidates {
		if c == "" {
			continue
		}
		path, err := exec.LookPath(c)
		if err != nil {
			continue
		}
		if path, err = filepath.Abs(path); err != nil {
			continue
		}
		if exec.Command(path, "-c", imports).Run() == nil {
			return language{name: "python", dir: "python", interp: path, vectors: "test_vectors.py", publish: "publish.py"}, ""
		}
	}
	return language{name: "python"}, fmt.Sprintf("no python3 that can %q (tried $SHARDCAST_PYTHON, interop/python/.venv, python3, /usr/bin/python3)", imports)
}

// findNode finds node and the modules the Node.js implementation needs
// (ioredis too, when withClient), or says why it cannot.
func findNode(withClient bool) (language, string) {
	path, err := exec.LookPath("node")
	if err != nil {
		return language{name: "node"}, "node not found on PATH"
	}
	modules := []string{"xxhash-wasm"}
	if withClient {
		modules = append(modules, "ioredis")
	}
	for _, m := range modules {
		if _, err := os.Stat(filepath.Join("node", "node_modules", m, "package.json")); err != nil {
			return language{name: "node"}, "interop/node/node_modules/" + m + " is missing"
		}
	}
	return language{name: "node", dir: "node", interp: path, vectors: "test_vectors.js", publish: "publish.js"}, ""
}

// languages returns the reference implementations that can run here. Each
// one that cannot gets a skipped subtest saying why and how to fix it.
func languages(t *testing.T, withClient bool) []language {
	t.Helper()
	var langs []language
	for _, find := range []func(bool) (language, string){findPython, findNode} {
		lang, missing := find(withClient)
		if missing != "" {
			t.Run(lang.name, func(t *testing.T) { t.Skipf("SKIP %s: %s; %s", lang.name, missing, installHint) })
			continue
		}
		langs = append(langs, lang)
	}
	return langs
}

// run runs script of lang with args in its directory and returns its
// standard output; it fails the test, showing both outputs, if the script
// fails.
func (lang language) run(t *testing.T, ctx context.Context, script string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, lang.interp, append([]string{script}, args...)...)
	cmd.Dir = lang.dir
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	require.NoError(t, err, "%s %s failed\nstdout:\n%s\nstderr:\n%s", lang.name, script, stdout.String(), stderr.String())
	return stdout.String()
}

// TestReferenceVectors runs each language's vector runner over
// testdata/layout_vectors.json and requires every vector to pass.
func TestReferenceVectors(t *testing.T) {
	for _, lang := range languages(t, false) {
		t.Run(lang.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			out := lang.run(t, ctx, lang.vectors)
			lines := strings.Split(strings.TrimSpace(out), "\n")
			last := lines[len(lines)-1]
			t.Log(last)
			var passed, failed int
			_, err := fmt.Sscanf(last[strings.Index(last, ":")+1:], "%d passed, %d failed", &passed, &failed)
			require.NoError(t, err, "closing line %q", last)
			assert.Zero(t, failed, out)
			assert.Greater(t, passed, 4000, "the runner checked too little")
		})
	}
}

// wanted is one message a publisher sends and the subscriber must get.
type wanted struct {
	Channel    string `json:"channel"`
	PayloadHex string `json:"payload_hex"`
}

// messages are the interop messages of one run: awkward channels that
// spread over every instance and many partitions, payloads naming them.
func messages(lang, engine string) []wanted {
	channels := []string{"ÄÖÜ", "{x}y", "}{", "チャット", "emoji 🎉", "a{b}c"}
	for i := range 10 {
		channels = append(channels, "interop:"+strconv.Itoa(i))
	}
	out := make([]wanted, len(channels))
	for i, ch := range channels {
		ch = lang + "/" + engine + "/" + ch
		out[i] = wanted{ch, hex.EncodeToString([]byte("payload of " + ch + " \x00\xc1"))}
	}
	return out
}

// collector gathers what a broker's Handler receives.
type collector struct {
	mu  sync.Mutex
	got map[string]shardcast.Message
}

func (c *collector) handle(m shardcast.Message) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.got == nil {
		c.got = map[string]shardcast.Message{}
	}
	m.Payload = bytes.Clone(m.Payload)
	c.got[m.Channel] = m
}

func (c *collector) count(channels []wanted) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, w := range channels {
		if _, ok := c.got[w.Channel]; ok {
			n++
		}
	}
	return n
}

// publishAndCheck subscribes b to the messages' channels, has lang's
// publisher send them, and checks that each arrives once with its payload
// and, unless raw, a PublishedAt inside the publisher's run.
func publishAndCheck(t *testing.T, lang language, b shardcast.Broker, got *collector, spec map[string]any, fingerprint string) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	msgs := messages(lang.name, spec["engine"].(string))
	channels := make([]string, len(msgs))
	for i, m := range msgs {
		channels[i] = m.Channel
	}
	require.NoError(t, b.Subscribe(ctx, channels...))
	spec["messages"] = msgs
	arg, err := json.Marshal(spec)
	require.NoError(t, err)

	before := time.Now()
	out := lang.run(t, ctx, lang.publish, string(arg))
	after := time.Now()
	t.Logf("%s publisher:\n%s", lang.name, out)

	var first struct{ Fingerprint string }
	require.NoError(t, json.Unmarshal([]byte(strings.SplitN(out, "\n", 2)[0]), &first))
	assert.Equal(t, fingerprint, first.Fingerprint, "the %s implementation's fingerprint differs from the Go broker's", lang.name)

	for got.count(msgs) < len(msgs) {
		select {
		case <-ctx.Done():
			t.Fatalf("only %d of %d messages arrived", got.count(msgs), len(msgs))
		case <-time.After(10 * time.Millisecond):
		}
	}
	got.mu.Lock()
	defer got.mu.Unlock()
	raw, _ := spec["raw"].(bool)
	for _, w := range msgs {
		m := got.got[w.Channel]
		assert.Equal(t, w.PayloadHex, hex.EncodeToString(m.Payload), w.Channel)
		if raw {
			assert.True(t, m.PublishedAt.IsZero(), "raw message %q has a PublishedAt", w.Channel)
			continue
		}
		// Same machine, same clock: the stamp lies within the publisher's
		// run. Node stamps whole milliseconds, hence the slack before.
		assert.False(t, m.PublishedAt.Before(before.Add(-time.Millisecond)), "%q published at %v, publisher started at %v", w.Channel, m.PublishedAt, before)
		assert.False(t, m.PublishedAt.After(after), "%q published at %v, publisher ended at %v", w.Channel, m.PublishedAt, after)
	}
}

// TestCrossLanguageSharded publishes from Python and Node.js to standalone
// instances, choosing the instance with the reference implementation, into
// a Go sharded.Broker: enveloped, and raw into a raw broker.
func TestCrossLanguageSharded(t *testing.T) {
	langs := languages(t, true)
	if len(langs) == 0 {
		t.Skipf("SKIP: no reference implementation can publish; %s", installHint)
	}
	var addrs []string
	for range 3 {
		addrs = append(addrs, redistest.StartStandalone(t).Addr())
	}
	// A URL address must hash as its host:port.
	addrs[1] = "redis://" + addrs[1] + "/0"
	for _, raw := range []bool{false, true} {
		got := &collector{}
		b, err := sharded.New(sharded.Config{Addrs: addrs, Options: shardcast.Options{Handler: got.handle, Raw: raw}})
		require.NoError(t, err)
		fp, _, err := layoutgen.ShardedFingerprint(addrs)
		require.NoError(t, err)
		require.Equal(t, fp, b.Fingerprint(), "docs/LAYOUT.md's sharded fingerprint differs from sharded.Broker's")
		for _, lang := range langs {
			t.Run(fmt.Sprintf("%s/raw=%v", lang.name, raw), func(t *testing.T) {
				spec := map[string]any{"engine": "sharded", "addrs": addrs, "raw": raw}
				publishAndCheck(t, lang, b, got, spec, b.Fingerprint())
			})
		}
		require.NoError(t, b.Close())
	}
}

// TestCrossLanguageCluster publishes from Python and Node.js with
// SPUBLISH to the master of the slot the reference implementation computed,
// into a Go cluster.Broker with a non-default partition count and prefix.
func TestCrossLanguageCluster(t *testing.T) {
	langs := languages(t, true)
	if len(langs) == 0 {
		t.Skipf("SKIP: no reference implementation can publish; %s", installHint)
	}
	c := redistest.StartCluster(t, 3, 0)
	const partitions, prefix = 64, "app:ü:"
	got := &collector{}
	b, err := cluster.New(cluster.Config{Addrs: c.Seeds(), Partitions: partitions, Prefix: prefix, Options: shardcast.Options{Handler: got.handle}})
	require.NoError(t, err)
	defer func() { require.NoError(t, b.Close()) }()
	for _, lang := range langs {
		t.Run(lang.name, func(t *testing.T) {
			spec := map[string]any{"engine": "cluster", "addrs": c.Seeds()[:1], "partitions": partitions, "prefix": prefix}
			publishAndCheck(t, lang, b, got, spec, b.Fingerprint())
		})
	}
}

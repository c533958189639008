package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestMain runs the program itself when the test binary is started with
// QUICKSTART_RUN set, so that TestQuickstart runs main as a user would.
func TestMain(m *testing.M) {
	if os.Getenv("QUICKSTART_RUN") == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestQuickstart runs the README's program over two real instances and
// checks what it prints.
func TestQuickstart(t *testing.T) {
	a, b := redistest.StartStandalone(t), redistest.StartStandalone(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "QUICKSTART_RUN=1", "REDIS_ADDRS="+a.Addr()+","+b.Addr())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "stderr: %s", stderr.String())
	assert.Equal(t, "room:42: hello\n", string(out))
}

// TestQuickstartFailsWithoutRedis: with no server at the address, the
// program exits non-zero and says why.
func TestQuickstartFailsWithoutRedis(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "QUICKSTART_RUN=1", "REDIS_ADDRS=127.0.0.1:1")
	out, err := cmd.CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "127.0.0.1:1")
}

// TestReadmeShowsThisProgram keeps the README's complete program and this
// file the same, so that the README's program is the one compiled and run
// here.
func TestReadmeShowsThisProgram(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	src, err := os.ReadFile("main.go")
	require.NoError(t, err)
	body := string(src)
	if i := strings.Index(body, "package main"); i >= 0 {
		body = body[i:] // the README shows the program without its doc comment
	}
	assert.True(t, strings.Contains(string(readme), "```go\n"+body+"```\n"),
		"README.md's complete program differs from examples/quickstart/main.go; copy the file into the README")
}

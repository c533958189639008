package sharded

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// capturedLog holds what slog.Default() wrote during a test.
type capturedLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *capturedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// lines returns the lines logged at level ("WARN", "INFO", ...).
func (l *capturedLog) lines(level string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for line := range strings.Lines(l.buf.String()) {
		if strings.Contains(line, " level="+level+" ") {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return out
}

// captureDefaultLog makes slog.Default() write text lines, Info and up,
// to the returned log until the test ends, then puts the previous
// default back. Brokers built without Options.Logger log there. A test
// that calls it must not run in parallel with any other: slog.Default is
// the process's.
func captureDefaultLog(t *testing.T) *capturedLog {
	t.Helper()
	l := &capturedLog{}
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelInfo})))
	t.Cleanup(func() { slog.SetDefault(prev) })
	return l
}

package brokertest

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// DefaultLog holds what slog.Default() wrote while CaptureDefaultLog held
// it: brokers built without Options.Logger log there.
type DefaultLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p; slog's text handler calls it once per record.
func (l *DefaultLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// Lines returns the lines logged at level ("WARN", "INFO", ...), in order.
func (l *DefaultLog) Lines(level string) []string {
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

// CaptureDefaultLog makes slog.Default() write text lines, Info and up,
// to the returned log until the test ends, then puts the previous default
// back. A test that calls it must not run in parallel with any other:
// slog.Default is the process's.
func CaptureDefaultLog(t testing.TB) *DefaultLog {
	t.Helper()
	l := &DefaultLog{}
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelInfo})))
	t.Cleanup(func() { slog.SetDefault(prev) })
	return l
}

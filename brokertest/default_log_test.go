package brokertest

import (
	"log/slog"
	"strings"
	"testing"
)

// TestCaptureDefaultLogKeepsLevelsApartAndRestores: Lines returns the
// lines of one level in order, Debug is not captured, and the previous
// default logger is back once the test that captured it ends.
func TestCaptureDefaultLogKeepsLevelsApartAndRestores(t *testing.T) {
	before := slog.Default()
	var inner *DefaultLog
	t.Run("captured", func(t *testing.T) {
		inner = CaptureDefaultLog(t)
		slog.Warn("first", "node", "a")
		slog.Info("between")
		slog.Debug("hidden")
		slog.Warn("second")
		warns := inner.Lines("WARN")
		if len(warns) != 2 || !strings.Contains(warns[0], `msg=first node=a`) || !strings.Contains(warns[1], "msg=second") {
			t.Fatalf("WARN lines = %q, want first then second", warns)
		}
		if infos := inner.Lines("INFO"); len(infos) != 1 || !strings.Contains(infos[0], "msg=between") {
			t.Fatalf("INFO lines = %q, want the one between", infos)
		}
		if debug := inner.Lines("DEBUG"); len(debug) != 0 {
			t.Fatalf("DEBUG captured: %q", debug)
		}
	})
	if slog.Default() != before {
		t.Fatal("the previous default logger was not put back")
	}
	slog.Warn("after")
	if n := len(inner.Lines("WARN")); n != 2 {
		t.Fatalf("a line logged after the capture ended reached it: %d WARN lines", n)
	}
}

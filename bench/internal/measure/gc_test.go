package measure

import (
	"runtime"
	"testing"
)

// TestReadRuntime checks that the runtime's accounts are read: a forced
// collection with live memory shows GC CPU time and a live heap, and the
// share lies between 0 and 1.
func TestReadRuntime(t *testing.T) {
	keep := make([][]byte, 0, 256)
	before := ReadRuntime()
	for range 256 {
		keep = append(keep, make([]byte, 64<<10))
	}
	runtime.GC()
	runtime.GC()
	after := ReadRuntime()
	runtime.KeepAlive(keep)
	if after.GCCPU <= before.GCCPU {
		t.Errorf("GC CPU did not grow across two collections: %v then %v", before.GCCPU, after.GCCPU)
	}
	if after.LiveHeap < 16<<20 {
		t.Errorf("live heap %d bytes, want at least the 16 MiB kept", after.LiveHeap)
	}
	if s := before.GCShare(after); s <= 0 || s > 1 {
		t.Errorf("GC share %v, want within (0, 1]", s)
	}
	if s := after.GCShare(after); s != 0 {
		t.Errorf("GC share over no time %v, want 0", s)
	}
}

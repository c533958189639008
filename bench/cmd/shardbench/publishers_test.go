package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/shardcast/shardcast/bench/internal/engines"
)

// TestPayloadSourceFreshAllocatesPerCall: the production-like rows rest on
// every payload being an allocation of its own with the same bytes as
// the reused buffer's, and the reference rows on no allocation at all.
func TestPayloadSourceFreshAllocatesPerCall(t *testing.T) {
	t0 := time.Unix(0, 1_700_000_000_000_000_000)
	t1 := t0.Add(time.Millisecond)
	fresh, reused := newPayloadSource(256, true), newPayloadSource(256, false)

	a, b := fresh.next(t0), fresh.next(t1)
	if len(a) != 256 || len(b) != 256 {
		t.Fatalf("fresh payloads of %d and %d bytes, want 256", len(a), len(b))
	}
	if &a[0] == &b[0] {
		t.Fatal("fresh source returned the same buffer twice")
	}
	if !engines.Stamped(a).Equal(t0) || !engines.Stamped(b).Equal(t1) {
		t.Fatalf("stamps %v, %v; want %v, %v (a later call overwrote an earlier payload?)", engines.Stamped(a), engines.Stamped(b), t0, t1)
	}
	r := reused.next(t0)
	if !bytes.Equal(a[8:], r[8:]) {
		t.Fatal("fresh and reused payloads differ beyond the stamp")
	}
	if r2 := reused.next(t1); &r2[0] != &r[0] {
		t.Fatal("reused source allocated a new buffer")
	}
	if n := testing.AllocsPerRun(100, func() { reused.next(t0) }); n != 0 {
		t.Errorf("reused source: %.0f allocations per payload, want 0", n)
	}
	if n := testing.AllocsPerRun(100, func() { sink = fresh.next(t0) }); n != 1 {
		t.Errorf("fresh source: %.0f allocations per payload, want 1", n)
	}
	if p := newPayloadSource(3, true).next(t0); len(p) != 8 {
		t.Errorf("a 3-byte payload is %d bytes, want the 8-byte stamp", len(p))
	}
}

var sink []byte

// TestHoldHeap: the block is held at the size asked for and let go at 0.
func TestHoldHeap(t *testing.T) {
	defer holdHeap(0)
	holdHeap(2)
	if heldHeap() != 2<<20 {
		t.Fatalf("held %d bytes, want 2 MiB", heldHeap())
	}
	holdHeap(0)
	if heldHeap() != 0 {
		t.Fatalf("held %d bytes after holdHeap(0)", heldHeap())
	}
}

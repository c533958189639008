package main

import "testing"

func TestPairedRatioSkipsRoundsWithAnError(t *testing.T) {
	a := []tpResult{{Rate: 300}, {Rate: 800}, {Rate: 900}, {Rate: 100}}
	c := []tpResult{{Error: "the counting subscriber was disconnected"}, {Rate: 1000}, {Rate: 1000}, {Rate: 0, Error: "x"}}
	r, n := pairedRatio(a, c)
	if n != 2 || r < 0.849 || r > 0.851 {
		t.Fatalf("pairedRatio = %v over %d rounds, want 0.85 over 2", r, n)
	}
	if _, n := pairedRatio(a[:1], c[:1]); n != 0 {
		t.Fatalf("a round whose ceiling failed counted")
	}
}

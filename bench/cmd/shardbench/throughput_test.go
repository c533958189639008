package main

import (
	"strings"
	"testing"
)

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

// TestReferenceRowsBesideProductionLike: the ratio table gives the
// reference rows' ratios beside the production-like ones, the targets are
// judged on the production-like medians alone, and the per-engine table
// sets each engine's two processes against each other.
func TestReferenceRowsBesideProductionLike(t *testing.T) {
	one := func(rate, cpu float64) map[string]map[int]map[string]tpResult {
		return map[string]map[int]map[string]tpResult{"standalone": {128: {
			"shardcast":  {Engine: "shardcast", Rate: rate, ClientCPUns: cpu, P99us: 100},
			"centrifuge": {Engine: "centrifuge", Rate: 200, ClientCPUns: 2000, P99us: 100},
		}}}
	}
	prod, ref := one(300, 1000), one(400, 800)
	ratios, ts := throughputTargets(prod, ref)
	if !strings.Contains(ratios, "reference: delivered/s ratio") || !strings.Contains(ratios, "| 1.50×") || !strings.Contains(ratios, "| 2.00×") {
		t.Errorf("ratio table lacks the production-like 1.50× or the reference 2.00×:\n%s", ratios)
	}
	var judged bool
	for _, tg := range ts {
		if strings.HasPrefix(tg.Goal, "standalone, 128 publishers: delivered/s") {
			judged = true
			if !strings.HasPrefix(tg.Got, "1.50×") || tg.Met != "met" {
				t.Errorf("target judged on %q (%s), want the production-like 1.50×, met", tg.Got, tg.Met)
			}
		}
	}
	if !judged {
		t.Fatal("no delivered/s target for standalone, 128 publishers")
	}
	cmp := processTable(prod, ref, []string{"standalone"}, map[string][]string{"standalone": {"shardcast", "centrifuge"}})
	if !strings.Contains(cmp, "0.75× (300 vs 400)") || !strings.Contains(cmp, "1.25× (1.00µs vs 800ns)") {
		t.Errorf("per-engine table lacks shardcast's 0.75× delivered/s or 1.25× CPU/msg:\n%s", cmp)
	}
	if r, _ := throughputTargets(prod, nil); strings.Contains(r, "reference") {
		t.Errorf("without reference rows the ratio table still mentions them:\n%s", r)
	}
	if processTable(prod, nil, []string{"standalone"}, nil) != "" {
		t.Error("per-engine table rendered without reference rows")
	}
}

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

// TestSyncTargetsShowTheSameRoundsBounds: the issue 44 rows carry the
// PublishAsync and ceiling figures of the same medians, and still render
// without them.
func TestSyncTargetsShowTheSameRoundsBounds(t *testing.T) {
	row := map[string]tpResult{
		"shardcast":       {Engine: "shardcast", Rate: 409300, ClientCPUns: 2460, RedisCPUns: 1340, P99us: 100},
		"centrifuge":      {Engine: "centrifuge", Rate: 344300, ClientCPUns: 2860, P99us: 100},
		"shardcast-async": {Engine: "shardcast-async", Rate: 675300, ClientCPUns: 1480},
		ceiling:           {Engine: ceiling, Rate: 475100, ClientCPUns: 1990},
	}
	got := func(row map[string]tpResult) map[string]string {
		_, ts := throughputTargets(map[string]map[int]map[string]tpResult{"standalone": {128: row}}, nil)
		out := map[string]string{}
		for _, tg := range ts {
			if strings.HasPrefix(tg.Goal, "speed (issue 44)") {
				out[tg.Goal[strings.Index(tg.Goal, "Publish ")+8:]] = tg.Got + " | " + tg.Met
			}
		}
		return out
	}
	want := map[string]string{
		"client CPU per delivered message ≤ 1.5µs (Redis's own CPU/msg beside it)": "2.46µs (Redis 1.34µs); same rounds: PublishAsync 1.48µs, the redis-benchmark ceiling's client 1.99µs | not met",
		"delivered/s ≥ 1.5× Centrifuge":                                            "1.19× (409.3k vs 344.3k); the target is 516.5k, the redis-benchmark ceiling 475.1k | not met",
	}
	g := got(row)
	for k, w := range want {
		if g[k] != w {
			t.Errorf("%s:\n got %q\nwant %q", k, g[k], w)
		}
	}
	delete(row, "shardcast-async")
	delete(row, ceiling)
	g = got(row)
	if w := "2.46µs (Redis 1.34µs) | not met"; g["client CPU per delivered message ≤ 1.5µs (Redis's own CPU/msg beside it)"] != w {
		t.Errorf("without the async and ceiling rows: %q, want %q", g["client CPU per delivered message ≤ 1.5µs (Redis's own CPU/msg beside it)"], w)
	}
	if w := "1.19× (409.3k vs 344.3k); the target is 516.5k | not met"; g["delivered/s ≥ 1.5× Centrifuge"] != w {
		t.Errorf("without the ceiling row: %q, want %q", g["delivered/s ≥ 1.5× Centrifuge"], w)
	}
}

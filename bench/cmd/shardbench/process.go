package main

import (
	"fmt"
	"strings"
	"time"
)

// process is what surrounds an engine in the benchmark process during a
// throughput run: the heap the process holds besides the engine, and how
// its publishers come by their payloads.
type process struct {
	heapMiB int  // the -heap block held through the run (0: none)
	fresh   bool // a payload allocated per publish, as an encoder does
	ref     bool // the reference rows, not the production-like ones
}

// productionLike is the process the throughput rows run in by default:
// the -heap block held, a payload allocated per publish.
func productionLike() process { return process{heapMiB: cfg.heap, fresh: true} }

// reference is the process of the reference rows: no heap block, each
// publisher reusing one payload buffer, so the process holds and
// allocates little but the engine.
func reference() process { return process{ref: true} }

// processes returns the processes every throughput row runs in, the
// production-like one first.
func processes() []process {
	ps := []process{productionLike()}
	if cfg.reusedBuffer {
		ps = append(ps, reference())
	}
	return ps
}

// String describes p in a few words, for progress lines and captions.
func (p process) String() string {
	heap := "no heap block"
	if p.heapMiB > 0 {
		heap = fmt.Sprintf("%d MiB heap block", p.heapMiB)
	}
	pay := "one reused payload buffer per publisher"
	if p.fresh {
		pay = "a payload allocated per publish"
	}
	return heap + ", " + pay
}

// name is p's value in the JSON process field.
func (p process) name() string {
	if p.ref {
		return "reference"
	}
	return "production-like"
}

// processNote is the throughput section's paragraph on the two sets of
// rows: which is which and why.
func processNote(ps []process) string {
	var b strings.Builder
	fmt.Fprintf(&b, "**The process around the engine.** Go's collector starts a cycle each time the heap grows by what the last one found live "+
		"(GOGC 100), so what an engine costs depends on what else its process holds and allocates. A benchmark process that holds nothing "+
		"but the broker has a heap of a few MB, and there each byte allocated per message buys collections a server would not make; a server "+
		"also allocates every payload it publishes (its encoder's output), which a benchmark that reuses one buffer does not. The rows "+
		"the targets are judged on are therefore *production-like* (%s): a pointer-free block (`-heap`) held live through the run, "+
		"standing for the rest of a server's heap without adding mark work, and publishers that allocate a fresh payload per call, as an "+
		"application's encoder does. Before the first run on a new block the process writes once through the heap's headroom (the "+
		"memory the pacer lets it grow into before it collects), so that runs find it mapped as a long-running server does instead of "+
		"paying the kernel's first touch of every page. *GC* is the runtime's estimate of its collector's share of the process's Go CPU time over the "+
		"window and drain, and the collections per second.", ps[0])
	if len(ps) > 1 {
		fmt.Fprintf(&b, " The *reference* rows (`-reused-buffer`) are the process with %s: the engine's own cost with as little "+
			"around it as possible. They run in the same rounds: each "+
			"round runs every engine production-like, then every engine as reference, then the ceiling (one change of heap per round). "+
			"The *production-like against reference* table below gives each engine's ratio between the two, how much the process around "+
			"it moves that engine's figures; the ratio table gives the ratios between engines in both.", ps[1])
	}
	b.WriteString(" " + heapCostNote + "\n\n")
	return b.String()
}

// heapCostNote says what a real heap changes in shardcast's own cost per
// message, from profiles of both processes in one run.
const heapCostNote = "What the process around it changes in shardcast's own cost: CPU profiles of both processes in one run " +
	"(`shardbench throughput -engines shardcast -publishers 128 -all-cores=false -rounds 2 -duration 6s -cpuprofile`, and the same with " +
	"`shardcast-async -publishers 8`, split by the run's pprof label `process`; 2026-12-02, quiet machine) put the engine's own " +
	"functions at the same time in both within the profile's resolution (±0.07 s of 5-11 s). What the production-like process adds " +
	"is the runtime's work for fresh memory, on every allocation in the process: setting up new spans (`mspan.init`, " +
	"`initInlineMarkBits`) and writing into memory that is not in cache (`memmove`, `memclrNoHeapPointers`), together +0.56 s of " +
	"6.3 s in the async profile, more than half of the `memmove` being the publishers' own payload fill. shardcast's part of it is one " +
	"allocation per received message, the copy that lets a Handler keep `Message.Payload` and `Channel`: `BenchmarkFeederCopy` " +
	"(root package) measures it at about 80 ns in a 256 MiB heap against about 270 ns in a toy heap, where it pays for the collections " +
	"its garbage starts. Two other layouts of that copy, timed in a throw-away benchmark of the same shape, were not taken: the channel name shared per read loop with the " +
	"payload cloned without clearing saved about 7 ns (and costs a second allocation whenever the name is not cached, as with many " +
	"channels), and an uncleared single buffer saved nothing. `Options.ReusePayloads` removes the copy for a Handler that keeps no payload."

// processTable compares each engine's production-like medians with its
// reference medians of the same run (empty without reference rows), over
// topologies in the order of topos and engines in the order of names.
func processTable(prod, ref map[string]map[int]map[string]tpResult, topos []string, names map[string][]string) string {
	if ref == nil {
		return ""
	}
	gc := func(r tpResult) string { return fmt.Sprintf("%.0f%% (%.0f/s)", 100*r.GCShare, r.GCPerSec) }
	var rows [][]string
	for _, topo := range topos {
		for _, p := range sortedKeys(prod[topo]) {
			for _, eng := range names[topo] {
				a, okA := prod[topo][p][eng]
				r, okR := ref[topo][p][eng]
				if !okA || !okR || a.Rate == 0 || r.Rate == 0 {
					continue
				}
				rows = append(rows, []string{topo, fmt.Sprint(p), eng,
					fmt.Sprintf("%s (%s vs %s)", ratio(a.Rate, r.Rate), fmtRate(a.Rate), fmtRate(r.Rate)),
					fmt.Sprintf("%s (%s vs %s)", ratio(a.ClientCPUns, r.ClientCPUns), fmtDur(time.Duration(a.ClientCPUns)), fmtDur(time.Duration(r.ClientCPUns))),
					fmt.Sprintf("%.1f vs %.1f", a.AllocsPerMsg, r.AllocsPerMsg),
					gc(a) + " vs " + gc(r)})
			}
		}
	}
	if len(rows) == 0 {
		return ""
	}
	return "### Production-like against reference, per engine (medians of the same run)\n\n" +
		table([]string{"topology", "publishers", "engine", "delivered/s", "client CPU/msg", "client allocs/msg", "GC"}, rows) + "\n"
}

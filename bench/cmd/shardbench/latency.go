package main

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcast/shardcast/bench/internal/engines"
	"github.com/shardcast/shardcast/bench/internal/measure"
)

type latResult struct {
	Scenario   string  `json:"scenario"`
	Engine     string  `json:"engine"`
	TargetRate int     `json:"target_rate"`
	Rate       float64 `json:"achieved_rate"`
	P50us      float64 `json:"p50_us"`
	P99us      float64 `json:"p99_us"`
	P999us     float64 `json:"p999_us"`
	Delivered  uint64  `json:"delivered"`
	Error      string  `json:"error,omitempty"`
}

const latPublishers = 32

// runLatency publishes at a ladder of fixed rates on a standalone Redis
// and reports latency percentiles per rate, with an SVG plot.
func runLatency(ctx context.Context, e *env) (section, error) {
	sec := section{Name: "latency", Title: "Latency at fixed publish rates"}
	rates, err := parseInts(cfg.rates)
	if err != nil {
		return sec, err
	}
	addrs, err := e.Standalone()
	if err != nil {
		return sec, err
	}
	var names []string
	for _, n := range engineList([]string{"shardcast", "centrifuge", "go-redis"}) {
		if k, err := engines.Lookup(n); err == nil && !k.Cluster {
			names = append(names, n)
		}
	}
	results := map[string][]latResult{}
	var rows [][]string
	for _, rate := range rates {
		for _, name := range names {
			if ctx.Err() != nil {
				return sec, ctx.Err()
			}
			k, _ := engines.Lookup(name)
			progress("latency: %s at %s msgs/s …", name, fmtRate(float64(rate)))
			r := latencyRun(ctx, k, addrs, rate)
			r.Scenario, r.Engine, r.TargetRate = "latency", name, rate
			emit(r)
			results[name] = append(results[name], r)
			if r.Error != "" {
				rows = append(rows, []string{fmtRate(float64(rate)), name, "error: " + r.Error})
				continue
			}
			rows = append(rows, []string{fmtRate(float64(rate)), name, fmtRate(r.Rate), fmtDur(time.Duration(r.P50us * 1e3)),
				fmtDur(time.Duration(r.P99us * 1e3)), fmtDur(time.Duration(r.P999us * 1e3))})
		}
	}
	tbl := table([]string{"target rate", "engine", "achieved", "p50", "p99", "p99.9"}, rows)
	show("latency\n" + tbl)
	sec.Files = map[string][]byte{"latency.svg": []byte(latencySVG(names, results))}
	sec.Body = fmt.Sprintf("One standalone Redis, %d channels, %d-byte payloads, %d publisher goroutines pacing themselves to a fixed total rate "+
		"(open loop; a publisher that falls behind sends what is due as fast as Publish returns, so *achieved* shows where an engine saturates). "+
		"Latency is publish→handler, measured from the moment Publish was called. %s per step after a short warm-up; engines interleaved at each rate.\n\n"+
		"![p50 and p99 latency per publish rate](latency.svg)\n\n%s\n", cfg.channels, cfg.payload, latPublishers, cfg.latencyDuration, tbl)
	return sec, nil
}

func latencyRun(ctx context.Context, k engines.Kind, addrs []string, rate int) (res latResult) {
	var win window
	var hist measure.Histogram
	var total atomic.Uint64
	recv := func(_ string, _ []byte, sentAt time.Time) {
		total.Add(1)
		if win.contains(sentAt.UnixNano()) {
			hist.Record(time.Since(sentAt))
		}
	}
	base := measure.Clients(addrs)
	eng, err := k.New(engines.Target{Standalone: addrs}, tuning(), recv)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	defer closeAndSettle(eng, addrs, base)
	names := channelNames(fmt.Sprintf("lat:%s:%d:", k.Name, rate), cfg.channels)
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	err = eng.Subscribe(sctx, names)
	cancel()
	if err != nil {
		res.Error = "subscribe: " + err.Error()
		return res
	}
	warm := 300 * time.Millisecond
	start := time.Now()
	end := start.Add(warm + cfg.latencyDuration)
	per := float64(rate) / latPublishers // msgs/s per goroutine
	var sent atomic.Uint64
	var wg sync.WaitGroup
	for g := range latPublishers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, cfg.payload)
			var n uint64
			idx := g
			for ctx.Err() == nil {
				now := time.Now()
				if now.After(end) {
					return
				}
				due := uint64(per * now.Sub(start).Seconds())
				if n >= due {
					next := start.Add(time.Duration(float64(n+1) / per * float64(time.Second)))
					time.Sleep(time.Until(next))
					continue
				}
				engines.Stamp(buf, time.Now())
				if eng.Publish(ctx, names[idx%len(names)], buf) == nil {
					sent.Add(1)
				}
				n++
				idx += latPublishers
			}
		}()
	}
	sleepCtx(ctx, warm)
	t0 := time.Now()
	win.start.Store(t0.UnixNano())
	sleepCtx(ctx, cfg.latencyDuration)
	t1 := time.Now()
	win.end.Store(t1.UnixNano())
	wg.Wait()
	drain(&total, sent.Load(), 5*time.Second)
	res.Delivered = hist.Count()
	res.Rate = float64(res.Delivered) / t1.Sub(t0).Seconds()
	res.P50us = float64(hist.Quantile(0.5)) / 1e3
	res.P99us = float64(hist.Quantile(0.99)) / 1e3
	res.P999us = float64(hist.Quantile(0.999)) / 1e3
	return res
}

// latencySVG draws p50 (dashed) and p99 (solid) per engine against the
// target rate, both axes logarithmic.
func latencySVG(names []string, results map[string][]latResult) string {
	const w, h, left, right, top, bottom = 720, 420, 70, 170, 30, 50
	var xs []float64
	ymin, ymax := math.Inf(1), math.Inf(-1)
	for _, rs := range results {
		for _, r := range rs {
			if r.Error != "" || r.P50us <= 0 {
				continue
			}
			xs = append(xs, float64(r.TargetRate))
			ymin = math.Min(ymin, r.P50us)
			ymax = math.Max(ymax, r.P99us)
		}
	}
	if len(xs) == 0 {
		return `<svg xmlns="http://www.w3.org/2000/svg" width="200" height="40"><text x="10" y="25">no data</text></svg>`
	}
	sort.Float64s(xs)
	xmin, xmax := xs[0], xs[len(xs)-1]
	if xmax == xmin {
		xmax = xmin * 2
	}
	ylo, yhi := math.Floor(math.Log10(ymin)), math.Ceil(math.Log10(ymax))
	if yhi == ylo {
		yhi++
	}
	px := func(x float64) float64 {
		return left + (math.Log10(x)-math.Log10(xmin))/(math.Log10(xmax)-math.Log10(xmin))*(w-left-right)
	}
	py := func(y float64) float64 { return top + (yhi-math.Log10(y))/(yhi-ylo)*(h-top-bottom) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	for e := ylo; e <= yhi; e++ {
		y := py(math.Pow(10, e))
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n",
			left, y, w-right, y, left-6, y+4, fmtDur(time.Duration(math.Pow(10, e)*1e3)))
	}
	seen := map[float64]bool{}
	for _, x := range xs {
		if seen[x] {
			continue
		}
		seen[x] = true
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#eee"/><text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n",
			px(x), top, px(x), h-bottom, px(x), h-bottom+16, fmtRate(x))
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">target publish rate (msgs/s)</text>`+"\n", (left+w-right)/2, h-10)
	fmt.Fprintf(&b, `<text x="14" y="%d" transform="rotate(-90 14 %d)" text-anchor="middle">publish→handler latency</text>`+"\n", (top+h-bottom)/2, (top+h-bottom)/2)
	colors := []string{"#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e"}
	for i, name := range names {
		c := colors[i%len(colors)]
		for _, q := range []struct {
			dash string
			get  func(latResult) float64
		}{{"", func(r latResult) float64 { return r.P99us }}, {` stroke-dasharray="5,4"`, func(r latResult) float64 { return r.P50us }}} {
			var pts []string
			for _, r := range results[name] {
				if r.Error == "" && q.get(r) > 0 {
					pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(float64(r.TargetRate)), py(q.get(r))))
				}
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`+"\n", c, q.dash, strings.Join(pts, " "))
		}
		y := top + 20*i
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/><text x="%d" y="%d">%s</text>`+"\n",
			w-right+10, y, w-right+30, y, c, w-right+36, y+4, name)
	}
	y := top + 20*len(names) + 10
	fmt.Fprintf(&b, `<text x="%d" y="%d">solid: p99, dashed: p50</text>`+"\n", w-right+10, y)
	b.WriteString("</svg>\n")
	return b.String()
}

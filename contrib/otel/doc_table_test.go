package shardcastotel_test

import (
	"bufio"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	shardcastotel "github.com/shardcast/shardcast/contrib/otel"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestDocTable: the table in doc.go lists exactly the instruments a
// broker with every optional interface yields, each with its unit and
// instrument kind.
func TestDocTable(t *testing.T) {
	type row struct{ unit, kind string }
	doc := map[string]row{}
	f, err := os.Open("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	lines := bufio.NewScanner(f)
	for lines.Scan() {
		code, ok := strings.CutPrefix(lines.Text(), "//\t") // the table is a code block
		fields := strings.Fields(code)
		if ok && len(fields) == 4 && strings.HasPrefix(fields[0], "shardcast.") {
			doc[fields[0]] = row{fields[1], fields[2]}
		}
	}
	if len(doc) == 0 {
		t.Fatal("no table in doc.go")
	}

	var h shardcast.HistogramSnapshot
	h.Record(time.Millisecond)
	var events shardcastotel.Events
	fb := &fakeBroker{latency: shardcast.LatencyStats{Lag: h, HandlerTime: h},
		nodes:      []shardcast.NodeStats{{Addr: "a:1"}},
		partitions: []shardcast.PartitionStats{{Partition: 0, Master: "a:1"}},
		hot:        []shardcast.HotChannel{{Channel: "c", Direction: shardcast.HotIn, Node: "a:1"}}}
	mp, r := newReader(t)
	register(t, mp, fb, shardcastotel.Options{Partitions: true, HotChannels: true, Events: &events})
	ms := collect(t, r)
	for name, m := range ms {
		want, ok := doc[name]
		if !ok {
			t.Errorf("%s is not in doc.go's table", name)
			continue
		}
		var got string
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			got = sumKind(d.IsMonotonic)
		case metricdata.Sum[float64]:
			got = sumKind(d.IsMonotonic)
		case metricdata.Gauge[int64], metricdata.Gauge[float64]:
			got = "gauge"
		case metricdata.Histogram[float64]:
			got = "histogram"
		}
		if got != want.kind || m.Unit != want.unit {
			t.Errorf("%s: %s in %q, doc.go says %s in %q", name, got, m.Unit, want.kind, want.unit)
		}
		if m.Description == "" {
			t.Errorf("%s has no description", name)
		}
	}
	for name := range doc {
		if _, ok := ms[name]; !ok {
			t.Errorf("doc.go lists %s, which is not observed", name)
		}
	}
	if len(ms) != len(doc) {
		t.Errorf("%d instruments, %d in doc.go: %v", len(ms), len(doc), names(ms))
	}
	// Semantic-convention style: lower case, dotted, no Prometheus suffix.
	for name := range ms {
		if name != strings.ToLower(name) || slices.ContainsFunc([]string{"_total", "_seconds"}, func(s string) bool { return strings.HasSuffix(name, s) }) {
			t.Errorf("%s: not a semantic-convention style name", name)
		}
	}
}

func sumKind(monotonic bool) string {
	if monotonic {
		return "counter"
	}
	return "updowncounter"
}

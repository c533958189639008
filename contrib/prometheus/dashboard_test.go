package shardcastprom_test

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/cluster"
	shardcastprom "github.com/shardcast/shardcast/contrib/prometheus"
	"github.com/shardcast/shardcast/redistest"
)

const dashboardPath = "dashboard/shardcast.json"

// exportedSeries describes what a collector exports: each series name a
// query can select (a histogram's _bucket, _sum and _count), its family's
// type, its labels, and the values of shardcast_events_total's kind.
type exportedSeries struct {
	types  map[string]dto.MetricType
	labels map[string][]string
	kinds  []string
}

// exportedByCluster gathers a collector with every family on (nodes,
// partitions, hot channels, events) over a live cluster broker.
func exportedByCluster(t *testing.T) exportedSeries {
	t.Helper()
	cl := redistest.StartCluster(t, 1, 0)
	var events shardcastprom.Events
	b, err := cluster.New(cluster.Config{Addrs: cl.Seeds(), Partitions: 16,
		Options: shardcast.Options{Handler: func(shardcast.Message) {}, OnEvent: events.OnEvent,
			HotSampleRate: 1, HotWindow: 500 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	chans := channelNames("dashboard", 4)
	c := shardcastprom.NewCollector(b, shardcastprom.Options{Partitions: true, HotChannels: true, Events: &events})
	// The hot-channel families exist from the end of a window with
	// traffic to the end of the next; windows end on traffic, so keep it
	// going.
	var mfs map[string]*dto.MetricFamily
	waitFor(t, func() bool {
		pubSub(t, b, chans, 1)
		mfs = gather(t, c)
		_, ok := mfs["shardcast_hot_channel_share"]
		return ok
	}, "a hot-channel window")
	ex := exportedSeries{types: map[string]dto.MetricType{}, labels: map[string][]string{}}
	for name, mf := range mfs {
		var labels []string
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if !slices.Contains(labels, l.GetName()) {
					labels = append(labels, l.GetName())
				}
				if name == "shardcast_events_total" && l.GetName() == "kind" {
					ex.kinds = append(ex.kinds, l.GetValue())
				}
			}
		}
		names := []string{name}
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			names = []string{name + "_bucket", name + "_sum", name + "_count"}
			labels = append(labels, "le")
		}
		for _, n := range names {
			ex.types[n] = mf.GetType()
			ex.labels[n] = labels
		}
	}
	return ex
}

// TestDashboardQueriesExportedMetrics: every series the Grafana dashboard
// queries is one the collector exports, with PromQL fit for its type:
// counters and histogram series only under rate() or increase(), gauges
// never, _bucket series only under histogram_quantile() grouped by le;
// every label it groups by is the series' or a scrape target's; every
// event kind it matches is one the collector exports. A typo fails it.
func TestDashboardQueriesExportedMetrics(t *testing.T) {
	raw, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	ex := exportedByCluster(t)
	queries, err := dashboardQueries(raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(queries) < 10 {
		t.Fatalf("%d queries in the dashboard", len(queries))
	}
	for _, p := range checkQueries(queries, ex) {
		t.Error(p)
	}
	// The dashboard covers what the issue asked of it, as far as the
	// collector exports it.
	used := map[string]bool{}
	for _, q := range queries {
		for _, s := range selectors(q) {
			used[s.name] = true
		}
	}
	for _, name := range []string{"shardcast_published_total", "shardcast_delivered_total", "shardcast_lag_seconds_bucket",
		"shardcast_dropped_total", "shardcast_events_total", "shardcast_node_down_seconds_total", "shardcast_queue_depth",
		"shardcast_hot_channel_messages_per_second"} {
		if !used[name] {
			t.Errorf("the dashboard does not query %s", name)
		}
	}
	for _, kind := range []string{"interrupted", "restored", "hot_channel"} {
		if !strings.Contains(string(raw), kind) {
			t.Errorf("the dashboard does not show %s events", kind)
		}
	}

	// The check catches a misspelt metric, a misspelt kind, a gauge under
	// rate() and a quantile not grouped by le.
	for _, mutation := range [][2]string{
		{"shardcast_node_down_seconds_total", "shardcast_node_down_second_total"},
		{`kind=\"hot_channel\"`, `kind=\"hot_channels\"`},
		{"(shardcast_queue_depth", "(rate(shardcast_queue_depth[5m])"},
		{"sum by (le) (rate(shardcast_lag_seconds_bucket", "sum(rate(shardcast_lag_seconds_bucket"},
		{"sum by (node) (rate(shardcast_node_received_total", "sum by (nodes) (rate(shardcast_node_received_total"},
		{"label_values(shardcast_published_total", "label_values(shardcast_publish_total"},
	} {
		bad := strings.Replace(string(raw), mutation[0], mutation[1], 1)
		if bad == string(raw) {
			t.Errorf("mutation %q: not found in the dashboard", mutation[0])
			continue
		}
		qs, err := dashboardQueries([]byte(bad))
		if err != nil {
			t.Fatal(err)
		}
		if len(checkQueries(qs, ex)) == 0 {
			t.Errorf("mutation %q -> %q passed the check", mutation[0], mutation[1])
		}
	}
}

// dashboardQueries returns the PromQL of every panel target, nested rows
// included, and of every query variable.
func dashboardQueries(raw []byte) ([]string, error) {
	var d struct {
		Panels     []dashPanel `json:"panels"`
		Templating struct {
			List []struct {
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, fmt.Errorf("%s: %w", dashboardPath, err)
	}
	var out []string
	var walk func([]dashPanel)
	walk = func(ps []dashPanel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				out = append(out, tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			var s string
			if err := json.Unmarshal(v.Query, &s); err != nil {
				return nil, fmt.Errorf("variable query %s: %w", v.Query, err)
			}
			q.Query = s
		}
		out = append(out, q.Query)
	}
	return out, nil
}

type dashPanel struct {
	ID      int    `json:"id"`
	Title   string `json:"title"`
	GridPos struct {
		X, Y, W, H int
	} `json:"gridPos"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []dashPanel `json:"panels"`
}

// TestDashboardLayout: panel ids are unique, and panels lie within the
// 24-column grid without overlapping, as Grafana lays them out.
func TestDashboardLayout(t *testing.T) {
	raw, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []dashPanel `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatal(err)
	}
	ids := map[int]string{}
	for i, p := range d.Panels {
		if other, ok := ids[p.ID]; ok || p.ID == 0 {
			t.Errorf("panel %q: id %d (also %q)", p.Title, p.ID, other)
		}
		ids[p.ID] = p.Title
		g := p.GridPos
		if g.W < 1 || g.H < 1 || g.X < 0 || g.X+g.W > 24 {
			t.Errorf("panel %q: gridPos %+v outside the grid", p.Title, g)
		}
		for _, q := range d.Panels[:i] {
			o := q.GridPos
			if g.X < o.X+o.W && o.X < g.X+g.W && g.Y < o.Y+o.H && o.Y < g.Y+g.H {
				t.Errorf("panels %q %+v and %q %+v overlap", p.Title, g, q.Title, o)
			}
		}
	}
}

// selector is one series selector of a query: its metric name, its label
// matchers, and whether it stands directly inside rate(), irate() or
// increase().
type selector struct {
	name     string
	matchers string
	rated    bool
}

var (
	identRE    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	groupingRE = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	ratedRE    = regexp.MustCompile(`\b(?:rate|irate|increase)\(\s*$`)
	matcherRE  = regexp.MustCompile(`(\w+)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"`)
	keywords   = []string{"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset", "inf", "nan"}
)

// selectors finds the series selectors of a PromQL query: the identifiers
// that are neither functions, keywords, label names in matchers or
// groupings, nor inside a range or a string. label_values(metric, label)
// of a Grafana variable selects its first argument.
func selectors(q string) []selector {
	if rest, ok := strings.CutPrefix(strings.TrimSpace(q), "label_values("); ok {
		name, _, _ := strings.Cut(rest, ",")
		name, matchers, _ := strings.Cut(name, "{")
		return []selector{{name: strings.TrimSpace(name), matchers: matchers}}
	}
	// Blank out groupings, ranges and matchers, keeping the offsets, and
	// keep each selector's matchers by the offset where they started.
	b := []byte(q)
	blank := func(from, to int) {
		for i := from; i < to; i++ {
			b[i] = ' '
		}
	}
	for _, m := range groupingRE.FindAllStringIndex(q, -1) {
		blank(m[0], m[1])
	}
	matchers := map[int]string{}
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '{', '[':
			closing := byte('}')
			if b[i] == '[' {
				closing = ']'
			}
			j := i + 1
			for j < len(b) && b[j] != closing {
				if b[j] == '"' { // a string may hold the closing byte
					for j++; j < len(b) && b[j] != '"'; j++ {
						if b[j] == '\\' {
							j++
						}
					}
				}
				j++
			}
			j = min(j+1, len(b))
			if closing == '}' {
				matchers[i] = q[i+1 : j-1]
			}
			blank(i, j)
			i = j - 1
		case '"':
			j := i + 1
			for j < len(b) && b[j] != '"' {
				if b[j] == '\\' {
					j++
				}
				j++
			}
			blank(i, min(j+1, len(b)))
			i = j
		}
	}
	s := string(b)
	var out []selector
	for _, m := range identRE.FindAllStringIndex(s, -1) {
		name := s[m[0]:m[1]]
		after := strings.TrimLeft(s[m[1]:], " ")
		if strings.HasPrefix(after, "(") || slices.Contains(keywords, strings.ToLower(name)) ||
			(m[0] > 0 && (s[m[0]-1] >= '0' && s[m[0]-1] <= '9' || s[m[0]-1] == '.')) {
			continue // a function, a keyword, or the exponent of a number
		}
		sel := selector{name: name, rated: ratedRE.MatchString(s[:m[0]])}
		at := m[1]
		for at < len(q) && q[at] == ' ' {
			at++
		}
		sel.matchers = matchers[at]
		out = append(out, sel)
	}
	return out
}

// checkQueries returns what is wrong with queries against ex.
func checkQueries(queries []string, ex exportedSeries) []string {
	var problems []string
	for _, q := range queries {
		sels := selectors(q)
		if len(sels) == 0 {
			problems = append(problems, fmt.Sprintf("%q selects no series", q))
		}
		var labels []string
		for _, s := range sels {
			typ, ok := ex.types[s.name]
			if !ok {
				problems = append(problems, fmt.Sprintf("%q: %s is not a series the collector exports", q, s.name))
				continue
			}
			labels = append(labels, ex.labels[s.name]...)
			isTemplate := strings.HasPrefix(strings.TrimSpace(q), "label_values(")
			switch {
			case isTemplate:
			case typ == dto.MetricType_GAUGE && s.rated:
				problems = append(problems, fmt.Sprintf("%q: %s is a gauge, under rate()/increase()", q, s.name))
			case typ != dto.MetricType_GAUGE && !s.rated:
				problems = append(problems, fmt.Sprintf("%q: %s is a %s, not under rate()/increase()", q, s.name, typ))
			}
			if strings.HasSuffix(s.name, "_bucket") && typ == dto.MetricType_HISTOGRAM &&
				(!strings.Contains(q, "histogram_quantile(") || !groupsByLe(q)) {
				problems = append(problems, fmt.Sprintf("%q: %s outside histogram_quantile() grouped by le", q, s.name))
			}
			for _, m := range matcherRE.FindAllStringSubmatch(s.matchers, -1) {
				if m[1] != "kind" || s.name != "shardcast_events_total" {
					continue
				}
				for _, v := range strings.Split(m[3], "|") {
					if !slices.Contains(ex.kinds, v) {
						problems = append(problems, fmt.Sprintf("%q: kind %q is not one the collector exports %v", q, v, ex.kinds))
					}
				}
			}
		}
		// Grouping labels: the series' own, the scrape target's, or le.
		for _, g := range groupingRE.FindAllStringSubmatch(q, -1) {
			for _, l := range strings.Split(g[1], ",") {
				l = strings.TrimSpace(l)
				if l != "" && l != "instance" && l != "job" && !slices.Contains(labels, l) {
					problems = append(problems, fmt.Sprintf("%q: groups by %s, a label none of its series has", q, l))
				}
			}
		}
	}
	return problems
}

var byLeRE = regexp.MustCompile(`\bby\s*\([^)]*\ble\b`)

func groupsByLe(q string) bool { return byLeRE.MatchString(q) }

package shardcastprom_test

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/shardcast/shardcast"
	shardcastprom "github.com/shardcast/shardcast/contrib/prometheus"
	"github.com/shardcast/shardcast/redistest"
	"github.com/shardcast/shardcast/sharded"
)

// A broker whose metrics are served on /metrics. The Events value is made
// before the broker, whose event hook is set at construction, and chained
// in front of the application's own hook.
func Example() {
	addrs := redistest.OnDemandStandalone(2) // "10.0.0.1:6379", "10.0.0.2:6379" in production

	var events shardcastprom.Events
	b, err := sharded.New(sharded.Config{
		Addrs: addrs,
		Options: shardcast.Options{
			Handler: func(m shardcast.Message) {},
			OnEvent: events.Chain(func(e shardcast.Event) { log.Println("shardcast:", e) }),
		},
	})
	if err != nil {
		panic(err)
	}
	defer b.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(shardcastprom.NewCollector(b, shardcastprom.Options{
		ConstLabels: prometheus.Labels{"engine": "sharded"},
		Events:      &events,
	}))
	// In production: http.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{})).
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()

	ctx := context.Background()
	if err := b.Subscribe(ctx, "example-news"); err != nil {
		panic(err)
	}
	if err := b.Publish(ctx, "example-news", []byte("hello")); err != nil {
		panic(err)
	}

	resp, err := http.Get(srv.URL)
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	lines := bufio.NewScanner(resp.Body)
	for lines.Scan() {
		line := lines.Text()
		if strings.HasPrefix(line, "shardcast_published_total") ||
			strings.HasPrefix(line, "shardcast_channels") ||
			strings.HasPrefix(line, `shardcast_events_total{engine="sharded",kind="error"}`) {
			fmt.Println(line)
		}
	}
	// Output:
	// shardcast_channels{engine="sharded"} 1
	// shardcast_events_total{engine="sharded",kind="error"} 0
	// shardcast_published_total{engine="sharded"} 1
}

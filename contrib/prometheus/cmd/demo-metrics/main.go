// Command demo-metrics runs a sharded broker under a steady publish load
// and serves its metrics on /metrics, to look at with curl or to point a
// Prometheus server at.
//
//	go run ./cmd/demo-metrics                    # starts 2 local redis-server
//	go run ./cmd/demo-metrics -shards a:6379,b:6379 -listen :9464
//	curl -s localhost:9464/metrics | grep ^shardcast_
//
// Without -shards it starts its servers from redis-server on PATH and
// stops them on exit. It runs until interrupted, or for -duration.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/shardcast/shardcast"
	shardcastprom "github.com/shardcast/shardcast/contrib/prometheus"
	"github.com/shardcast/shardcast/examples/localredis"
	"github.com/shardcast/shardcast/sharded"
)

func main() {
	var (
		listen   = flag.String("listen", "localhost:9464", "address to serve /metrics on")
		shards   = flag.String("shards", "", "comma-separated standalone Redis addresses (default: start 2 local instances)")
		channels = flag.Int("channels", 100, "channels to subscribe and publish to")
		rate     = flag.Int("rate", 1000, "messages published per second")
		duration = flag.Duration("duration", 0, "how long to run (0: until interrupted)")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *duration > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	if err := run(ctx, *listen, *shards, *channels, *rate); err != nil {
		log.Fatal("demo-metrics: ", err)
	}
}

func run(ctx context.Context, listen, shards string, nChannels, rate int) error {
	if nChannels < 1 || rate < 1 {
		return errors.New("-channels and -rate must be at least 1")
	}
	var addrs []string
	if shards != "" {
		addrs = strings.Split(shards, ",")
	} else {
		local, err := localredis.New("demo-metrics")
		if err != nil {
			return err
		}
		defer local.Stop()
		if addrs, err = local.Standalone(ctx, 2); err != nil {
			return err
		}
	}

	var events shardcastprom.Events
	b, err := sharded.New(sharded.Config{
		Addrs: addrs,
		Options: shardcast.Options{
			Handler: func(shardcast.Message) {},
			OnEvent: events.Chain(func(e shardcast.Event) { log.Println("event:", e) }),
		},
	})
	if err != nil {
		return err
	}
	defer b.Close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(
		shardcastprom.NewCollector(b, shardcastprom.Options{
			ConstLabels: prometheus.Labels{"engine": "sharded"},
			Events:      &events,
		}),
		collectors.NewGoCollector(),
	)
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	defer func() {
		shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutCtx)
		<-served
	}()
	log.Printf("serving http://%s/metrics (Redis: %s)", ln.Addr(), strings.Join(addrs, ", "))

	channels := make([]string, nChannels)
	for i := range channels {
		channels[i] = fmt.Sprintf("demo-%d", i)
	}
	if err := b.Subscribe(ctx, channels...); err != nil {
		return err
	}
	// Publish what is due by the clock every 10 ms, so that the rate holds
	// above 100/s and a tick the ticker drops is made up at the next.
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	for n := 0; ; {
		select {
		case <-ctx.Done():
			s := b.Stats()
			log.Printf("stopping: published %d, delivered %d, dropped %d", s.Published, s.Delivered, s.Dropped)
			return nil
		case <-tick.C:
		}
		due := int(time.Since(start).Seconds() * float64(rate))
		for ; n < due; n++ {
			if err := b.Publish(ctx, channels[n%len(channels)], []byte("tick")); err != nil && ctx.Err() == nil {
				log.Println("publish:", err)
			}
		}
	}
}

package shardcastotel_test

import (
	"context"
	"fmt"
	"log"

	"github.com/shardcast/shardcast"
	shardcastotel "github.com/shardcast/shardcast/contrib/otel"
	"github.com/shardcast/shardcast/redistest"
	"github.com/shardcast/shardcast/sharded"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// A broker's instruments on an SDK MeterProvider. The Events value is made
// before the broker, whose event hook is set at construction, and chained
// in front of the application's own hook. In production the reader is a
// PeriodicReader over an OTLP exporter, or the Prometheus exporter.
func Example() {
	addrs := redistest.OnDemandStandalone(2) // "10.0.0.1:6379", "10.0.0.2:6379" in production

	var events shardcastotel.Events
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

	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(context.Background())
	m, err := shardcastotel.Register(provider, b, shardcastotel.Options{
		Attributes: []attribute.KeyValue{attribute.String("shardcast.engine", "sharded")},
		Events:     &events,
	})
	if err != nil {
		panic(err)
	}
	defer m.Unregister()

	ctx := context.Background()
	if err := b.Subscribe(ctx, "example-news"); err != nil {
		panic(err)
	}
	if err := b.Publish(ctx, "example-news", []byte("hello")); err != nil {
		panic(err)
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		panic(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, metric := range sm.Metrics {
			switch metric.Name {
			case "shardcast.published.messages", "shardcast.channels":
				p := metric.Data.(metricdata.Sum[int64]).DataPoints[0]
				fmt.Printf("%s %d %s\n", metric.Name, p.Value, metric.Unit)
			}
		}
	}
	// Unordered output:
	// shardcast.published.messages 1 {message}
	// shardcast.channels 1 {channel}
}

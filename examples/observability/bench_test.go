package main

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	redeqotel "github.com/redeq-go/redeq/contrib/otel"
	redeqprom "github.com/redeq-go/redeq/contrib/prometheus"
	"github.com/redeq-go/redeq/redeq"
	"github.com/redeq-go/redeq/redeqtest/benchdrain"
)

// BenchmarkDrain drains b.N due jobs with a no-op handler, 16 workers, on
// the server at REDIS_ADDR: without instrumentation ("off"), and with both
// integrations as this example installs them (OpenTelemetry spans and
// metrics, the Prometheus collector): "both" exports each span as it ends
// to an in-memory exporter that keeps them all, "both-batch" hands them to
// a batch span processor, as a production tracer provider does, whose
// exporter drops them. The ratio of each to "off" is the cost of
// observing:
//
//	REDIS_ADDR=127.0.0.1:6379 go test -run '^$' -bench Drain -benchtime 20000x -count 10
func BenchmarkDrain(b *testing.B) {
	for _, mode := range []string{"off", "both", "both-batch"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			rdb, c := benchdrain.Client(b)
			if mode != "off" {
				spans := sdktrace.WithSyncer(tracetest.NewInMemoryExporter())
				if mode == "both-batch" {
					spans = sdktrace.WithBatcher(discard{})
				}
				tp := sdktrace.NewTracerProvider(spans)
				mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
				defer func() { _ = tp.Shutdown(ctx); _ = mp.Shutdown(ctx) }()
				in, err := redeqotel.New(redeqotel.Options{TracerProvider: tp, MeterProvider: mp})
				if err != nil {
					b.Fatal(err)
				}
				col := redeqprom.New(c, redeqprom.Options{})
				if err := prometheus.NewRegistry().Register(col); err != nil {
					b.Fatal(err)
				}
				if err := c.Use(in.Middleware()); err != nil {
					b.Fatal(err)
				}
				if err := c.Observe(redeq.Observers(in, col)); err != nil {
					b.Fatal(err)
				}
			}
			benchdrain.Run(b, rdb, c, nil)
		})
	}
}

// discard is a span exporter that drops what it gets.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/redeq-go/redeq/config"
	redeqotel "github.com/redeq-go/redeq/contrib/otel"
	redeqprom "github.com/redeq-go/redeq/contrib/prometheus"
	"github.com/redeq-go/redeq/redeq"
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
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		b.Skip("REDIS_ADDR not set: a drain on miniredis measures miniredis")
	}
	for _, mode := range []string{"off", "both", "both-batch"} {
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			rdb := redis.NewClient(&redis.Options{Addr: addr})
			defer func() { _ = rdb.Close() }()
			cfg := config.Default()
			cfg.Prefix = fmt.Sprintf("obsbench%d", time.Now().UnixNano())
			cfg.Workers = 16
			c, err := redeq.New(rdb, cfg)
			if err != nil {
				b.Fatal(err)
			}
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
			var done atomic.Int64
			if err := c.Register(redeq.ListenerFunc("drain", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
				ch.Ack()
				done.Add(1)
				return nil
			})); err != nil {
				b.Fatal(err)
			}
			jobs := make([]*redeq.Job, b.N)
			for i := range jobs {
				jobs[i] = &redeq.Job{Topic: "drain", ID: fmt.Sprint(i)}
			}
			if err := c.AddBatch(ctx, jobs); err != nil {
				b.Fatal(err)
			}
			redis0 := redisCPU(b, rdb)
			b.ResetTimer()
			cpu0 := cpuTime()
			if err := c.Start(ctx); err != nil {
				b.Fatal(err)
			}
			for done.Load() < int64(b.N) {
				time.Sleep(time.Millisecond)
			}
			b.StopTimer()
			// The CPU time per job varies much less than the time per job
			// on a shared machine.
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "client-cpu-ns/op")
			b.ReportMetric(float64(redisCPU(b, rdb)-redis0)/float64(b.N), "redis-cpu-ns/op")
			if err := c.Shutdown(ctx); err != nil {
				b.Fatal(err)
			}
		})
	}
}

// discard is a span exporter that drops what it gets.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// redisCPU is the CPU time the server has used (INFO cpu).
func redisCPU(b *testing.B, rdb *redis.Client) time.Duration {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total time.Duration
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			total += time.Duration(f * float64(time.Second))
		}
	}
	return total
}

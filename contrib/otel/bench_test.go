package redeqotel_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/redeq-go/redeq/config"
	redeqotel "github.com/redeq-go/redeq/contrib/otel"
	"github.com/redeq-go/redeq/redeq"
)

// BenchmarkDrain drains b.N due jobs with a no-op handler, 16 workers, on
// the server at REDIS_ADDR: without instrumentation ("off"); with a trace
// context in every job's headers and no instrumentation ("headers", what
// carrying it costs the core); and with the instrumentation, the jobs
// carrying a trace context as Add leaves it: "metrics" (spans to a no-op
// tracer), "spans" (metrics to a no-op meter), and both, "otel" exporting
// each span as it ends to an in-memory exporter that keeps them all (under
// two locks every worker shares), "otel-batch" handing them to a batch
// span processor, as a production tracer provider does, whose exporter
// drops them.
func BenchmarkDrain(b *testing.B) {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		b.Skip("REDIS_ADDR not set: a drain on miniredis measures miniredis")
	}
	for _, mode := range []string{"off", "headers", "metrics", "spans", "otel", "otel-batch"} {
		b.Run(mode, func(b *testing.B) {
			rdb := redis.NewClient(&redis.Options{Addr: addr})
			defer func() { _ = rdb.Close() }()
			cfg := config.Default()
			cfg.Prefix = fmt.Sprintf("otelbench%d", time.Now().UnixNano())
			cfg.Workers = 16
			c, err := redeq.New(rdb, cfg)
			if err != nil {
				b.Fatal(err)
			}
			if mode != "off" && mode != "headers" {
				spans := sdktrace.WithBatcher(discard{})
				if mode == "otel" {
					spans = sdktrace.WithSyncer(tracetest.NewInMemoryExporter())
				}
				tp := sdktrace.NewTracerProvider(spans)
				mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
				defer func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) }()
				opts := redeqotel.Options{TracerProvider: tp, MeterProvider: mp}
				switch mode {
				case "metrics":
					opts.TracerProvider = tracenoop.NewTracerProvider()
				case "spans":
					opts.MeterProvider = metricnoop.NewMeterProvider()
				}
				if _, err := redeqotel.Instrument(c, opts); err != nil {
					b.Fatal(err)
				}
			}
			drain(b, rdb, c, mode != "off")
		})
	}
}

// traceparent is a W3C trace context, as the producer span of Add leaves
// in a job's headers.
const traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

// discard is a span exporter that drops what it gets.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// drain runs c until it has handled b.N jobs, added first (each with a
// trace context in its headers when traced). Beside the time per job it
// reports the CPU time per job of this process (client-cpu-ns/op) and of
// the Redis server (redis-cpu-ns/op): on a shared machine the time per job
// varies several fold from run to run, the CPU time much less, and what an
// integration adds shows in the client's.
func drain(b *testing.B, rdb *redis.Client, c *redeq.Client, traced bool) {
	ctx := context.Background()
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
		if traced {
			jobs[i].Headers = map[string]string{"traceparent": traceparent}
		}
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
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "client-cpu-ns/op")
	b.ReportMetric(float64(redisCPU(b, rdb)-redis0)/float64(b.N), "redis-cpu-ns/op")
	if err := c.Shutdown(ctx); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkDelivery is what the integration adds to one delivery, without
// Redis: JobDelivered, the middleware's span around a no-op handler, and
// JobDone, with SDK providers (spans recorded, exported nowhere).
func BenchmarkDelivery(b *testing.B) {
	ctx := context.Background()
	tp := sdktrace.NewTracerProvider()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
	defer func() { _ = tp.Shutdown(ctx); _ = mp.Shutdown(ctx) }()
	in, err := redeqotel.New(redeqotel.Options{TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		b.Fatal(err)
	}
	job := &redeq.Job{Topic: "t", ID: "42", Body: []byte("{}")}
	_, span := in.StartProducer(ctx, job)
	span.End()
	h := in.Middleware()(func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error { return nil })
	b.ReportAllocs()
	for b.Loop() {
		in.JobAdded(job.Topic)
		in.JobDelivered(job, time.Millisecond)
		_ = h(ctx, job, nil)
		in.JobDone(job, redeq.OutcomeAck, time.Millisecond, nil)
	}
}

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

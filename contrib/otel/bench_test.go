package redeqotel_test

import (
	"context"
	"testing"
	"time"

	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	redeqotel "github.com/redeq-go/redeq/contrib/otel"
	"github.com/redeq-go/redeq/redeq"
	"github.com/redeq-go/redeq/redeqtest/benchdrain"
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
	for _, mode := range []string{"off", "headers", "metrics", "spans", "otel", "otel-batch"} {
		b.Run(mode, func(b *testing.B) {
			rdb, c := benchdrain.Client(b)
			if mode != "off" && mode != "headers" {
				// WithBatcher starts its processor at once: make only the one used.
				var spans sdktrace.TracerProviderOption
				if mode == "otel" {
					spans = sdktrace.WithSyncer(tracetest.NewInMemoryExporter())
				} else {
					spans = sdktrace.WithBatcher(discard{})
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
			var headers map[string]string
			if mode != "off" {
				headers = map[string]string{"traceparent": traceparent}
			}
			benchdrain.Run(b, rdb, c, headers)
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

package redeqotel_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/baggage"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	redeqotel "github.com/redeq-go/redeq/contrib/otel"
	"github.com/redeq-go/redeq/redeq"
)

// deliver runs one delivery of job through in as a client does:
// JobDelivered, the middleware around handler, JobDone.
func deliver(ctx context.Context, in *redeqotel.Instrumentation, job *redeq.Job, handler redeq.Handler) {
	in.JobDelivered(job, time.Millisecond)
	err := in.Middleware()(handler)(ctx, job, nil)
	in.JobDone(job, redeq.OutcomeAck, time.Millisecond, err)
}

// The handler's ctx carries the consumer span, the one that ends with the
// outcome, and nothing else the headers hold: with a propagator that also
// extracts baggage, the job's baggage stays out of the handler's ctx.
func TestHandlerContextCarriesTheConsumerSpanOnly(t *testing.T) {
	for name, prop := range map[string]propagation.TextMapPropagator{
		"trace context": propagation.TraceContext{},
		"with baggage":  propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
	} {
		t.Run(name, func(t *testing.T) {
			spans := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
			defer func() { _ = tp.Shutdown(context.Background()) }()
			in, err := redeqotel.New(redeqotel.Options{TracerProvider: tp, MeterProvider: metricnoop.NewMeterProvider(), Propagator: prop})
			require.NoError(t, err)
			job := &redeq.Job{Topic: "t", ID: "1"}
			_, producer := in.StartProducer(context.Background(), job)
			producer.End()
			job.Headers["baggage"] = "tenant=a" // as another producer might write it

			type key struct{}
			ctx := context.WithValue(context.Background(), key{}, "mine")
			var got trace.SpanContext
			deliver(ctx, in, job, func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
				got = trace.SpanContextFromContext(ctx)
				require.Equal(t, "mine", ctx.Value(key{}), "the client's ctx is the parent")
				require.Zero(t, baggage.FromContext(ctx).Len(), "no baggage from the headers")
				return nil
			})
			ended := spans.GetSpans()
			require.Len(t, ended, 2)
			consumer := ended[1]
			require.Equal(t, trace.SpanKindConsumer, consumer.SpanKind)
			require.Equal(t, consumer.SpanContext, got)
			require.Equal(t, producer.SpanContext().SpanID(), consumer.Parent.SpanID())
		})
	}
}

// What the instrumentation itself allocates per delivery, with no-op
// providers so that only its own work counts: the context holding the
// trace context extracted from the headers, and the one Start returns
// with the span, which the handler gets. Every delivered job pays for
// each allocation added here.
func TestDeliveryAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	in, err := redeqotel.New(redeqotel.Options{TracerProvider: tracenoop.NewTracerProvider(), MeterProvider: metricnoop.NewMeterProvider()})
	require.NoError(t, err)
	job := &redeq.Job{Topic: "t", ID: "42", Headers: map[string]string{"traceparent": traceparent}}
	ctx := context.Background()
	handler := func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error { return nil }
	h := in.Middleware()(handler)
	allocs := testing.AllocsPerRun(1000, func() {
		in.JobDelivered(job, time.Millisecond)
		_ = h(ctx, job, nil)
		in.JobDone(job, redeq.OutcomeAck, time.Millisecond, nil)
	})
	require.LessOrEqual(t, allocs, 2.0)
}

// Deliveries running at once each end their own span: the records the
// Observer and the middleware share are found by the job, whichever
// worker runs it.
func TestConcurrentDeliveriesKeepTheirRecords(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	in, err := redeqotel.New(redeqotel.Options{TracerProvider: tp, MeterProvider: metricnoop.NewMeterProvider()})
	require.NoError(t, err)
	const workers, each = 40, 50
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				job := &redeq.Job{Topic: "t", ID: fmt.Sprint(w, "-", i), Attempt: i % 3}
				in.JobDelivered(job, time.Duration(i)*time.Millisecond)
				_ = in.Middleware()(func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
					return nil
				})(context.Background(), job, nil)
				in.JobDone(job, redeq.OutcomeAck, time.Millisecond, nil)
			}
		})
	}
	wg.Wait()
	ended := spans.GetSpans()
	require.Equal(t, workers*each, len(ended), "spans ended")
	seen := map[string]bool{}
	for _, s := range ended {
		id := attr(s, redeqotel.AttrMessageID).AsString()
		require.False(t, seen[id], "one span per delivery: %s", id)
		seen[id] = true
		var w, i int
		_, err := fmt.Sscanf(id, "%d-%d", &w, &i)
		require.NoError(t, err)
		require.Equal(t, int64(i%3), attr(s, redeqotel.AttrAttempt).AsInt64(), id)
		require.Equal(t, int64(i), attr(s, redeqotel.AttrLatenessMS).AsInt64(), id)
		require.Equal(t, "ack", attr(s, redeqotel.AttrOutcome).AsString(), id)
	}
}

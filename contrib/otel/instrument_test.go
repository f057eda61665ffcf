package redeqotel_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	rt "runtime/trace"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	redeqotel "github.com/redeq-go/redeq/contrib/otel"
	"github.com/redeq-go/redeq/redeq"
)

// run is one delivery as the client's runner makes it: JobDelivered, the
// handler behind the middleware with its panic turned into an error,
// JobDone with the outcome.
func run(ctx context.Context, in *redeqotel.Instrumentation, job *redeq.Job, late time.Duration,
	o redeq.Outcome, h redeq.Handler) (err error) {
	in.JobDelivered(job, late)
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panicked: %v", p)
		}
		in.JobDone(job, o, time.Millisecond, err)
	}()
	return in.Middleware()(h)(ctx, job, nil)
}

type ctxKey struct{}

// expect is what one delivery must leave behind.
type expect struct {
	topic, id        string
	attempt, recov   int
	late             time.Duration
	outcome          redeq.Outcome
	failed           bool
	producer, caller trace.SpanContext // caller: the span the handler's ctx carried, if any
	seen             trace.SpanContext // the span the handler saw in its ctx
}

// Hundreds of workers deliver jobs of more topics than the caches hold,
// with a propagator that also carries baggage, runtime/trace on, half of
// them from a ctx that already carries a span, every outcome, handlers that
// fail and panic. Each delivery has exactly one consumer span, a child of
// its own producer span (linked to the caller's span when there is one),
// with its own attributes and outcome; the handler's ctx carries that span,
// the client's values and no baggage; the metrics count exactly.
func TestManyWorkersManyTopicsEveryOutcome(t *testing.T) {
	for _, traced := range []bool{false, true} {
		for name, prop := range map[string]propagation.TextMapPropagator{
			"trace context": propagation.TraceContext{},
			"with baggage":  propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
		} {
			t.Run(fmt.Sprint(name, ", runtime/trace ", traced), func(t *testing.T) {
				if traced {
					require.NoError(t, rt.Start(io.Discard))
					defer rt.Stop()
				}
				manyWorkers(t, prop)
			})
		}
	}
}

func manyWorkers(t *testing.T, prop propagation.TextMapPropagator) {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithCardinalityLimit(0))
	defer func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) }()
	in, err := redeqotel.New(redeqotel.Options{TracerProvider: tp, MeterProvider: mp, Propagator: prop})
	require.NoError(t, err)
	callers := sdktrace.NewTracerProvider() // spans of the callers, not exported
	defer func() { _ = callers.Shutdown(context.Background()) }()

	const workers, each, topics = 200, 12, 1100
	outcomes := []redeq.Outcome{redeq.OutcomeAck, redeq.OutcomeRejoin, redeq.OutcomeRetry,
		redeq.OutcomeDead, redeq.OutcomeUnAck, redeq.OutcomeInterrupted}
	member, err := baggage.NewMember("tenant", "a")
	require.NoError(t, err)
	bag, err := baggage.New(member)
	require.NoError(t, err)

	results := make([][]expect, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				n := w*each + i
				e := expect{topic: fmt.Sprint("topic", n%topics), id: fmt.Sprint(n), attempt: n % 3, recov: n % 2,
					late: time.Duration(n%7-1) * time.Millisecond, outcome: outcomes[n%6], failed: n%4 == 1 || n%4 == 2}
				job := &redeq.Job{Topic: e.topic, ID: e.id, Attempt: e.attempt, Recoveries: e.recov}
				in.JobAdded(job.Topic)
				_, producer := in.StartProducer(baggage.ContextWithBaggage(context.Background(), bag), job)
				producer.End()
				e.producer = producer.SpanContext()
				job.Headers["baggage"] = "tenant=a" // whatever the propagator

				ctx := context.WithValue(context.Background(), ctxKey{}, e.id)
				if n%2 == 0 {
					var caller trace.Span
					ctx, caller = callers.Tracer("caller").Start(ctx, "caller")
					e.caller = caller.SpanContext()
					caller.End()
				}
				err := run(ctx, in, job, e.late, e.outcome, func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
					e.seen = trace.SpanContextFromContext(ctx)
					if ctx.Value(ctxKey{}) != e.id {
						return errors.New("lost the client's value")
					}
					if baggage.FromContext(ctx).Len() != 0 {
						return errors.New("baggage from the headers")
					}
					switch n % 4 {
					case 1:
						return errors.New("failed")
					case 2:
						panic("boom")
					}
					return nil
				})
				assert.Equal(t, e.failed, err != nil, "delivery %d: %v", n, err)
				results[w] = append(results[w], e)
			}
		})
	}
	wg.Wait()

	got := map[string]tracetest.SpanStub{}
	for _, s := range spans.GetSpans() {
		if s.SpanKind != trace.SpanKindConsumer {
			continue
		}
		id := attr(s, redeqotel.AttrMessageID).AsString()
		_, dup := got[id]
		require.False(t, dup, "one consumer span per delivery: %s", id)
		got[id] = s
	}
	require.Len(t, got, workers*each)

	type key struct{ topic, outcome string }
	processed := map[key]int64{}
	lateness := map[string]uint64{}
	for _, es := range results {
		for _, e := range es {
			s := got[e.id]
			require.Equal(t, e.seen, s.SpanContext, "%s: the handler's ctx carries its consumer span", e.id)
			require.Equal(t, e.producer.SpanID(), s.Parent.SpanID(), "%s: child of its producer", e.id)
			require.Equal(t, e.producer.TraceID(), s.SpanContext.TraceID(), e.id)
			if e.caller.IsValid() {
				require.Len(t, s.Links, 1, e.id)
				require.Equal(t, e.caller.SpanID(), s.Links[0].SpanContext.SpanID(), "%s: linked to the caller", e.id)
			} else {
				require.Empty(t, s.Links, e.id)
			}
			require.Equal(t, "process "+e.topic, s.Name)
			require.Equal(t, "redeq", attr(s, redeqotel.AttrSystem).AsString())
			require.Equal(t, e.topic, attr(s, redeqotel.AttrDestination).AsString(), e.id)
			require.Equal(t, "process", attr(s, redeqotel.AttrOperationName).AsString())
			require.Equal(t, "process", attr(s, redeqotel.AttrOperationType).AsString())
			require.Equal(t, int64(e.attempt), attr(s, redeqotel.AttrAttempt).AsInt64(), e.id)
			if e.late >= 0 {
				require.Equal(t, e.late.Milliseconds(), attr(s, redeqotel.AttrLatenessMS).AsInt64(), e.id)
				first := "false"
				if e.attempt == 0 {
					first = "true"
				}
				lateness[e.topic+"/"+first]++
			} else {
				require.Equal(t, attribute.INVALID, attr(s, redeqotel.AttrLatenessMS).Type(), "%s: unknown lateness", e.id)
			}
			if e.recov > 0 {
				require.Equal(t, int64(e.recov), attr(s, redeqotel.AttrRecoveries).AsInt64(), e.id)
			} else {
				require.Equal(t, attribute.INVALID, attr(s, redeqotel.AttrRecoveries).Type(), e.id)
			}
			require.Equal(t, string(e.outcome), attr(s, redeqotel.AttrOutcome).AsString(), e.id)
			if e.failed {
				require.Equal(t, codes.Error, s.Status.Code, e.id)
			} else {
				require.Equal(t, codes.Unset, s.Status.Code, e.id)
			}
			processed[key{e.topic, string(e.outcome)}]++
		}
	}

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	added := map[string]int64{}
	gotProcessed := map[key]int64{}
	gotLateness := map[string]uint64{}
	var durations uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					topic, _ := p.Attributes.Value(redeqotel.AttrDestination)
					switch m.Name {
					case "redeq.jobs.added":
						added[topic.AsString()] += p.Value
					case "redeq.jobs.processed":
						o, _ := p.Attributes.Value(redeqotel.AttrOutcome)
						gotProcessed[key{topic.AsString(), o.AsString()}] += p.Value
					}
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					topic, _ := p.Attributes.Value(redeqotel.AttrDestination)
					switch m.Name {
					case "redeq.job.lateness":
						fa, _ := p.Attributes.Value(redeqotel.AttrFirstAttempt)
						gotLateness[topic.AsString()+"/"+fa.AsString()] += p.Count
						mn, _ := p.Min.Value()
						require.GreaterOrEqual(t, mn, 0.0, "no lateness sample is negative")
					case "redeq.job.duration":
						durations += p.Count
					}
				}
			}
		}
	}
	require.Len(t, added, topics)
	for topic, n := range added {
		require.Equal(t, int64(workers*each/topics)+boolInt(topicIndex(topic) < workers*each%topics), n, topic)
	}
	require.Equal(t, processed, gotProcessed)
	require.Equal(t, lateness, gotLateness)
	require.Equal(t, uint64(workers*each), durations)
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func topicIndex(topic string) int {
	var i int
	_, _ = fmt.Sscanf(topic, "topic%d", &i)
	return i
}

// The same job pointer delivered again and again (as a client that reuses
// its jobs might) gets a fresh span each time, with that delivery's
// attempt and lateness, never the record of an earlier one; deliveries of
// other jobs in between do not disturb it.
func TestSameJobPointerDeliveredAgain(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	in, err := redeqotel.New(redeqotel.Options{TracerProvider: tp, MeterProvider: metricnoop.NewMeterProvider()})
	require.NoError(t, err)
	job := &redeq.Job{Topic: "t", ID: "same"}
	_, producer := in.StartProducer(context.Background(), job)
	producer.End()
	other := &redeq.Job{Topic: "t", ID: "other"}
	const rounds = 50
	for i := range rounds {
		job.Attempt = i
		late := time.Duration(i) * time.Millisecond
		if i%5 == 4 {
			late = -1
		}
		// another delivery starts before and ends after this one
		in.JobDelivered(other, 0)
		_ = run(context.Background(), in, job, late, redeq.OutcomeRetry, func(ctx context.Context, j *redeq.Job, ch *redeq.Channel) error {
			return nil
		})
		in.JobDone(other, redeq.OutcomeAck, 0, nil)
	}
	mine := spansOf(spans, trace.SpanKindConsumer)
	require.Len(t, mine, rounds, "one span per delivery of the job; none for other, which ran no middleware")
	for i, s := range mine {
		require.Equal(t, int64(i), attr(s, redeqotel.AttrAttempt).AsInt64())
		if i%5 == 4 {
			require.Equal(t, attribute.INVALID, attr(s, redeqotel.AttrLatenessMS).Type(), "round %d", i)
		} else {
			require.Equal(t, int64(i), attr(s, redeqotel.AttrLatenessMS).AsInt64(), "round %d", i)
		}
		require.Equal(t, producer.SpanContext().SpanID(), s.Parent.SpanID())
	}
}

// Observer methods called in odd orders, or alone, and the middleware
// alone, do not panic, count what they hear, and end each span they start
// once.
func TestObserverAndMiddlewareAloneOrOutOfOrder(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) }()
	in, err := redeqotel.New(redeqotel.Options{TracerProvider: tp, MeterProvider: mp})
	require.NoError(t, err)
	ok := func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error { return nil }
	long := fmt.Sprintf("%0200d", 7) // config.MaxName bytes

	// JobDone with no JobDelivered; JobsReturned of a topic never seen.
	in.JobDone(&redeq.Job{Topic: "t"}, redeq.OutcomeAck, time.Millisecond, nil)
	in.JobDone(&redeq.Job{Topic: "t"}, redeq.Outcome("made-up"), time.Millisecond, errors.New("x"))
	in.JobsReturned(long, 3, true)
	in.JobsReturned("t", 0, false)
	// The Observer without the middleware: no span.
	j := &redeq.Job{Topic: "t", ID: "1"}
	in.JobDelivered(j, -time.Hour)
	in.JobDone(j, redeq.OutcomeDead, time.Millisecond, errors.New("x"))
	require.Empty(t, spans.GetSpans())

	// The middleware without the Observer: it ends its span, with the
	// error; a job with no headers or a malformed traceparent starts a
	// new trace.
	for _, h := range []map[string]string{nil, {}, {"traceparent": "00-zz-zz-01"}, {"traceparent": "00-00000000000000000000000000000000-0000000000000000-01"}} {
		job := &redeq.Job{Topic: long, ID: "2", Headers: h}
		require.NoError(t, in.Middleware()(ok)(context.Background(), job, nil))
		require.EqualError(t, in.Middleware()(func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			return errors.New("failed")
		})(context.Background(), job, nil), "failed")
	}
	ended := spans.GetSpans()
	require.Len(t, ended, 8)
	for i, s := range ended {
		require.False(t, s.Parent.IsValid(), "a root span")
		require.Equal(t, "process "+long, s.Name)
		if i%2 == 1 {
			require.Equal(t, codes.Error, s.Status.Code)
		}
	}

	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	sums := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if d, ok := m.Data.(metricdata.Sum[int64]); ok {
				for _, p := range d.DataPoints {
					o, _ := p.Attributes.Value(redeqotel.AttrOutcome)
					sums[m.Name+"/"+o.AsString()] += p.Value
				}
			}
			if d, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == "redeq.job.lateness" {
				require.Empty(t, d.DataPoints, "no sample of an unknown lateness")
			}
		}
	}
	require.Equal(t, map[string]int64{
		"redeq.jobs.processed/ack": 1, "redeq.jobs.processed/made-up": 1, "redeq.jobs.processed/dead": 1,
		"redeq.jobs.returned/": 3,
	}, sums)
}

// With sampling off or at a ratio, every delivery still counts, the
// handler's ctx still carries a (non-recording) span and the client's
// values, and no span is exported but those sampled.
func TestSampledOutDeliveriesStillCount(t *testing.T) {
	for name, sampler := range map[string]sdktrace.Sampler{
		"never": sdktrace.NeverSample(),
		"ratio": sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.3)),
	} {
		t.Run(name, func(t *testing.T) {
			spans := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans), sdktrace.WithSampler(sampler))
			reader := sdkmetric.NewManualReader()
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
			defer func() { _ = tp.Shutdown(context.Background()); _ = mp.Shutdown(context.Background()) }()
			in, err := redeqotel.New(redeqotel.Options{TracerProvider: tp, MeterProvider: mp})
			require.NoError(t, err)
			const n = 400
			var wg sync.WaitGroup
			var mu sync.Mutex
			sampled := 0
			for i := range n {
				wg.Go(func() {
					job := &redeq.Job{Topic: "t", ID: fmt.Sprint(i)}
					_, p := in.StartProducer(context.Background(), job)
					p.End()
					ctx := context.WithValue(context.Background(), ctxKey{}, i)
					_ = run(ctx, in, job, time.Millisecond, redeq.OutcomeAck, func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
						sc := trace.SpanContextFromContext(ctx)
						assert.True(t, sc.IsValid(), "a span in the handler's ctx")
						assert.Equal(t, p.SpanContext().TraceID(), sc.TraceID())
						assert.Equal(t, i, ctx.Value(ctxKey{}))
						if sc.IsSampled() {
							mu.Lock()
							sampled++
							mu.Unlock()
						}
						return nil
					})
				})
			}
			wg.Wait()
			require.Len(t, spansOf(spans, trace.SpanKindConsumer), sampled)
			var rm metricdata.ResourceMetrics
			require.NoError(t, reader.Collect(context.Background(), &rm))
			var processed int64
			var lateness uint64
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					switch d := m.Data.(type) {
					case metricdata.Sum[int64]:
						for _, p := range d.DataPoints {
							processed += p.Value
						}
					case metricdata.Histogram[float64]:
						if m.Name == "redeq.job.lateness" {
							for _, p := range d.DataPoints {
								lateness += p.Count
							}
						}
					}
				}
			}
			require.Equal(t, int64(n), processed)
			require.Equal(t, uint64(n), lateness)
		})
	}
}

// On the client: a job that rejoins once, one whose handler panics once,
// one that times out once. Each delivery has its consumer span under the
// producer span with its outcome and error status, and the lateness
// samples are labelled as docs/observability.md says.
func TestRejoinPanicAndTimeoutOnTheClient(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		f := setup(t, rdb)
		var mu sync.Mutex
		runs := map[string]int{}
		require.NoError(t, f.c.Register(redeq.ListenerFunc("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			mu.Lock()
			runs[job.ID]++
			first := runs[job.ID] == 1
			mu.Unlock()
			if first {
				switch job.ID {
				case "rejoin":
					ch.Rejoin(10 * time.Millisecond)
					return nil
				case "panic":
					panic("boom")
				case "timeout":
					<-ctx.Done()
					return nil
				}
			}
			ch.Ack()
			return nil
		}, redeq.WithRetry(1, 10*time.Millisecond), redeq.WithConsumeTimeout(200*time.Millisecond))))
		for _, id := range []string{"rejoin", "panic", "timeout"} {
			require.NoError(t, f.in.Add(ctx, f.c, &redeq.Job{Topic: "t", ID: id, Delay: 10 * time.Millisecond}))
		}
		require.NoError(t, f.c.Start(ctx))
		awaitSpans(f.spans, trace.SpanKindConsumer, 6)
		require.NoError(t, f.c.Shutdown(ctx))
		producers := map[string]trace.SpanID{}
		for _, s := range f.spans.GetSpans() {
			if s.SpanKind == trace.SpanKindProducer {
				producers[attr(s, redeqotel.AttrMessageID).AsString()] = s.SpanContext.SpanID()
			}
		}
		got := map[string][]string{}
		for _, s := range spansOf(f.spans, trace.SpanKindConsumer) {
			id := attr(s, redeqotel.AttrMessageID).AsString()
			require.Equal(t, producers[id], s.Parent.SpanID(), id)
			got[id] = append(got[id], fmt.Sprintf("%d:%s:%s", attr(s, redeqotel.AttrAttempt).AsInt64(),
				attr(s, redeqotel.AttrOutcome).AsString(), s.Status.Code))
		}
		require.Equal(t, map[string][]string{
			"rejoin":  {"0:rejoin:Unset", "0:ack:Unset"},
			"panic":   {"0:retry:Error", "1:ack:Unset"},
			"timeout": {"0:retry:Error", "1:ack:Unset"},
		}, got)

		var rm metricdata.ResourceMetrics
		require.NoError(t, f.reader.Collect(ctx, &rm))
		lateness := map[string]uint64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if d, ok := m.Data.(metricdata.Histogram[float64]); ok && m.Name == "redeq.job.lateness" {
					for _, p := range d.DataPoints {
						fa, _ := p.Attributes.Value(redeqotel.AttrFirstAttempt)
						lateness[fa.AsString()] += p.Count
					}
				}
			}
		}
		// first_attempt="false" are the retries; a rejoin spends no attempt,
		// so the delivery after it counts as "true" (docs/observability.md).
		require.Equal(t, map[string]uint64{"true": 4, "false": 2}, lateness)
	})
}

// The middleware without the Observer ends the span of a handler that
// panics, marked failed, and lets the panic on to the client, which turns
// it into the delivery's error.
func TestMiddlewareAloneMarksAPanicFailed(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	in, err := redeqotel.New(redeqotel.Options{TracerProvider: tp, MeterProvider: metricnoop.NewMeterProvider()})
	require.NoError(t, err)
	h := in.Middleware()(func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error { panic("boom") })
	require.PanicsWithValue(t, "boom", func() { _ = h(context.Background(), &redeq.Job{Topic: "t", ID: "1"}, nil) })
	ended := spans.GetSpans()
	require.Len(t, ended, 1)
	require.Equal(t, codes.Error, ended[0].Status.Code)
	require.Equal(t, "1", attr(ended[0], redeqotel.AttrMessageID).AsString())
}

// A job added again with the trace context of an earlier Add in its
// headers (read back, or a Job reused) carries the new producer span's
// context only: no tracestate of the old trace beside the new traceparent.
func TestInjectReplacesAnEarlierTraceContext(t *testing.T) {
	for name, prop := range map[string]propagation.TextMapPropagator{
		"trace context": propagation.TraceContext{},
		"with baggage":  propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
	} {
		t.Run(name, func(t *testing.T) {
			tp := sdktrace.NewTracerProvider()
			defer func() { _ = tp.Shutdown(context.Background()) }()
			in, err := redeqotel.New(redeqotel.Options{TracerProvider: tp, MeterProvider: metricnoop.NewMeterProvider(), Propagator: prop})
			require.NoError(t, err)
			job := &redeq.Job{Topic: "t", ID: "1", Headers: map[string]string{"tenant": "a",
				"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "vendor=old"}}
			ctx, span := in.StartProducer(context.Background(), job)
			span.End()
			require.Equal(t, "a", job.Headers["tenant"], "other headers stay")
			got := trace.SpanContextFromContext(in.Extract(context.Background(), job))
			require.Equal(t, span.SpanContext().TraceID(), got.TraceID())
			require.Equal(t, trace.SpanContextFromContext(ctx).TraceState().String(), got.TraceState().String(), "%v", job.Headers)
			_, hasState := job.Headers["tracestate"]
			require.False(t, hasState, "%v", job.Headers)
		})
	}
}

// Instrument on a client that has an Observer already fails and installs
// nothing: its middleware would start a second span for every delivery.
func TestFailedInstrumentInstallsNothing(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		f := setup(t, rdb)
		spans := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
		defer func() { _ = tp.Shutdown(ctx) }()
		_, err := redeqotel.Instrument(f.c, redeqotel.Options{TracerProvider: tp, MeterProvider: metricnoop.NewMeterProvider()})
		require.Error(t, err, "an Observer is set already")

		done := make(chan struct{})
		require.NoError(t, f.c.Register(redeq.ListenerFunc("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			ch.Ack()
			close(done)
			return nil
		})))
		require.NoError(t, f.in.Add(ctx, f.c, &redeq.Job{Topic: "t", ID: "1"}))
		require.NoError(t, f.c.Start(ctx))
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the job did not run")
		}
		require.NoError(t, f.c.Shutdown(ctx))
		require.Empty(t, spans.GetSpans(), "no span from the failed Instrument")
		require.Len(t, f.spans.GetSpans(), 2, "the producer and consumer spans of the first")
	})
}

// Add of a nil job returns the client's error for it, as Client.Add does,
// and starts no span.
func TestAddOfNilJobIsRefused(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		f := setup(t, rdb)
		require.ErrorIs(t, f.in.Add(context.Background(), f.c, nil), redeq.ErrInvalidJob)
		require.Empty(t, f.spans.GetSpans())
	})
}

// On the client, with runtime/trace on: the handler's ctx keeps the
// values of the ctx given to Start and carries its consumer span.
func TestHandlerContextOnTheClientUnderRuntimeTrace(t *testing.T) {
	require.NoError(t, rt.Start(io.Discard))
	defer rt.Stop()
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		f := setup(t, rdb)
		type seen struct {
			value any
			span  trace.SpanContext
		}
		got := make(chan seen, 1)
		require.NoError(t, f.c.Register(redeq.ListenerFunc("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			ch.Ack()
			got <- seen{ctx.Value(ctxKey{}), trace.SpanContextFromContext(ctx)}
			return nil
		})))
		require.NoError(t, f.in.Add(context.Background(), f.c, &redeq.Job{Topic: "t", ID: "1"}))
		require.NoError(t, f.c.Start(context.WithValue(context.Background(), ctxKey{}, "client")))
		var s seen
		select {
		case s = <-got:
		case <-time.After(10 * time.Second):
			t.Fatal("the job did not run")
		}
		require.NoError(t, f.c.Shutdown(context.Background()))
		require.Equal(t, "client", s.value)
		consumers := spansOf(f.spans, trace.SpanKindConsumer)
		require.NotEmpty(t, consumers)
		require.Equal(t, consumers[len(consumers)-1].SpanContext, s.span)
	})
}

package redeqotel_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/goleak"

	"github.com/redeq-go/redeq/config"
	redeqotel "github.com/redeq-go/redeq/contrib/otel"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// backends runs f on every deployment this run can reach
// (testutil.Backends: miniredis, plus the server at REDIS_ADDR and the
// cluster at REDIS_CLUSTER_ADDRS when they are set), as the core does.
func backends(t *testing.T, f func(t *testing.T, rdb redis.UniversalClient)) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) { f(t, be.New(t)) })
	}
}

// another returns a new client of the deployment rdb is a client of,
// closed when the test ends.
func another(t *testing.T, rdb redis.UniversalClient) redis.UniversalClient {
	var c redis.UniversalClient
	switch r := rdb.(type) {
	case *redis.ClusterClient:
		c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: r.Options().Addrs})
	case *redis.Client:
		c = redis.NewClient(&redis.Options{Addr: r.Options().Addr})
	default:
		t.Fatalf("unsupported client %T", rdb)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

type fixture struct {
	c      *redeq.Client
	in     *redeqotel.Instrumentation
	spans  *tracetest.InMemoryExporter
	reader *sdkmetric.ManualReader
}

func setup(t *testing.T, rdb redis.UniversalClient) *fixture {
	cfg := config.Default()
	cfg.Prefix = fmt.Sprintf("oteltest%d", time.Now().UnixNano())
	cfg.ScanInterval = 100 * time.Millisecond
	cfg.HeartbeatInterval = 100 * time.Millisecond
	cfg.ConsumerTimeout = 600 * time.Millisecond
	cfg.LockExpiry = 2 * time.Second
	c, err := redeq.New(rdb, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	in, err := redeqotel.Instrument(c, redeqotel.Options{TracerProvider: tp, MeterProvider: mp})
	require.NoError(t, err)
	return &fixture{c: c, in: in, spans: spans, reader: reader}
}

// spansOf returns the spans of kind exp holds, in the order they ended.
func spansOf(exp *tracetest.InMemoryExporter, kind trace.SpanKind) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.SpanKind == kind {
			out = append(out, s)
		}
	}
	return out
}

// awaitSpans waits up to 10 s for exp to hold n spans of kind; the
// assertions that follow tell what is missing.
func awaitSpans(exp *tracetest.InMemoryExporter, kind trace.SpanKind, n int) {
	deadline := time.Now().Add(10 * time.Second)
	for len(spansOf(exp, kind)) < n && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
}

func attr(s tracetest.SpanStub, k attribute.Key) attribute.Value {
	for _, a := range s.Attributes {
		if a.Key == k {
			return a.Value
		}
	}
	return attribute.Value{}
}

// Each delivery's consumer span is a child of the Add's producer span, a
// retry's too, and carries the attempt, lateness and outcome. The metrics
// count the scripted run exactly: 3 added, 1 retried, 1 dead.
func TestSpansAndMetricsOfAScriptedRun(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		f := setup(t, rdb)
		var mu sync.Mutex
		failed := map[string]bool{}
		outside := 0 // handlers run without a span in ctx
		require.NoError(t, f.c.Register(redeq.ListenerFunc("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			mu.Lock()
			defer mu.Unlock()
			if !trace.SpanContextFromContext(ctx).IsValid() {
				outside++
			}
			switch {
			case job.ID == "dead":
				return errors.New("always")
			case job.ID == "retry" && !failed[job.ID]:
				failed[job.ID] = true
				return errors.New("once")
			}
			ch.Ack()
			return nil
		}, redeq.WithRetry(1, 10*time.Millisecond))))

		// The caller's own span is the producer span's parent.
		tp := sdktrace.NewTracerProvider()
		defer func() { _ = tp.Shutdown(ctx) }()
		pctx, caller := tp.Tracer("test").Start(ctx, "caller")
		for _, id := range []string{"ok", "retry", "dead"} {
			require.NoError(t, f.in.Add(pctx, f.c, &redeq.Job{Topic: "t", ID: id, Delay: 10 * time.Millisecond}))
		}
		caller.End()
		require.NoError(t, f.c.Start(ctx))

		awaitSpans(f.spans, trace.SpanKindConsumer, 5)
		require.NoError(t, f.c.Shutdown(ctx))
		mu.Lock()
		require.Zero(t, outside, "the handler runs in the consumer span")
		mu.Unlock()

		producers := map[string]tracetest.SpanStub{}
		for _, s := range f.spans.GetSpans() {
			if s.SpanKind == trace.SpanKindProducer {
				require.Equal(t, "send t", s.Name)
				require.Equal(t, caller.SpanContext().TraceID(), s.SpanContext.TraceID())
				producers[attr(s, redeqotel.AttrMessageID).AsString()] = s
			}
		}
		require.Len(t, producers, 3)
		outcomes := map[string][]string{}
		for _, s := range spansOf(f.spans, trace.SpanKindConsumer) {
			id := attr(s, redeqotel.AttrMessageID).AsString()
			p := producers[id]
			require.Equal(t, p.SpanContext.SpanID(), s.Parent.SpanID(), "delivery of %s: child of its producer span", id)
			require.Equal(t, p.SpanContext.TraceID(), s.SpanContext.TraceID())
			require.Equal(t, "process t", s.Name)
			require.Equal(t, "redeq", attr(s, redeqotel.AttrSystem).AsString())
			require.Equal(t, "t", attr(s, redeqotel.AttrDestination).AsString())
			require.GreaterOrEqual(t, attr(s, redeqotel.AttrLatenessMS).AsInt64(), int64(0))
			require.Equal(t, attribute.INT64, attr(s, redeqotel.AttrLatenessMS).Type(), "lateness known")
			outcomes[id] = append(outcomes[id], fmt.Sprintf("%d:%s", attr(s, redeqotel.AttrAttempt).AsInt64(), attr(s, redeqotel.AttrOutcome).AsString()))
		}
		require.Equal(t, map[string][]string{
			"ok":    {"0:ack"},
			"retry": {"0:retry", "1:ack"},
			"dead":  {"0:retry", "1:dead"},
		}, outcomes)

		var rm metricdata.ResourceMetrics
		require.NoError(t, f.reader.Collect(ctx, &rm))
		sums := map[string]int64{}
		hist := map[string]uint64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				switch d := m.Data.(type) {
				case metricdata.Sum[int64]:
					for _, p := range d.DataPoints {
						key := m.Name
						if o, ok := p.Attributes.Value(redeqotel.AttrOutcome); ok {
							key += "/" + o.AsString()
						}
						sums[key] += p.Value
					}
				case metricdata.Histogram[float64]:
					for _, p := range d.DataPoints {
						key := m.Name
						if fa, ok := p.Attributes.Value(redeqotel.AttrFirstAttempt); ok {
							key += "/" + fa.AsString()
						}
						hist[key] += p.Count
						if m.Name == "redeq.job.lateness" {
							mn, _ := p.Min.Value()
							require.GreaterOrEqual(t, mn, 0.0, "no lateness sample is negative")
						}
					}
				}
			}
		}
		require.Equal(t, map[string]int64{
			"redeq.jobs.added":           3,
			"redeq.jobs.processed/ack":   2,
			"redeq.jobs.processed/retry": 2,
			"redeq.jobs.processed/dead":  1,
		}, sums)
		require.Equal(t, map[string]uint64{
			"redeq.job.lateness/true":  3,
			"redeq.job.lateness/false": 2,
			"redeq.job.duration":       5,
		}, hist)
	})
}

// Inject and Extract carry a trace through the headers with the W3C
// traceparent header.
func TestInjectWritesTraceparent(t *testing.T) {
	in, err := redeqotel.New(redeqotel.Options{TracerProvider: sdktrace.NewTracerProvider()})
	require.NoError(t, err)
	job := &redeq.Job{Topic: "t", ID: "1", Headers: map[string]string{"tenant": "a"}}
	ctx, span := in.StartProducer(context.Background(), job)
	span.End()
	require.Equal(t, "a", job.Headers["tenant"])
	require.Regexp(t, `^00-[0-9a-f]{32}-[0-9a-f]{16}-01$`, job.Headers["traceparent"])
	got := trace.SpanContextFromContext(in.Extract(context.Background(), job))
	require.Equal(t, trace.SpanContextFromContext(ctx).TraceID(), got.TraceID())
}

// A broadcast runs in a consumer span, a child of its producer span, with
// the outcome "broadcast" (an error when its handler panicked), and counts
// in redeq.jobs.processed under that outcome.
func TestBroadcastSpans(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		f := setup(t, rdb)
		var mu sync.Mutex
		inSpan := map[string]trace.SpanID{} // id: the span the handler's ctx carries
		require.NoError(t, f.c.RegisterBroadcast(redeq.BroadcastFunc(func(ctx context.Context, job *redeq.Job) {
			mu.Lock()
			inSpan[job.ID] = trace.SpanContextFromContext(ctx).SpanID()
			mu.Unlock()
			if job.ID == "bad" {
				panic("boom")
			}
		}, "bc")))
		require.NoError(t, f.c.Start(ctx))
		for _, id := range []string{"ok", "bad"} {
			require.NoError(t, f.in.Add(ctx, f.c, &redeq.Job{Topic: "bc", ID: id, Broadcast: true}))
		}
		awaitSpans(f.spans, trace.SpanKindConsumer, 2)
		require.NoError(t, f.c.Shutdown(ctx))

		producers := map[string]tracetest.SpanStub{}
		for _, s := range spansOf(f.spans, trace.SpanKindProducer) {
			producers[attr(s, redeqotel.AttrMessageID).AsString()] = s
		}
		consumers := spansOf(f.spans, trace.SpanKindConsumer)
		require.Len(t, consumers, 2)
		mu.Lock()
		defer mu.Unlock()
		for _, s := range consumers {
			id := attr(s, redeqotel.AttrMessageID).AsString()
			require.Equal(t, producers[id].SpanContext.SpanID(), s.Parent.SpanID(), "broadcast %s: child of its producer span", id)
			require.Equal(t, s.SpanContext.SpanID(), inSpan[id], "broadcast %s: the handler runs in its span", id)
			require.Equal(t, "broadcast", attr(s, redeqotel.AttrOutcome).AsString())
			require.Equal(t, attribute.INVALID, attr(s, redeqotel.AttrLatenessMS).Type(), "a broadcast's lateness is unknown")
			if id == "bad" {
				require.Equal(t, codes.Error, s.Status.Code, "the panic marks the span")
			} else {
				require.Equal(t, codes.Unset, s.Status.Code)
			}
		}

		var rm metricdata.ResourceMetrics
		require.NoError(t, f.reader.Collect(ctx, &rm))
		processed := map[string]int64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if d, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "redeq.jobs.processed" {
					for _, p := range d.DataPoints {
						o, _ := p.Attributes.Value(redeqotel.AttrOutcome)
						processed[o.AsString()] += p.Value
					}
				}
			}
		}
		require.Equal(t, map[string]int64{"broadcast": 2}, processed)
	})
}

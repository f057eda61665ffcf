package redeqotel

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/codes"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

type bcastListener struct {
	run func(ctx context.Context, job *redeq.Job)
}

func (bcastListener) Topics() []string                                  { return []string{"bc"} }
func (b bcastListener) OnBroadcast(ctx context.Context, job *redeq.Job) { b.run(ctx, job) }

// Two clients in one process share one Instrumentation. Each runs every
// broadcast (one that succeeds, one that panics, one whose headers carry a
// garbage traceparent, one still running when Shutdown cancels it) and a
// normal job with the id of a broadcast: each run ends its own consumer
// span, the panic marks only its own, the garbage traceparent gives a
// root span, and no delivery record stays behind once both clients are
// shut down.
func TestSharedInstrumentationKeepsNoBroadcastRecord(t *testing.T) {
	run := func(t *testing.T, newRDB func() redis.UniversalClient) {
		ctx := context.Background()
		spans := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
		defer func() { _ = tp.Shutdown(ctx) }()
		in, err := New(Options{TracerProvider: tp, MeterProvider: metricnoop.NewMeterProvider()})
		require.NoError(t, err)
		prefix := fmt.Sprintf("otelbc%d", time.Now().UnixNano())
		var mu sync.Mutex
		longRunning := 0
		allLong := make(chan struct{})
		normalDone := make(chan struct{}, 2)
		clients := make([]*redeq.Client, 2)
		for i := range clients {
			cfg := config.Default()
			cfg.Prefix = prefix
			cfg.ScanInterval = 50 * time.Millisecond
			c, err := redeq.New(newRDB(), cfg)
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
			require.NoError(t, c.Observe(redeq.Observers(in)))
			require.NoError(t, c.Use(in.Middleware()))
			require.NoError(t, c.RegisterBroadcast(bcastListener{run: func(ctx context.Context, job *redeq.Job) {
				switch job.ID {
				case "bad":
					panic("boom")
				case "long":
					mu.Lock()
					if longRunning++; longRunning == len(clients) {
						close(allLong)
					}
					mu.Unlock()
					<-ctx.Done()
				}
			}}))
			require.NoError(t, c.Register(redeq.ListenerFunc("bc", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
				ch.Ack()
				normalDone <- struct{}{}
				return nil
			})))
			require.NoError(t, c.Start(ctx))
			clients[i] = c
		}
		c := clients[0]
		for _, id := range []string{"ok", "bad"} {
			require.NoError(t, in.Add(ctx, c, &redeq.Job{Topic: "bc", ID: id, Broadcast: true}))
		}
		require.NoError(t, c.Add(ctx, &redeq.Job{Topic: "bc", ID: "garbage", Broadcast: true,
			Headers: map[string]string{"traceparent": "00-zz-not-a-trace-01"}}))
		consumers := func() []tracetest.SpanStub {
			var out []tracetest.SpanStub
			for _, s := range spans.GetSpans() {
				if s.SpanKind == trace.SpanKindConsumer {
					out = append(out, s)
				}
			}
			return out
		}
		require.Eventually(t, func() bool { return len(consumers()) == 6 }, 10*time.Second, 5*time.Millisecond)
		require.NoError(t, in.Add(ctx, c, &redeq.Job{Topic: "bc", ID: "ok"})) // a normal job, id of a broadcast
		require.NoError(t, in.Add(ctx, c, &redeq.Job{Topic: "bc", ID: "long", Broadcast: true}))
		<-normalDone
		<-allLong
		for _, c := range clients {
			sctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			require.ErrorIs(t, c.Shutdown(sctx), context.DeadlineExceeded)
			cancel()
		}
		for i := range in.live {
			in.live[i].mu.Lock()
			require.Empty(t, in.live[i].ds, "shard %d", i)
			in.live[i].mu.Unlock()
		}
		got := map[string]int{}
		for _, s := range consumers() {
			var id, outcome string
			late := false
			for _, a := range s.Attributes {
				switch a.Key {
				case AttrMessageID:
					id = a.Value.AsString()
				case AttrOutcome:
					outcome = a.Value.AsString()
				case AttrLatenessMS:
					late = true
				}
			}
			require.Equal(t, outcome != "broadcast", late, "span of %s/%s: a broadcast has no lateness", id, outcome)
			got[id+"/"+outcome]++
			if id == "bad" && outcome == "broadcast" {
				require.Equal(t, codes.Error, s.Status.Code)
			} else {
				require.Equal(t, codes.Unset, s.Status.Code, "span of %s/%s", id, outcome)
			}
			if id == "garbage" {
				require.False(t, s.Parent.IsValid(), "a garbage traceparent gives a root span")
			} else {
				require.True(t, s.Parent.IsValid(), "span of %s/%s: a child of its producer span", id, outcome)
			}
		}
		require.Equal(t, map[string]int{"ok/broadcast": 2, "bad/broadcast": 2, "garbage/broadcast": 2,
			"long/broadcast": 2, "ok/ack": 1}, got)
	}
	onBackends(t, run)
}

type topicsListener struct {
	topics []string
	run    func(job *redeq.Job)
}

func (l topicsListener) Topics() []string                              { return l.topics }
func (l topicsListener) OnBroadcast(_ context.Context, job *redeq.Job) { l.run(job) }

// Many broadcasts of many topics, on listeners of several topics each, on
// two clients sharing one Instrumentation, with normal jobs of the same
// topics and ids running meanwhile: every run is counted once under its
// topic and outcome, and no record is left.
func TestConcurrentBroadcastsOfManyTopics(t *testing.T) {
	const topics, listeners, jobs = 12, 4, 20
	run := func(t *testing.T, newRDB func() redis.UniversalClient) {
		ctx := context.Background()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewInMemoryExporter()))
		defer func() { _ = tp.Shutdown(ctx) }()
		reader := sdkmetric.NewManualReader()
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		defer func() { _ = mp.Shutdown(ctx) }()
		in, err := New(Options{TracerProvider: tp, MeterProvider: mp})
		require.NoError(t, err)
		prefix := fmt.Sprintf("otelmany%d", time.Now().UnixNano())
		var mu sync.Mutex
		ran := map[string]int{}
		clients := make([]*redeq.Client, 2)
		for i := range clients {
			cfg := config.Default()
			cfg.Prefix = prefix
			cfg.ScanInterval = 50 * time.Millisecond
			cfg.AutoAck = true
			c, err := redeq.New(newRDB(), cfg)
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
			require.NoError(t, c.Observe(in))
			require.NoError(t, c.Use(in.Middleware()))
			for l := range listeners {
				var ts []string
				for k := l; k < topics; k += listeners {
					ts = append(ts, fmt.Sprint("t", k))
				}
				require.NoError(t, c.RegisterBroadcast(topicsListener{topics: ts, run: func(job *redeq.Job) {
					mu.Lock()
					ran[job.Topic]++
					mu.Unlock()
					if job.ID == "j3" {
						panic("boom")
					}
				}}))
			}
			for k := range topics {
				require.NoError(t, c.Register(redeq.ListenerFunc(fmt.Sprint("t", k), func(context.Context, *redeq.Job, *redeq.Channel) error { return nil })))
			}
			require.NoError(t, c.Start(ctx))
			clients[i] = c
		}
		var wg sync.WaitGroup
		for k := range topics {
			wg.Go(func() {
				for j := range jobs {
					job := &redeq.Job{Topic: fmt.Sprint("t", k), ID: fmt.Sprint("j", j), Broadcast: true}
					if err := in.Add(ctx, clients[j%2], job); err != nil {
						t.Error(err)
					}
				}
			})
		}
		wg.Wait()
		processed := func() map[string]int64 {
			var rm metricdata.ResourceMetrics
			require.NoError(t, reader.Collect(ctx, &rm))
			out := map[string]int64{}
			for _, sm := range rm.ScopeMetrics {
				for _, m := range sm.Metrics {
					if d, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "redeq.jobs.processed" {
						for _, p := range d.DataPoints {
							o, _ := p.Attributes.Value(AttrOutcome)
							topic, _ := p.Attributes.Value(AttrDestination)
							out[topic.AsString()+"/"+o.AsString()] += p.Value
						}
					}
				}
			}
			return out
		}
		want := map[string]int64{}
		for k := range topics {
			want[fmt.Sprint("t", k, "/broadcast")] = 2 * jobs
		}
		require.Eventually(t, func() bool { return len(processed()) == topics && fmt.Sprint(processed()) == fmt.Sprint(want) },
			20*time.Second, 10*time.Millisecond)
		// Normal jobs with the ids of the broadcasts, now gone from their pools.
		for k := range topics {
			for j := range 3 {
				require.NoError(t, in.Add(ctx, clients[j%2], &redeq.Job{Topic: fmt.Sprint("t", k), ID: fmt.Sprint("j", j)}))
			}
		}
		for k := range topics {
			want[fmt.Sprint("t", k, "/ack")] = 3
		}
		require.Eventually(t, func() bool { return fmt.Sprint(processed()) == fmt.Sprint(want) }, 20*time.Second, 10*time.Millisecond)
		for _, c := range clients {
			require.NoError(t, c.Shutdown(ctx))
		}
		require.Equal(t, fmt.Sprint(want), fmt.Sprint(processed()))
		mu.Lock()
		for k := range topics {
			require.Equal(t, 2*jobs, ran[fmt.Sprint("t", k)])
		}
		mu.Unlock()
		for i := range in.live {
			in.live[i].mu.Lock()
			require.Empty(t, in.live[i].ds, "shard %d", i)
			in.live[i].mu.Unlock()
		}
	}
	onBackends(t, run)
}

// onBackends runs run on every deployment this run can reach
// (testutil.Backends); newClient gives a client closed when the test ends.
func onBackends(t *testing.T, run func(t *testing.T, newClient func() redis.UniversalClient)) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			run(t, func() redis.UniversalClient { return be.New(t) })
		})
	}
}

package redeqotel_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/redeq-go/redeq/config"
	redeqotel "github.com/redeq-go/redeq/contrib/otel"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

var errCut = errors.New("connection cut (simulated crash)")

// cutWhile fails every command and pipeline of its client with errCut
// while on is set, as a crashed process's connection does.
func cutWhile(on *atomic.Bool) testutil.Wrap {
	return func(_ context.Context, cmds []redis.Cmder, next func() error) error {
		if !on.Load() {
			return next()
		}
		for _, cmd := range cmds {
			cmd.SetErr(errCut)
		}
		return errCut
	}
}

// A consumer takes a job and crashes (its connection is cut, so it can
// neither heartbeat nor roll back); another client's reaper recovers the
// job and runs it. The second delivery's span is in the producer's trace,
// a child of the producer span, with attempt 0 (a recovery spends no
// attempt), redeq.recoveries 1 and no lateness (unknown for a recovered
// job); the crashed delivery's span is in the same trace, interrupted.
func TestSpanAfterCrashRecovery(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		spans := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
		t.Cleanup(func() { _ = tp.Shutdown(ctx) })
		cfg := config.Default()
		cfg.Prefix = fmt.Sprintf("otelcrash%d", time.Now().UnixNano())
		cfg.ScanInterval = 100 * time.Millisecond
		cfg.HeartbeatInterval = 100 * time.Millisecond
		cfg.ConsumerTimeout = 600 * time.Millisecond
		cfg.LockExpiry = 2 * time.Second
		cfg.ShutdownTimeout = 100 * time.Millisecond
		cfg.Logger = slog.New(slog.DiscardHandler) // the crashed client's failures are the point

		client := func(r redis.UniversalClient, h redeq.Handler) (*redeq.Client, *redeqotel.Instrumentation) {
			c, err := redeq.New(r, cfg)
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
			in, err := redeqotel.Instrument(c, redeqotel.Options{TracerProvider: tp})
			require.NoError(t, err)
			require.NoError(t, c.Register(redeq.ListenerFunc("t", h)))
			return c, in
		}

		// The first consumer has its own connection, which the crash cuts.
		var netCut atomic.Bool
		crashRDB := another(t, rdb)
		crashRDB.AddHook(cutWhile(&netCut))
		took := make(chan struct{})
		first, in := client(crashRDB, func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			close(took)
			<-ctx.Done()
			return ctx.Err()
		})
		require.NoError(t, in.Add(ctx, first, &redeq.Job{Topic: "t", ID: "j", Delay: 10 * time.Millisecond}))
		require.NoError(t, first.Start(ctx))
		select {
		case <-took:
		case <-time.After(10 * time.Second):
			t.Fatal("the first consumer did not take the job")
		}
		netCut.Store(true)
		_ = first.Shutdown(ctx) // cancels the handler; its rollback cannot reach Redis

		ran := make(chan *redeq.Job, 1)
		second, _ := client(rdb, func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			ch.Ack()
			ran <- job
			return nil
		})
		require.NoError(t, second.Start(ctx))
		select {
		case job := <-ran:
			require.Equal(t, 1, job.Recoveries)
		case <-time.After(10 * time.Second):
			t.Fatal("the job was not recovered")
		}
		require.NoError(t, second.Shutdown(ctx))

		var producer tracetest.SpanStub
		var deliveries []tracetest.SpanStub
		for _, s := range spans.GetSpans() {
			switch s.SpanKind {
			case trace.SpanKindProducer:
				producer = s
			case trace.SpanKindConsumer:
				deliveries = append(deliveries, s)
			}
		}
		require.True(t, producer.SpanContext.IsValid(), "a producer span")
		require.Len(t, deliveries, 2)
		crashed, recovered := deliveries[0], deliveries[1]
		for _, s := range deliveries {
			require.Equal(t, producer.SpanContext.TraceID(), s.SpanContext.TraceID(), "one trace")
			require.Equal(t, producer.SpanContext.SpanID(), s.Parent.SpanID(), "a child of the producer span")
			require.Equal(t, int64(0), attr(s, redeqotel.AttrAttempt).AsInt64(), "a crash spends no attempt")
		}
		require.Equal(t, "interrupted", attr(crashed, redeqotel.AttrOutcome).AsString())
		require.Equal(t, attribute.INVALID, attr(crashed, redeqotel.AttrRecoveries).Type(), "not recovered yet")
		require.Equal(t, "ack", attr(recovered, redeqotel.AttrOutcome).AsString())
		require.Equal(t, int64(1), attr(recovered, redeqotel.AttrRecoveries).AsInt64())
		require.Equal(t, attribute.INVALID, attr(recovered, redeqotel.AttrLatenessMS).Type(), "lateness unknown after recovery")
	})
}

package redeqprom_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redeq-go/redeq/config"
	redeqprom "github.com/redeq-go/redeq/contrib/prometheus"
	rqtest "github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// backends runs f on every deployment this run can reach
// (rqtest.Backends: miniredis, plus the server at REDIS_ADDR and the
// cluster at REDIS_CLUSTER_ADDRS when they are set), as the core does.
func backends(t *testing.T, f func(t *testing.T, rdb redis.UniversalClient)) {
	for _, be := range rqtest.Backends(t) {
		t.Run(be.Name, func(t *testing.T) { f(t, be.New(t)) })
	}
}

func newClient(t *testing.T, rdb redis.UniversalClient) *redeq.Client {
	cfg := config.Default()
	cfg.Prefix = fmt.Sprintf("promtest%d", time.Now().UnixNano())
	cfg.ScanInterval = 100 * time.Millisecond
	cfg.HeartbeatInterval = 100 * time.Millisecond
	cfg.ConsumerTimeout = 600 * time.Millisecond
	cfg.LockExpiry = 2 * time.Second
	c, err := redeq.New(rdb, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
	return c
}

// A scripted run: 5 jobs ack at once, 2 fail once then ack, 1 always
// fails (one retry, then dead). The counters match it exactly.
func TestCountersMatchAScriptedRun(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		c := newClient(t, rdb)
		reg := prometheus.NewPedanticRegistry()
		col, err := redeqprom.Register(c, reg, redeqprom.Options{CacheFor: time.Nanosecond})
		require.NoError(t, err)

		var mu sync.Mutex
		failed := map[string]bool{}
		require.NoError(t, c.Register(redeq.ListenerFunc("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			mu.Lock()
			defer mu.Unlock()
			switch {
			case strings.HasPrefix(job.ID, "dead"):
				return errors.New("always")
			case strings.HasPrefix(job.ID, "retry") && !failed[job.ID]:
				failed[job.ID] = true
				return errors.New("once")
			}
			ch.Ack()
			return nil
		}, redeq.WithRetry(1, 10*time.Millisecond))))
		for _, id := range []string{"ack0", "ack1", "ack2", "ack3", "ack4", "retry0", "retry1", "dead0"} {
			require.NoError(t, c.Add(ctx, &redeq.Job{Topic: "t", ID: id, Delay: 10 * time.Millisecond}))
		}
		require.NoError(t, c.Start(ctx))

		processed := func(o string) float64 {
			return testutil.ToFloat64(col.Processed().WithLabelValues("t", o))
		}
		deadline := time.Now().Add(10 * time.Second)
		for processed("ack")+processed("dead") < 8 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		require.NoError(t, c.Shutdown(ctx))

		require.Equal(t, 8.0, testutil.ToFloat64(col.Added().WithLabelValues("t")))
		require.Equal(t, 7.0, processed("ack"))
		require.Equal(t, 3.0, processed("retry"))
		require.Equal(t, 1.0, processed("dead"))
		require.Equal(t, 0.0, processed("unack"))

		// Every delivery came through the mover: 8 first attempts and 3
		// retries have a lateness sample.
		require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP redeq_jobs Jobs of a topic by state, read from Redis at scrape (cached).
# TYPE redeq_jobs gauge
redeq_jobs{state="dead",topic="t"} 1
redeq_jobs{state="in_flight",topic="t"} 0
redeq_jobs{state="ready",topic="t"} 0
redeq_jobs{state="scheduled",topic="t"} 0
redeq_jobs{state="un_ack",topic="t"} 0
`), "redeq_jobs"))
		count, sum := histogram(t, reg, "redeq_job_lateness_seconds", "first_attempt", "true")
		require.Equal(t, uint64(8), count)
		require.GreaterOrEqual(t, sum, 0.0)
		count, sum = histogram(t, reg, "redeq_job_lateness_seconds", "first_attempt", "false")
		require.Equal(t, uint64(3), count)
		require.GreaterOrEqual(t, sum, 0.0)
		count, _ = histogram(t, reg, "redeq_job_duration_seconds", "topic", "t")
		require.Equal(t, uint64(11), count)
		require.Zero(t, testutil.ToFloat64(col.StatsErrors()))
	})
}

// histogram returns the sample count and sum of the series of name with
// label = value.
func histogram(t *testing.T, reg prometheus.Gatherer, name, label, value string) (uint64, float64) {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == label && lp.GetValue() == value {
					return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	t.Fatalf("no series %s{%s=%q}", name, label, value)
	return 0, 0
}

// Job counts are read at most once per CacheFor, so scrapes in a burst
// cost Redis one read.
func TestJobCountsAreCached(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		c := newClient(t, rdb)
		col := redeqprom.New(c, redeqprom.Options{CacheFor: time.Hour})
		require.NoError(t, c.Add(ctx, &redeq.Job{Topic: "cached", ID: "1", Delay: time.Hour}))
		reg := prometheus.NewRegistry()
		require.NoError(t, reg.Register(col))
		want := `
# HELP redeq_jobs Jobs of a topic by state, read from Redis at scrape (cached).
# TYPE redeq_jobs gauge
redeq_jobs{state="dead",topic="cached"} 0
redeq_jobs{state="in_flight",topic="cached"} 0
redeq_jobs{state="ready",topic="cached"} 0
redeq_jobs{state="scheduled",topic="cached"} 1
redeq_jobs{state="un_ack",topic="cached"} 0
`
		require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "redeq_jobs"))
		require.NoError(t, c.Add(ctx, &redeq.Job{Topic: "cached", ID: "2", Delay: time.Hour}))
		require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "redeq_jobs"), "read again within CacheFor")
	})
}

// Broadcast runs count under outcome "broadcast", with a duration sample
// and no lateness sample (their due time is unknown); under asynq's names
// they are processed, and failed when the handler panicked.
func TestBroadcastRunsCount(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		c := newClient(t, rdb)
		reg := prometheus.NewPedanticRegistry()
		col, err := redeqprom.Register(c, reg, redeqprom.Options{AsynqNames: true})
		require.NoError(t, err)
		require.NoError(t, c.RegisterBroadcast(redeq.BroadcastFunc(func(ctx context.Context, job *redeq.Job) {
			if job.ID == "bad" {
				panic("boom")
			}
		}, "bc")))
		require.NoError(t, c.Start(ctx))
		for _, id := range []string{"ok1", "ok2", "bad"} {
			require.NoError(t, c.Add(ctx, &redeq.Job{Topic: "bc", ID: id, Broadcast: true}))
		}
		broadcasts := func() float64 { return testutil.ToFloat64(col.Processed().WithLabelValues("bc", "broadcast")) }
		deadline := time.Now().Add(10 * time.Second)
		for broadcasts() < 3 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		require.NoError(t, c.Shutdown(ctx))

		require.Equal(t, 3.0, broadcasts())
		count, _ := histogram(t, reg, "redeq_job_duration_seconds", "topic", "bc")
		require.Equal(t, uint64(3), count)
		require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP asynq_tasks_failed_total Handler runs that failed (retry, dead, or a broadcast that failed), by this client; asynq's name.
# TYPE asynq_tasks_failed_total counter
asynq_tasks_failed_total{queue="bc"} 1
# HELP asynq_tasks_processed_total Handler runs that ended (succeeded or failed), by this client; asynq's name for redeq_jobs_processed_total without interrupted runs.
# TYPE asynq_tasks_processed_total counter
asynq_tasks_processed_total{queue="bc"} 3
`), "asynq_tasks_failed_total", "asynq_tasks_processed_total", "redeq_job_lateness_seconds"))
	})
}

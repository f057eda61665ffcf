package redeqprom_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
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

// withPrefix adds c's prefix label to every series of an expected
// exposition text.
func withPrefix(c *redeq.Client, text string) io.Reader {
	return strings.NewReader(strings.ReplaceAll(text, "{", `{prefix="`+c.Config().Prefix+`",`))
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
		require.NoError(t, testutil.GatherAndCompare(reg, withPrefix(c, `
# HELP redeq_jobs Jobs of a topic by state, read from Redis at scrape (cached).
# TYPE redeq_jobs gauge
redeq_jobs{state="dead",topic="t"} 1
redeq_jobs{state="inflight",topic="t"} 0
redeq_jobs{state="ready",topic="t"} 0
redeq_jobs{state="scheduled",topic="t"} 0
redeq_jobs{state="unack",topic="t"} 0
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
redeq_jobs{state="inflight",topic="cached"} 0
redeq_jobs{state="ready",topic="cached"} 0
redeq_jobs{state="scheduled",topic="cached"} 1
redeq_jobs{state="unack",topic="cached"} 0
`
		require.NoError(t, testutil.GatherAndCompare(reg, withPrefix(c, want), "redeq_jobs"))
		require.NoError(t, c.Add(ctx, &redeq.Job{Topic: "cached", ID: "2", Delay: time.Hour}))
		require.NoError(t, testutil.GatherAndCompare(reg, withPrefix(c, want), "redeq_jobs"), "read again within CacheFor")
	})
}

// TestLimitsAreExported: a topic with global limits has its limits, the
// jobs running under them and those waiting for a slot as series; a topic
// without limits has none.
func TestLimitsAreExported(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		c := newClient(t, rdb)
		for i := range 3 {
			require.NoError(t, c.Add(ctx, &redeq.Job{Topic: "calls", ID: fmt.Sprint(i)}))
		}
		require.NoError(t, c.Add(ctx, &redeq.Job{Topic: "orders", ID: "1", Delay: time.Hour}))
		hold := make(chan struct{})
		require.NoError(t, c.Register(redeq.ListenerFunc("calls", func(ctx context.Context, _ *redeq.Job, ch *redeq.Channel) error {
			select {
			case <-hold:
			case <-ctx.Done():
			}
			ch.Ack()
			return nil
		}, redeq.WithMaxRunning(1), redeq.WithRateLimit(10, time.Minute))))
		require.NoError(t, c.Start(ctx))
		t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
		t.Cleanup(func() { close(hold) })
		rqtest.Eventually(t, 10*time.Second, "one call runs", func() bool {
			s, err := c.Stats(ctx, "calls")
			return err == nil && s.Running == 1 && s.Waiting == 2
		})
		reg := prometheus.NewRegistry()
		require.NoError(t, reg.Register(redeqprom.New(c, redeqprom.Options{})))
		want := `
# HELP redeq_limit A topic's global limits, for the topics that have them: max_running, or rate (jobs started per period_seconds), read at scrape (cached).
# TYPE redeq_limit gauge
redeq_limit{key="",limit="max_running",prefix="$P",topic="calls"} 1
redeq_limit{key="",limit="period_seconds",prefix="$P",topic="calls"} 60
redeq_limit{key="",limit="rate",prefix="$P",topic="calls"} 10
# HELP redeq_limited_jobs Jobs of a topic with global limits: running (holding a slot) or waiting (held back by a limit), read at scrape (cached).
# TYPE redeq_limited_jobs gauge
redeq_limited_jobs{prefix="$P",state="running",topic="calls"} 1
redeq_limited_jobs{prefix="$P",state="waiting",topic="calls"} 2
`
		// The labels in their sorted order, the prefix among them.
		want = strings.ReplaceAll(want, "$P", c.Config().Prefix)
		require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "redeq_limit", "redeq_limited_jobs"))
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
		require.NoError(t, testutil.GatherAndCompare(reg, withPrefix(c, `
# HELP asynq_tasks_failed_total Handler runs that failed (retry, dead, or a broadcast that failed), by this client; asynq's name.
# TYPE asynq_tasks_failed_total counter
asynq_tasks_failed_total{queue="bc"} 1
# HELP asynq_tasks_processed_total Handler runs that ended (succeeded or failed), by this client; asynq's name for redeq_jobs_processed_total without interrupted runs.
# TYPE asynq_tasks_processed_total counter
asynq_tasks_processed_total{queue="bc"} 3
`), "asynq_tasks_failed_total", "asynq_tasks_processed_total", "redeq_job_lateness_seconds"))
	})
}

// Every counter of every topic a scrape reads exists at zero before the
// topic's first event in this process, for each outcome and reason, so
// that increase() over the first event after a restart sees it rise (a
// series that appears at its first increment shows no increase).
func TestCountersStartAtZero(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		c := newClient(t, rdb)
		producer, err := redeq.New(rdb, c.Config())
		require.NoError(t, err)
		require.NoError(t, producer.Add(ctx, &redeq.Job{Topic: "quiet", ID: "1", Delay: time.Hour}))
		reg := prometheus.NewPedanticRegistry()
		col, err := redeqprom.Register(c, reg, redeqprom.Options{AsynqNames: true})
		require.NoError(t, err)
		for _, o := range []string{"ack", "rejoin", "retry", "dead", "unack", "interrupted", "broadcast"} {
			v, ok := gauge(t, reg, "redeq_jobs_processed_total", map[string]string{"topic": "quiet", "outcome": o})
			require.True(t, ok, "outcome %s exported", o)
			require.Zero(t, v)
		}
		for _, r := range []string{"recovered", "rollback"} {
			v, ok := gauge(t, reg, "redeq_jobs_returned_total", map[string]string{"topic": "quiet", "reason": r})
			require.True(t, ok, "reason %s exported", r)
			require.Zero(t, v)
		}
		for _, name := range []string{"redeq_jobs_added_total", redeqprom.AsynqTasksProcessed, redeqprom.AsynqTasksFailed} {
			_, ok := gauge(t, reg, name, map[string]string{"topic": "quiet"})
			if name != "redeq_jobs_added_total" {
				_, ok = gauge(t, reg, name, map[string]string{"queue": "quiet"})
			}
			require.True(t, ok, name)
		}
		col.JobsReturned("quiet", 4, true)
		v, _ := gauge(t, reg, "redeq_jobs_returned_total", map[string]string{"topic": "quiet", "reason": "recovered"})
		require.Equal(t, 4.0, v, "the first recovery is a rise from zero")
	})
}

// With more topics than MaxTopics a scrape reads the first MaxTopics by
// name, and says so: redeq_topics_dropped counts the rest, and one log
// line names the cap when that count changes.
func TestTopicsPastMaxTopicsAreCountedAndLogged(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		c := newClient(t, rdb)
		for _, topic := range []string{"a", "b", "c", "d"} {
			require.NoError(t, c.Add(ctx, &redeq.Job{Topic: topic, ID: "1", Delay: time.Hour}))
		}
		var logs strings.Builder
		var mu sync.Mutex
		logger := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			return logs.Write(p)
		}), nil))
		reg := prometheus.NewPedanticRegistry()
		_, err := redeqprom.Register(c, reg, redeqprom.Options{MaxTopics: 3, CacheFor: time.Nanosecond, Logger: logger})
		require.NoError(t, err)
		for range 2 { // one line for the change, not one per scrape
			dropped, ok := gauge(t, reg, "redeq_topics_dropped", nil)
			require.True(t, ok)
			require.Equal(t, 1.0, dropped)
		}
		for topic, want := range map[string]bool{"a": true, "b": true, "c": true, "d": false} {
			_, ok := gauge(t, reg, "redeq_jobs", map[string]string{"topic": topic, "state": "scheduled"})
			require.Equal(t, want, ok, "topic %s", topic)
		}
		mu.Lock()
		require.Equal(t, 1, strings.Count(logs.String(), "more topics than MaxTopics"), logs.String())
		require.Contains(t, logs.String(), "dropped=1")
		mu.Unlock()

		plenty := prometheus.NewPedanticRegistry()
		_, err = redeqprom.Register(newClient(t, rdb), plenty, redeqprom.Options{})
		require.NoError(t, err)
		dropped, ok := gauge(t, plenty, "redeq_topics_dropped", nil)
		require.True(t, ok)
		require.Zero(t, dropped, "the default cap is far above a handful of topics")
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

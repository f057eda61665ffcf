package redeqprom_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	redeqprom "github.com/redeq-go/redeq/contrib/prometheus"
	"github.com/redeq-go/redeq/redeq"
)

// gauge returns the value of the series of name with label = value, and
// whether there is one.
func gauge(t *testing.T, reg prometheus.Gatherer, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue metrics
				}
			}
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue(), true
			}
			return m.GetCounter().GetValue(), true
		}
	}
	return 0, false
}

// A job due two minutes ago that nobody consumed shows an oldest overdue
// of at least two minutes; a topic whose jobs were consumed shows 0.
func TestOldestOverdueGauge(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		c := newClient(t, rdb)
		reg := prometheus.NewPedanticRegistry()
		_, err := redeqprom.Register(c, reg, redeqprom.Options{CacheFor: time.Nanosecond})
		require.NoError(t, err)
		require.NoError(t, c.Add(ctx, &redeq.Job{Topic: "stuck", ID: "1", RunAt: time.Now().Add(-2 * time.Minute)}))
		require.NoError(t, c.Add(ctx, &redeq.Job{Topic: "served", ID: "1", RunAt: time.Now().Add(-2 * time.Minute)}))
		done := make(chan struct{})
		require.NoError(t, c.Register(redeq.ListenerFunc("served", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			ch.Ack()
			close(done)
			return nil
		})))
		require.NoError(t, c.Start(ctx))
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the served topic's job did not run")
		}

		deadline := time.Now().Add(10 * time.Second)
		for {
			stuck, ok1 := gauge(t, reg, "redeq_oldest_overdue_seconds", map[string]string{"topic": "stuck"})
			served, ok2 := gauge(t, reg, "redeq_oldest_overdue_seconds", map[string]string{"topic": "served"})
			require.True(t, ok1 && ok2, "a series per topic")
			if served == 0 || time.Now().After(deadline) {
				require.Zero(t, served, "consumed")
				require.GreaterOrEqual(t, stuck, 119.0, "not consumed: at least its age")
				require.Less(t, stuck, 600.0)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

// With AsynqNames the collector also exports asynq's names, labelled by
// queue; without, none of them.
func TestAsynqNames(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		c := newClient(t, rdb)
		reg := prometheus.NewPedanticRegistry()
		col, err := redeqprom.Register(c, reg, redeqprom.Options{CacheFor: time.Nanosecond, AsynqNames: true})
		require.NoError(t, err)
		require.NoError(t, c.Add(ctx, &redeq.Job{Topic: "q", ID: "later", Delay: time.Hour}))
		require.NoError(t, c.Add(ctx, &redeq.Job{Topic: "q", ID: "late", RunAt: time.Now().Add(-time.Minute)}))
		for _, id := range []string{"ok", "fail"} {
			require.NoError(t, c.Add(ctx, &redeq.Job{Topic: "w", ID: id}))
		}
		require.NoError(t, c.Register(redeq.ListenerFunc("w", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			if job.ID == "fail" {
				return context.DeadlineExceeded
			}
			ch.Ack()
			return nil
		}, redeq.WithRetry(-1))))
		require.NoError(t, c.Start(ctx))
		deadline := time.Now().Add(10 * time.Second)
		for testutil.ToFloat64(col.Processed().WithLabelValues("w", "ack"))+testutil.ToFloat64(col.Processed().WithLabelValues("w", "dead")) < 2 &&
			time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		for { // the mover put q's due job in the ready list
			st, err := c.Stats(ctx, "q")
			require.NoError(t, err)
			if st.Ready == 1 || time.Now().After(deadline) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		require.NoError(t, c.Shutdown(ctx))

		require.NoError(t, testutil.GatherAndCompare(reg, withPrefix(c, `
# HELP asynq_tasks_enqueued_total Jobs of a topic by asynq state: active = inflight, pending = ready, scheduled = scheduled (retries included), archived = dead. A gauge, as in asynq.
# TYPE asynq_tasks_enqueued_total gauge
asynq_tasks_enqueued_total{queue="q",state="active"} 0
asynq_tasks_enqueued_total{queue="q",state="archived"} 0
asynq_tasks_enqueued_total{queue="q",state="pending"} 1
asynq_tasks_enqueued_total{queue="q",state="scheduled"} 1
asynq_tasks_enqueued_total{queue="w",state="active"} 0
asynq_tasks_enqueued_total{queue="w",state="archived"} 1
asynq_tasks_enqueued_total{queue="w",state="pending"} 0
asynq_tasks_enqueued_total{queue="w",state="scheduled"} 0
# HELP asynq_queue_size Every job the topic holds (redeq Stats.Pool).
# TYPE asynq_queue_size gauge
asynq_queue_size{queue="q"} 2
asynq_queue_size{queue="w"} 1
# HELP asynq_queue_paused_total 1 while the topic is paused, else 0.
# TYPE asynq_queue_paused_total gauge
asynq_queue_paused_total{queue="q"} 0
asynq_queue_paused_total{queue="w"} 0
# HELP asynq_tasks_processed_total Handler runs that ended (succeeded or failed), by this client; asynq's name for redeq_jobs_processed_total without interrupted runs.
# TYPE asynq_tasks_processed_total counter
asynq_tasks_processed_total{queue="q"} 0
asynq_tasks_processed_total{queue="w"} 2
# HELP asynq_tasks_failed_total Handler runs that failed (retry, dead, or a broadcast that failed), by this client; asynq's name.
# TYPE asynq_tasks_failed_total counter
asynq_tasks_failed_total{queue="q"} 0
asynq_tasks_failed_total{queue="w"} 1
`), redeqprom.AsynqTasksEnqueued, redeqprom.AsynqQueueSize, redeqprom.AsynqQueuePaused,
			redeqprom.AsynqTasksProcessed, redeqprom.AsynqTasksFailed))
		latency, ok := gauge(t, reg, redeqprom.AsynqQueueLatency, map[string]string{"queue": "q"})
		require.True(t, ok)
		require.GreaterOrEqual(t, latency, 59.0, "the job due a minute ago")
		w, ok := gauge(t, reg, redeqprom.AsynqQueueLatency, map[string]string{"queue": "w"})
		require.True(t, ok)
		require.Zero(t, w)

		plain := prometheus.NewPedanticRegistry()
		require.NoError(t, plain.Register(redeqprom.New(c, redeqprom.Options{})))
		mfs, err := plain.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			require.False(t, strings.HasPrefix(mf.GetName(), "asynq_"), "%s without AsynqNames", mf.GetName())
		}
	})
}

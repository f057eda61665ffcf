package redeqprom_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	redeqprom "github.com/redeq-go/redeq/contrib/prometheus"
	rqtest "github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// A standalone exporter (ModeExporter) counts the deliveries that other
// clients of its prefix processed and failed, as they recorded them in
// Redis, from zero at its first scrape; it exports the gauges and none of
// the counters a client observes, and it is nobody's Observer.
func TestExporterCountsWhatTheFleetProcessed(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		exp := newClient(t, rdb)
		worker, err := redeq.New(rdb, exp.Config())
		require.NoError(t, err)
		t.Cleanup(func() { _ = worker.Shutdown(context.Background()) })
		reg := prometheus.NewPedanticRegistry()
		_, err = redeqprom.Register(exp, reg, redeqprom.Options{Mode: redeqprom.ModeExporter, AsynqNames: true, CacheFor: time.Nanosecond})
		require.NoError(t, err)
		require.NoError(t, exp.Observe(redeqprom.New(exp, redeqprom.Options{})), "the exporter is not the client's Observer")

		require.NoError(t, worker.Add(ctx, &redeq.Job{Topic: "w", ID: "early"}))
		require.NoError(t, worker.Register(redeq.ListenerFunc("w", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			if job.ID == "bad" {
				return errors.New("bad job")
			}
			ch.Ack()
			return nil
		}, redeq.WithRetry(-1))))
		require.NoError(t, worker.Start(ctx))
		rqtest.Eventually(t, 10*time.Second, "the early job is processed", func() bool {
			st, err := worker.Stats(ctx, "w")
			require.NoError(t, err)
			return st.Pool == 0
		})

		// The first scrape: what was processed before it is the baseline.
		processed, ok := gauge(t, reg, "redeq_topic_processed_total", map[string]string{"topic": "w"})
		require.True(t, ok, "a series for the topic from the first scrape")
		require.Zero(t, processed)
		failed, ok := gauge(t, reg, "redeq_topic_failed_total", map[string]string{"topic": "w"})
		require.True(t, ok)
		require.Zero(t, failed)

		for _, id := range []string{"ok1", "ok2", "bad"} {
			require.NoError(t, worker.Add(ctx, &redeq.Job{Topic: "w", ID: id}))
		}
		rqtest.Eventually(t, 10*time.Second, "three deliveries counted", func() bool {
			n, _ := gauge(t, reg, "redeq_topic_processed_total", map[string]string{"topic": "w"})
			return n >= 3
		})
		for range 3 { // rereading the same minutes counts nothing twice
			n, _ := gauge(t, reg, "redeq_topic_processed_total", map[string]string{"topic": "w"})
			require.Equal(t, 3.0, n)
		}
		failed, _ = gauge(t, reg, "redeq_topic_failed_total", map[string]string{"topic": "w"})
		require.Equal(t, 1.0, failed)
		asynqProcessed, ok := gauge(t, reg, redeqprom.AsynqTasksProcessed, map[string]string{"queue": "w"})
		require.True(t, ok)
		require.Equal(t, 3.0, asynqProcessed, "asynq's name reads the same count")
		dead, ok := gauge(t, reg, "redeq_jobs", map[string]string{"topic": "w", "state": "dead", "prefix": exp.Config().Prefix})
		require.True(t, ok, "the gauges, with the prefix label")
		require.Equal(t, 1.0, dead)

		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			require.NotContains(t, []string{"redeq_jobs_processed_total", "redeq_jobs_added_total", "redeq_job_lateness_seconds"},
				mf.GetName(), "an exporter observes nothing")
		}
	})
}

// A collector in ModeObserved, one per instance of a fleet beside one
// exporter, exports what its client observes and none of the gauges,
// which every instance would export alike.
func TestObservedModeExportsNoGauges(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		c := newClient(t, rdb)
		reg := prometheus.NewPedanticRegistry()
		_, err := redeqprom.Register(c, reg, redeqprom.Options{Mode: redeqprom.ModeObserved})
		require.NoError(t, err)
		require.NoError(t, c.Add(ctx, &redeq.Job{Topic: "t", ID: "1", Delay: time.Hour}))
		added, ok := gauge(t, reg, "redeq_jobs_added_total", map[string]string{"topic": "t"})
		require.True(t, ok)
		require.Equal(t, 1.0, added)
		mfs, err := reg.Gather()
		require.NoError(t, err)
		for _, mf := range mfs {
			require.NotContains(t, []string{"redeq_jobs", "redeq_consumers", "redeq_oldest_overdue_seconds", "redeq_topics_dropped"},
				mf.GetName(), "no gauge")
		}
	})
}

package redeqprom_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
	redeqprom "github.com/redeq-go/redeq/contrib/prometheus"
	"github.com/redeq-go/redeq/redeq"
)

// series returns every series of the Observer's metrics that reg exports
// with something recorded, "name{label=value,...}" → value (a histogram's:
// its sample count), without the prefix label, and fails on a negative
// lateness sum. Series at zero, which every topic's counters have from its
// first sight, are left out (TestCountersStartAtZero checks them).
func series(t *testing.T, reg prometheus.Gatherer) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "redeq_jobs_added_total", "redeq_jobs_processed_total", "redeq_jobs_returned_total",
			"redeq_job_lateness_seconds", "redeq_job_duration_seconds",
			redeqprom.AsynqTasksProcessed, redeqprom.AsynqTasksFailed:
		default:
			continue
		}
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, lp := range m.GetLabel() {
				if lp.GetName() != "prefix" {
					ls = append(ls, lp.GetName()+"="+lp.GetValue())
				}
			}
			sort.Strings(ls)
			k := mf.GetName() + "{" + strings.Join(ls, ",") + "}"
			if h := m.GetHistogram(); h != nil {
				out[k] = float64(h.GetSampleCount())
				require.GreaterOrEqual(t, h.GetSampleSum(), 0.0, k)
			} else if v := m.GetCounter().GetValue(); v != 0 {
				out[k] = v
			}
		}
	}
	return out
}

// Hundreds of workers report deliveries of more topics than the cache of
// series holds, with every outcome, unknown lateness among them, while
// scrapes run: every series counts exactly what was reported into it, and
// no other series appears.
func TestConcurrentReportsOfManyTopicsCountExactly(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	c := newClient(t, rdb)
	reg := prometheus.NewPedanticRegistry()
	col := redeqprom.New(c, redeqprom.Options{AsynqNames: true, Topics: []string{"topic0"}, CacheFor: time.Nanosecond})
	require.NoError(t, reg.Register(col))

	const workers, each, topics = 200, 12, 1100
	outcomes := []redeq.Outcome{redeq.OutcomeAck, redeq.OutcomeRejoin, redeq.OutcomeRetry,
		redeq.OutcomeDead, redeq.OutcomeUnAck, redeq.OutcomeInterrupted}
	long := strings.Repeat("x", 190) // with "topic" and the number: near config.MaxName
	want := map[string]float64{}
	var mu sync.Mutex
	count := func(k string, v float64) {
		mu.Lock()
		want[k] += v
		mu.Unlock()
	}
	stop := make(chan struct{})
	scraped := make(chan error)
	go func() { // scrapes while the workers report
		for {
			select {
			case <-stop:
				close(scraped)
				return
			default:
			}
			if _, err := reg.Gather(); err != nil {
				scraped <- err
				<-stop
				close(scraped)
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				n := w*each + i
				topic := fmt.Sprint("topic", n%topics)
				if n%topics == 7 {
					topic += long
				}
				job := &redeq.Job{Topic: topic, ID: fmt.Sprint(n), Attempt: n % 3}
				col.JobAdded(topic)
				count("redeq_jobs_added_total{topic="+topic+"}", 1)
				late := time.Duration(n%7-1) * time.Millisecond
				col.JobDelivered(job, late)
				if late >= 0 {
					count(fmt.Sprintf("redeq_job_lateness_seconds{first_attempt=%t,topic=%s}", n%3 == 0, topic), 1)
				}
				o := outcomes[n%6]
				var err error
				if o == redeq.OutcomeRetry || o == redeq.OutcomeDead {
					err = errors.New("failed")
				}
				col.JobDone(job, o, time.Duration(n)*time.Microsecond, err)
				count("redeq_jobs_processed_total{outcome="+string(o)+",topic="+topic+"}", 1)
				count("redeq_job_duration_seconds{topic="+topic+"}", 1)
				if o != redeq.OutcomeInterrupted {
					count(redeqprom.AsynqTasksProcessed+"{queue="+topic+"}", 1)
				}
				if err != nil {
					count(redeqprom.AsynqTasksFailed+"{queue="+topic+"}", 1)
				}
				if n%5 == 0 {
					col.JobsReturned(topic, n%4+1, n%2 == 0)
					reason := map[bool]string{true: "recovered", false: "rollback"}[n%2 == 0]
					count("redeq_jobs_returned_total{reason="+reason+",topic="+topic+"}", float64(n%4+1))
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	for err := range scraped {
		require.NoError(t, err)
	}
	require.Equal(t, want, series(t, reg))
}

// A Shutdown that cancels a running handler counts one interrupted
// delivery and one job rolled back, and asynq's names count neither; a
// second client then runs the job, whose lateness is known again.
func TestShutdownRollbackCountsOnce(t *testing.T) {
	backends(t, func(t *testing.T, rdb redis.UniversalClient) {
		ctx := context.Background()
		cfg := config.Default()
		cfg.Prefix = fmt.Sprintf("promrollback%d", time.Now().UnixNano())
		cfg.ScanInterval = 100 * time.Millisecond
		cfg.HeartbeatInterval = 100 * time.Millisecond
		cfg.ShutdownTimeout = 100 * time.Millisecond
		cfg.Logger = slog.New(slog.DiscardHandler)
		reg := prometheus.NewPedanticRegistry()
		var col *redeqprom.Collector
		client := func(h redeq.Handler) *redeq.Client {
			c, err := redeq.New(rdb, cfg)
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
			if col == nil {
				col = redeqprom.New(c, redeqprom.Options{AsynqNames: true, Topics: []string{}})
				require.NoError(t, reg.Register(col))
			}
			require.NoError(t, c.Observe(col))
			require.NoError(t, c.Register(redeq.ListenerFunc("t", h)))
			return c
		}
		took := make(chan struct{})
		first := client(func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			close(took)
			<-ctx.Done()
			return ctx.Err()
		})
		require.NoError(t, first.Add(ctx, &redeq.Job{Topic: "t", ID: "j", Delay: 10 * time.Millisecond}))
		require.NoError(t, first.Start(ctx))
		select {
		case <-took:
		case <-time.After(10 * time.Second):
			t.Fatal("the job did not run")
		}
		require.Error(t, first.Shutdown(ctx), "the handler was canceled")

		ran := make(chan struct{})
		second := client(func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			ch.Ack()
			close(ran)
			return nil
		})
		require.NoError(t, second.Start(ctx))
		select {
		case <-ran:
		case <-time.After(10 * time.Second):
			t.Fatal("the rolled back job did not run again")
		}
		require.NoError(t, second.Shutdown(ctx))
		require.Equal(t, map[string]float64{
			"redeq_jobs_added_total{topic=t}":                         1,
			"redeq_jobs_processed_total{outcome=interrupted,topic=t}": 1,
			"redeq_jobs_processed_total{outcome=ack,topic=t}":         1,
			"redeq_jobs_returned_total{reason=rollback,topic=t}":      1,
			"redeq_job_lateness_seconds{first_attempt=true,topic=t}":  2,
			"redeq_job_duration_seconds{topic=t}":                     2,
			redeqprom.AsynqTasksProcessed + "{queue=t}":               1,
		}, series(t, reg))
	})
}

// A Register that fails sets nothing on either side: not the client's
// Observer when the registry refuses the collector (a second client's of
// the same prefix in the same registry), not the registry's collector when
// the client refuses the Observer (one is set already). Clients of two
// prefixes register in one registry: their series differ by the prefix
// label.
func TestFailedRegisterSetsNothing(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	reg := prometheus.NewPedanticRegistry()
	first := newClient(t, rdb)
	_, err := redeqprom.Register(first, reg, redeqprom.Options{})
	require.NoError(t, err)
	_, err = redeqprom.Register(newClient(t, rdb), reg, redeqprom.Options{})
	require.NoError(t, err, "another prefix")

	second, err := redeq.New(rdb, first.Config())
	require.NoError(t, err)
	t.Cleanup(func() { _ = second.Shutdown(context.Background()) })
	_, err = redeqprom.Register(second, reg, redeqprom.Options{})
	require.Error(t, err, "the same names and prefix in one registry")
	require.NoError(t, second.Observe(redeqprom.New(second, redeqprom.Options{})), "the client has no Observer yet")

	third := newClient(t, rdb)
	require.NoError(t, third.Observe(redeqprom.New(third, redeqprom.Options{})))
	other := prometheus.NewPedanticRegistry()
	_, err = redeqprom.Register(third, other, redeqprom.Options{})
	require.Error(t, err, "an Observer is set already")
	mfs, err := other.Gather()
	require.NoError(t, err)
	require.Empty(t, mfs, "nothing registered")
}

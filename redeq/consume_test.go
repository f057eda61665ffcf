package redeq_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

func TestDeliveredOnTimeNeverEarly(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		l := newListener("t", nil)
		startWith(t, e.c, l)
		for i := range 30 {
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint(i), Delay: time.Duration(i*17) * time.Millisecond}))
		}
		testutil.Eventually(t, 5*time.Second, "all delivered", func() bool { return l.count() >= 30 })
		for _, d := range l.deliveries() {
			due := d.job.CreatedAt.Add(time.Duration(atoi(d.job.ID)*17) * time.Millisecond)
			require.False(t, d.at.Before(due), "job %s ran %v early", d.job.ID, due.Sub(d.at))
		}
		testutil.Eventually(t, 2*time.Second, "acked jobs leave the pool", func() bool { return stats(t, e.c, "t").Pool == 0 })
		require.Equal(t, 30, len(l.byID()))
	})
}

func atoi(s string) int {
	var n int
	fmt.Sscan(s, &n)
	return n
}

func TestOutcomes(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var calls atomic.Int32
		l := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			n := calls.Add(1)
			switch string(job.Body) {
			case "ack":
				ch.Ack()
			case "rejoin":
				if n == 1 {
					ch.Rejoin(50 * time.Millisecond)
				} else {
					ch.Ack()
				}
			case "ack+rejoin":
				if n == 1 {
					ch.Ack()
					ch.Rejoin(50 * time.Millisecond)
				} else {
					ch.Ack()
				}
			case "none":
			}
			return nil
		})
		startWith(t, e.c, l)

		run := func(body string) {
			calls.Store(0)
			id := body + "-job"
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: id, Body: []byte(body)}))
		}

		// Ack: removed from pool and in-flight.
		run("ack")
		testutil.Eventually(t, 3*time.Second, "acked", func() bool { return l.byID()["ack-job"] == 1 && stats(t, e.c, "t").Pool == 0 })
		require.Zero(t, stats(t, e.c, "t").InFlight)

		// Rejoin: runs again after the delay, attempts unchanged.
		run("rejoin")
		testutil.Eventually(t, 3*time.Second, "rejoined and run again", func() bool { return l.byID()["rejoin-job"] == 2 && stats(t, e.c, "t").Pool == 0 })
		ds := filter(l.deliveries(), "rejoin-job")
		require.GreaterOrEqual(t, ds[1].at.Sub(ds[0].at), 50*time.Millisecond)
		require.Zero(t, ds[1].job.Attempt)

		// Ack and rejoin: added again fresh.
		run("ack+rejoin")
		testutil.Eventually(t, 3*time.Second, "re-added and run again", func() bool { return l.byID()["ack+rejoin-job"] == 2 && stats(t, e.c, "t").Pool == 0 })
		ds = filter(l.deliveries(), "ack+rejoin-job")
		require.True(t, ds[1].job.CreatedAt.After(ds[0].job.CreatedAt) || ds[1].job.CreatedAt.Equal(ds[0].job.CreatedAt))
		require.GreaterOrEqual(t, ds[1].at.Sub(ds[0].at), 50*time.Millisecond)

		// Neither: parked in un_ack, not redelivered.
		run("none")
		testutil.Eventually(t, 3*time.Second, "parked", func() bool { return stats(t, e.c, "t").UnAck == 1 })
		st := stats(t, e.c, "t")
		require.EqualValues(t, 1, st.Pool)
		require.Zero(t, st.InFlight)
		got, err := e.c.Get(ctx, "t", "none-job")
		require.NoError(t, err)
		require.Equal(t, redeq.StateUnAck, got.State)
		parked, err := e.c.UnAcked(ctx, "t", 10)
		require.NoError(t, err)
		require.Len(t, parked, 1)
		require.Equal(t, "none-job", parked[0].ID)
		time.Sleep(3 * e.cfg.PollTimeout) // nothing redelivers it meanwhile
		require.Equal(t, 1, l.byID()["none-job"])

		// Requeue: delivered again; then parked again, ProcessUnAck takes it.
		require.NoError(t, e.c.RequeueUnAck(ctx, "t", "none-job", 0))
		testutil.Eventually(t, 3*time.Second, "requeued job runs", func() bool { return l.byID()["none-job"] == 2 })
		testutil.Eventually(t, 3*time.Second, "parked again", func() bool { return stats(t, e.c, "t").UnAck == 1 })
		job, err := e.c.ProcessUnAck(ctx, "t", "none-job")
		require.NoError(t, err)
		require.Equal(t, []byte("none"), job.Body)
		st = stats(t, e.c, "t")
		require.Zero(t, st.Pool)
		require.Zero(t, st.UnAck)
		_, err = e.c.ProcessUnAck(ctx, "t", "none-job")
		require.ErrorIs(t, err, redeq.ErrJobNotFound)
		require.ErrorIs(t, e.c.RequeueUnAck(ctx, "t", "none-job", 0), redeq.ErrJobNotFound)
	})
}

func filter(ds []delivery, id string) []delivery {
	var out []delivery
	for _, d := range ds {
		if d.job.ID == id {
			out = append(out, d)
		}
	}
	return out
}

func TestAutoAck(t *testing.T) {
	t.Parallel()
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			cfg := testutil.Config(t)
			cfg.AutoAck = true
			e := setup(t, be, cfg)
			l := newListener("t", func(context.Context, *redeq.Job, *redeq.Channel) error { return nil })
			startWith(t, e.c, l)
			require.NoError(t, e.c.Add(context.Background(), &redeq.Job{Topic: "t", ID: "a"}))
			testutil.Eventually(t, 3*time.Second, "auto-acked", func() bool { return l.count() == 1 && stats(t, e.c, "t").Pool == 0 })
			require.Zero(t, stats(t, e.c, "t").UnAck)
		})
	}
}

// TestRetrySchedule: each failure schedules the job's next run at the
// interval of its schedule for that attempt, the last interval repeating,
// by the server's clock; the handler sees its attempt count; after
// MaxRetries failures FinalRetry runs once and the job is dead. The
// intervals are hours long and the test brings each retry forward with
// Reschedule: it checks the stored due times exactly, between the server
// times just before the failure and just after its outcome was seen, and
// no assertion depends on how fast the machine is.
func TestRetrySchedule(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var mu sync.Mutex
		var failedAt []time.Time // by the server's clock, as each handler returns
		l := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			now, err := e.rdb.Time(ctx).Result()
			if err != nil {
				return err
			}
			mu.Lock()
			failedAt = append(failedAt, now)
			mu.Unlock()
			return errors.New("partner down")
		})
		startWith(t, e.c, l)
		intervals := []time.Duration{time.Hour, 2 * time.Hour}
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "cb", MaxRetries: 3, RetryIntervals: intervals}))
		want := []time.Duration{time.Hour, 2 * time.Hour, 2 * time.Hour}
		for i, w := range want {
			var job *redeq.Job
			testutil.Eventually(t, 5*time.Second, fmt.Sprintf("retry %d scheduled", i+1), func() bool {
				var err error
				job, err = e.c.Get(ctx, "t", "cb")
				require.NoError(t, err)
				return job.State == redeq.StateScheduled && job.Attempt == i+1
			})
			seen, err := e.rdb.Time(ctx).Result()
			require.NoError(t, err)
			mu.Lock()
			failed := failedAt[i]
			mu.Unlock()
			// The outcome was applied after failed and before seen; due
			// times are whole milliseconds, rounded up.
			require.False(t, job.RunAt.Before(failed.Add(w)), "retry %d due %v, less than %v after the failure at %v", i+1, job.RunAt, w, failed)
			require.False(t, job.RunAt.After(seen.Add(w+time.Millisecond)), "retry %d due %v, more than %v after it was seen at %v", i+1, job.RunAt, w, seen)
			require.NoError(t, e.c.Reschedule(ctx, "t", "cb", time.Now()))
		}
		testutil.Eventually(t, 5*time.Second, "final retry", func() bool { return l.finalCount() == 1 })
		testutil.Eventually(t, 2*time.Second, "dead", func() bool { return stats(t, e.c, "t").Dead == 1 })
		ds := l.deliveries()
		require.Len(t, ds, 4) // the first delivery and 3 retries
		for i, d := range ds {
			require.Equal(t, i, d.job.Attempt)
		}
		require.Equal(t, 4, l.finals[0].Attempt)
		time.Sleep(400 * time.Millisecond) // a window, not a wait: a fifth delivery would show in it
		require.Len(t, l.deliveries(), 4)
		require.Equal(t, 1, l.finalCount())

		dead, err := e.c.DeadJobs(ctx, "t", 10)
		require.NoError(t, err)
		require.Len(t, dead, 1)
		require.Equal(t, 4, dead[0].Attempt)
		require.Equal(t, "failed 4 times; last: partner down", dead[0].Reason)
		got, err := e.c.Get(ctx, "t", "cb")
		require.NoError(t, err)
		require.Equal(t, redeq.StateDead, got.State)
		require.Equal(t, dead[0].Reason, got.Reason)

		// Requeued from dead: a fresh set of attempts.
		require.NoError(t, e.c.RequeueDead(ctx, "t", "cb", 0))
		testutil.Eventually(t, 3*time.Second, "requeued dead job runs", func() bool { return l.count() == 5 })
		require.Zero(t, l.deliveries()[4].job.Attempt)
		got, err = e.c.Get(ctx, "t", "cb")
		if err == nil {
			require.Empty(t, got.Reason, "a requeued job carries no reason")
		}
	})
}

func TestFailuresAreRetried(t *testing.T) {
	t.Parallel()
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			cfg := testutil.Config(t)
			cfg.ConsumeTimeout = 100 * time.Millisecond
			e := setup(t, be, cfg)
			var n atomic.Int32
			l := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
				if job.Attempt == 0 {
					switch string(job.Body) {
					case "panic":
						panic("handler bug")
					case "timeout":
						<-ctx.Done()
						return ctx.Err()
					case "slow-nil":
						time.Sleep(150 * time.Millisecond) // overruns, then claims success
						ch.Ack()
						return nil
					}
				}
				n.Add(1)
				ch.Ack()
				return nil
			})
			startWith(t, e.c, l)
			for _, b := range []string{"panic", "timeout", "slow-nil"} {
				require.NoError(t, e.c.Add(context.Background(), &redeq.Job{Topic: "t", ID: b, Body: []byte(b)}))
			}
			testutil.Eventually(t, 5*time.Second, "each retried once and acked", func() bool { return n.Load() == 3 && stats(t, e.c, "t").Pool == 0 })
			for _, b := range []string{"panic", "timeout", "slow-nil"} {
				require.Equal(t, 2, l.byID()[b], b)
			}
		})
	}
}

func TestNoRetryAndSkipRetry(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		l := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			if string(job.Body) == "skip" {
				return redeq.SkipRetry(errors.New("bad request"))
			}
			return errors.New("fails")
		})
		startWith(t, e.c, l)
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "never", MaxRetries: -1}))
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "skip", Body: []byte("skip"), MaxRetries: 5}))
		testutil.Eventually(t, 3*time.Second, "both dead", func() bool { return stats(t, e.c, "t").Dead == 2 })
		require.Equal(t, map[string]int{"never": 1, "skip": 1}, l.byID())
		require.Equal(t, 2, l.finalCount())
	})
}

func TestDeadRetention(t *testing.T) {
	t.Parallel()
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			cfg := testutil.Config(t)
			cfg.DeadRetention = 3
			e := setup(t, be, cfg)
			l := newListener("t", func(context.Context, *redeq.Job, *redeq.Channel) error { return errors.New("no") })
			startWith(t, e.c, l)
			for i := range 5 {
				require.NoError(t, e.c.Add(context.Background(), &redeq.Job{Topic: "t", ID: fmt.Sprint(i), MaxRetries: -1, Delay: time.Duration(i*30) * time.Millisecond}))
			}
			testutil.Eventually(t, 3*time.Second, "all failed", func() bool { return l.finalCount() == 5 })
			testutil.Eventually(t, 3*time.Second, "dead set trimmed", func() bool {
				st := stats(t, e.c, "t")
				return st.Dead == 3 && st.Pool == 3
			})
			reasons := e.rdb.HLen(context.Background(), keys.ForBucket(e.cfg.Prefix, "t", 0).Reasons()).Val()
			require.EqualValues(t, 3, reasons, "reasons are trimmed with their jobs")
		})
	}
}

// TestDeleteInFlight: a job deleted while its handler runs is not re-added
// by the handler's outcome, whatever it is.
func TestDeleteInFlight(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		release := make(chan struct{})
		l := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			<-release
			switch string(job.Body) {
			case "rejoin":
				ch.Rejoin(0)
			case "fail":
				return errors.New("fail")
			case "ack+rejoin":
				ch.Ack()
				ch.Rejoin(0)
			}
			return nil // "none" parks
		})
		l.workers = 8
		startWith(t, e.c, l)
		bodies := []string{"rejoin", "fail", "ack+rejoin", "none"}
		for _, b := range bodies {
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: b, Body: []byte(b)}))
		}
		testutil.Eventually(t, 3*time.Second, "all in flight", func() bool { return l.count() == 4 })
		for _, b := range bodies {
			got, err := e.c.Get(ctx, "t", b)
			require.NoError(t, err)
			require.Equal(t, redeq.StateInFlight, got.State)
			deleted, err := e.c.Delete(ctx, "t", b)
			require.NoError(t, err)
			require.Equal(t, redeq.StateInFlight, deleted.State, "Delete says the handler runs")
			require.Equal(t, e.c.ConsumerID(), deleted.Consumer)
		}
		// One id comes back as a new job while the old one is still in flight.
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "none", Body: []byte("new"), Delay: time.Hour}))
		close(release)
		testutil.Eventually(t, 3*time.Second, "outcomes settled", func() bool { return stats(t, e.c, "t").InFlight == 0 })
		time.Sleep(3 * e.cfg.ScanInterval) // a window, not a wait: a late outcome would show in it
		st := stats(t, e.c, "t")
		require.EqualValues(t, 1, st.Pool, "only the new job")
		require.EqualValues(t, 1, st.Scheduled)
		require.Zero(t, st.UnAck)
		require.Zero(t, st.Dead)
		got, err := e.c.Get(ctx, "t", "none")
		require.NoError(t, err)
		require.Equal(t, []byte("new"), got.Body)
		require.Equal(t, 4, l.count())
	})
}

func TestRegisterRules(t *testing.T) {
	t.Parallel()
	e := setup(t, testutil.Backends(t)[0], testutil.Config(t))
	require.NoError(t, e.c.Register(newListener("t", nil)))
	require.ErrorIs(t, e.c.Register(newListener("t", nil)), redeq.ErrDuplicateListener)
	require.ErrorIs(t, e.c.Register(newListener("a b", nil)), redeq.ErrInvalidArgument)
	require.Error(t, e.c.Register(nil))
	require.NoError(t, e.c.Start(context.Background()))
	require.ErrorIs(t, e.c.Register(newListener("u", nil)), redeq.ErrStarted)
	require.ErrorIs(t, e.c.Start(context.Background()), redeq.ErrStarted)
	require.NoError(t, e.c.Shutdown(context.Background()))
	require.ErrorIs(t, e.c.Shutdown(context.Background()), redeq.ErrClientClosed)
	require.ErrorIs(t, e.c.Start(context.Background()), redeq.ErrClientClosed)
	require.ErrorIs(t, e.c.Register(newListener("v", nil)), redeq.ErrClientClosed)
	// Producing needs no running client.
	require.NoError(t, e.c.Add(context.Background(), &redeq.Job{Topic: "t", ID: "after"}))
}

func TestStartRejectsMismatchedTopic(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		require.NoError(t, e.c.Add(context.Background(), &redeq.Job{Topic: "t", ID: "a", Delay: time.Hour}))
		other := e.another(t, func(c *config.Config) { c.Concurrency = 4 })
		require.NoError(t, other.Register(newListener("t", nil)))
		require.ErrorIs(t, other.Start(context.Background()), redeq.ErrBucketMismatch)
	})
}

// TestAddsDoNotRereadTopics: a started client that also produces rereads
// the topic set only when it meets a topic for the first time, not on
// every Add. The periodic rereads (mover every 5 x ScanInterval, reaper
// every ConsumerTimeout / 5) are pushed out of the test's way, so every
// SMEMBERS it counts comes from an Add.
func TestAddsDoNotRereadTopics(t *testing.T) {
	for _, be := range testutil.RealBackends(t) {
		t.Run(be.Name, func(t *testing.T) {
			cfg := testutil.Config(t)
			cfg.ScanInterval = 30 * time.Minute
			cfg.LockExpiry = time.Hour
			cfg.ConsumerTimeout = time.Hour
			e := setup(t, be, cfg)
			ctx := context.Background()
			hook := &countSMembers{}
			c := e.hooked(t, hook)
			require.NoError(t, c.Start(ctx))
			testutil.Eventually(t, 5*time.Second, "the mover's first read of the topic set", func() bool { return hook.n.Load() == 1 })
			for i := range 500 {
				require.NoError(t, c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint(i), Delay: time.Hour}))
			}
			// A job of a second new topic, due now: once it is moved, the
			// mover has reread the topic set for it, and for "t" before.
			require.NoError(t, c.Add(ctx, &redeq.Job{Topic: "u", ID: "due"}))
			testutil.Eventually(t, 5*time.Second, "the new topic moved", func() bool { return stats(t, c, "u").Ready == 1 })
			// A new topic costs at most two rereads: the Add asks for one,
			// and its wake message asks for another if it arrives before
			// the mover knows the topic. The other 499 adds cost none.
			rereads := hook.n.Load() - 1
			require.GreaterOrEqual(t, rereads, int64(1))
			require.LessOrEqual(t, rereads, int64(4), "rereads of the topic set for 501 adds of 2 new topics")
		})
	}
}

type countSMembers struct{ n atomic.Int64 }

func (h *countSMembers) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countSMembers) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "smembers" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *countSMembers) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestBacklogKeepsWorkersBusy: a backlog of 5 ms jobs over 64 buckets and
// over 1 keeps Workers 8 busy: the drain takes close to jobs*5ms/8.
func TestBacklogKeepsWorkersBusy(t *testing.T) {
	for _, buckets := range []int{64, 1} {
		t.Run(fmt.Sprint(buckets), func(t *testing.T) {
			t.Parallel()
			_, be := privateServer(t)
			ctx := context.Background()
			cfg := testutil.Config(t)
			cfg.Concurrency = buckets
			e := setup(t, be, cfg)
			require.NoError(t, e.c.Start(ctx))
			const n = 1600
			var jobs []*redeq.Job
			for i := range n {
				jobs = append(jobs, &redeq.Job{Topic: "t", ID: fmt.Sprint("j", i)})
			}
			require.NoError(t, e.c.AddBatch(ctx, jobs))
			testutil.Eventually(t, 10*time.Second, "all ready", func() bool { return stats(t, e.c, "t").Ready == n })
			var ran atomic.Int64
			l := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
				time.Sleep(5 * time.Millisecond)
				ran.Add(1)
				ch.Ack()
				return nil
			})
			l.workers = 8
			consumer := e.another(t, nil)
			start := time.Now()
			startWith(t, consumer, l)
			testutil.Eventually(t, 30*time.Second, "drained", func() bool { return ran.Load() == n })
			took := time.Since(start)
			ideal := time.Duration(n) * 5 * time.Millisecond / 8
			t.Logf("buckets %d: %d jobs in %v, ideal %v: %.0f%% busy", buckets, n, took, ideal, 100*float64(ideal)/float64(took))
			// A stall (workers idle until the movers' next scan, 5 s away)
			// takes several times the ideal; 4x leaves room for a loaded
			// machine, where 2x failed at 2.1 s beside the other tests.
			require.Less(t, took, ideal*4)
		})
	}
}

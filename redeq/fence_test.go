package redeq_test

// Tests of the delivery fence and the script rules: nothing lost, never
// early, a deleted job never runs, a stalled consumer never acts on a job
// it no longer holds, one run per job when nothing crashes.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/bucket"
	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/ready"
	"github.com/redeq-go/redeq/redeq"
)

// TestManyInFlightNotLost: one consumer holding more deliveries of one
// bucket than Lua's unpack can take (about 8,000) settles them and rolls
// them back without losing any: the settle and release scripts never DEL
// the in-flight list before re-pushing it, a step that can fail.
func TestManyInFlightNotLost(t *testing.T) {
	const jobs = 9000
	for _, be := range testutil.RealBackends(t) {
		t.Run(be.Name, func(t *testing.T) {
			cfg := testutil.Config(t)
			cfg.Workers = jobs
			cfg.ShutdownTimeout = 200 * time.Millisecond
			// 9,000 running handlers under the race detector can delay a
			// lease renewal past the test settings' 600 ms, and the lease
			// guard would then cancel them before Shutdown does: this
			// test is about the settle and the rollback, so its leases
			// are long.
			cfg.ConsumerTimeout = 10 * time.Second
			cfg.HeartbeatInterval = time.Second
			e := setup(t, be, cfg)
			ctx := context.Background()
			batch := make([]*redeq.Job, jobs)
			for i := range batch {
				batch[i] = &redeq.Job{Topic: "t", ID: fmt.Sprint(i)}
			}
			require.NoError(t, e.c.AddBatch(ctx, batch))

			// Every job is held at once; half are acked, half are still
			// running when Shutdown rolls them back.
			var started atomic.Int64
			release := make(chan struct{})
			l := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
				started.Add(1)
				<-release
				if atoi(job.ID)%2 == 0 {
					ch.Ack()
					return nil
				}
				<-ctx.Done() // canceled by Shutdown
				return ctx.Err()
			})
			c := e.another(t, nil)
			startWith(t, c, l)
			testutil.Eventually(t, 60*time.Second, "every job held at once", func() bool { return started.Load() == jobs })
			require.EqualValues(t, jobs, stats(t, e.c, "t").InFlight)
			close(release)
			testutil.Eventually(t, 60*time.Second, "the acks applied", func() bool { return stats(t, e.c, "t").Pool == jobs/2 })
			// Handlers are canceled after ShutdownTimeout; the rollback of
			// 4,500 deliveries gets until the deadline of Shutdown's ctx,
			// which a busy machine under the race detector may need.
			sctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			serr := c.Shutdown(sctx)
			require.ErrorIs(t, serr, context.DeadlineExceeded, "handlers were canceled")
			// A handler that had not returned a short grace after it was
			// canceled keeps its job in flight, and Shutdown says so; its
			// worker gives the job back as soon as the handler returns.
			// Nothing else recovers jobs here (no client reaps), so what
			// the rollback missed would stay in flight.
			if strings.Contains(serr.Error(), "stay in flight") {
				testutil.Eventually(t, 30*time.Second, "the kept jobs given back by their workers", func() bool { return stats(t, e.c, "t").InFlight == 0 })
			}

			st := stats(t, e.c, "t")
			require.EqualValues(t, jobs/2, st.Pool)
			require.Zero(t, st.InFlight, "neither settled nor rolled back")
			require.EqualValues(t, jobs/2, st.Scheduled+st.Ready, "rolled back, not lost")
			for i := 1; i < jobs; i += 998 { // odd ids: rolled back
				job, err := e.c.Get(ctx, "t", fmt.Sprint(i))
				require.NoError(t, err)
				require.Zero(t, job.Attempt, "a rollback spends no attempt")
			}
		})
	}
}

// TestRollbackDoesNotDoubleAReaddedJob: a job deleted while in flight and
// added again must run once more, not twice, when the old consumer rolls
// back at shutdown: the rollback does not put the new job (already in the
// ready list) back in the bucket as well.
func TestRollbackDoesNotDoubleAReaddedJob(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
		holding := make(chan struct{}, 1)
		old := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			holding <- struct{}{}
			<-ctx.Done()
			return ctx.Err()
		})
		old.workers = 1
		a := e.another(t, func(c *config.Config) { c.ShutdownTimeout = 100 * time.Millisecond })
		startWith(t, a, old)
		<-holding
		_, err := e.c.Delete(ctx, "t", "j")
		require.NoError(t, err)
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
		// The new job falls due and waits in the ready list: the old
		// consumer's only worker is busy.
		testutil.Eventually(t, 5*time.Second, "the new job ready", func() bool { return state(t, e.c, "t", "j") == redeq.StateReady })
		require.ErrorIs(t, a.Shutdown(ctx), context.DeadlineExceeded, "the old handler was canceled")

		tl := newTally()
		fresh := newListener("t", tl.handle)
		fresh.workers = 4
		startWith(t, e.another(t, nil), fresh)
		testutil.Eventually(t, 5*time.Second, "the new job ran", func() bool { return tl.distinct() == 1 && stats(t, e.c, "t").Pool == 0 })
		settle(t, e, "t")
		require.Zero(t, tl.extra(), "the re-added job ran twice")
	})
}

// TestRecoveryDoesNotDoubleAReaddedJob: the same for the reaper: a crashed
// consumer's old delivery of a job since deleted and added again is
// dropped, not pushed to the ready list beside the new job.
func TestRecoveryDoesNotDoubleAReaddedJob(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
		require.NoError(t, e.c.Start(ctx)) // moves and reaps
		testutil.Eventually(t, 5*time.Second, "due", func() bool { return state(t, e.c, "t", "j") == redeq.StateReady })
		crash(t, e, "t", "crashed", 1)
		_, err := e.c.Delete(ctx, "t", "j")
		require.NoError(t, err)
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
		testutil.Eventually(t, 5*time.Second, "the new job ready", func() bool { return state(t, e.c, "t", "j") == redeq.StateReady })
		// The reaper handles the crashed consumer's set.
		testutil.Eventually(t, 10*time.Second, "crashed consumer reaped", func() bool { return stats(t, e.c, "t").Consumers == 0 })

		tl := newTally()
		l := newListener("t", tl.handle)
		l.workers = 4
		startWith(t, e.another(t, nil), l)
		testutil.Eventually(t, 5*time.Second, "the new job ran", func() bool { return tl.distinct() == 1 && stats(t, e.c, "t").Pool == 0 })
		settle(t, e, "t")
		require.Zero(t, tl.extra(), "the re-added job ran twice")
	})
}

// crash makes consumer cid take n ready jobs of topic and fall silent at
// once, as a process killed right after its fetch would.
func crash(t *testing.T, e *env, topic, cid string, n int) []ready.Item {
	t.Helper()
	ctx := context.Background()
	silentConsumer(t, e, cid, topic)
	items, _, err := ready.Fetch(ctx, e.rdb, e.cfg.Prefix, topic, 0, cid, n, true)
	require.NoError(t, err)
	require.Len(t, items, n)
	return items
}

// silentConsumer records consumer cid as a listener of topics whose last
// heartbeat was at the epoch: silent, as a consumer that died long ago.
func silentConsumer(t *testing.T, e *env, cid string, topics ...string) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, e.rdb.ZAdd(ctx, keys.Alive(e.cfg.Prefix), redisZ(cid)).Err())
	lines := make([]string, len(topics))
	for i, topic := range topics {
		lines[i] = keys.Address(topic, e.cfg.Concurrency)
	}
	require.NoError(t, e.rdb.HSet(ctx, keys.AliveTopics(e.cfg.Prefix), cid, strings.Join(lines, "\n")).Err())
	for _, topic := range topics {
		require.NoError(t, e.rdb.ZAdd(ctx, keys.ForTopic(e.cfg.Prefix, topic).Consumers(), redisZ(cid)).Err())
	}
}

// state is the state of a job, or "" when it is absent.
func state(t *testing.T, c *redeq.Client, topic, id string) redeq.State {
	t.Helper()
	job, err := c.Get(context.Background(), topic, id)
	if errors.Is(err, redeq.ErrJobNotFound) {
		return ""
	}
	require.NoError(t, err)
	return job.State
}

// settle waits until topic holds nothing in flight and nothing ready,
// stale entries included: whatever was going to run has run.
func settle(t *testing.T, e *env, topic string) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, "quiet", func() bool {
		st := stats(t, e.c, topic)
		return st.InFlight == 0 && st.Ready == 0
	})
}

// TestHugeDelaysNeverRunEarly: "never" written as a huge delay is stored
// far in the future (math.MaxInt64 ns does not wrap to 1734 and run at
// once), and a due time past the year 9999 is refused, writing nothing.
func TestHugeDelaysNeverRunEarly(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		far := time.Now().Add(200 * 365 * 24 * time.Hour)
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "never", Delay: math.MaxInt64}))
		job, err := e.c.Get(ctx, "t", "never")
		require.NoError(t, err)
		require.True(t, job.RunAt.After(far), "due %v", job.RunAt)

		before := testutil.Dump(t, e.rdb, e.cfg.Prefix)
		y300k := time.Date(300000, 1, 1, 0, 0, 0, 0, time.UTC)
		err = e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "y300k", RunAt: y300k})
		require.ErrorIs(t, err, redeq.ErrInvalidJob)
		require.ErrorContains(t, err, "9999")
		err = e.c.Reschedule(ctx, "t", "never", y300k)
		require.ErrorIs(t, err, redeq.ErrInvalidArgument)
		require.Equal(t, before, testutil.Dump(t, e.rdb, e.cfg.Prefix), "a refused call wrote something")

		// A handler's "rejoin never" and a requeue far away stay far away.
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "rejoin"}))
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "park"}))
		l := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			if job.ID == "rejoin" {
				ch.Rejoin(math.MaxInt64)
			}
			return nil // "park" goes to un_ack
		})
		startWith(t, e.c, l)
		testutil.Eventually(t, 5*time.Second, "both handled", func() bool {
			return state(t, e.c, "t", "rejoin") == redeq.StateScheduled && state(t, e.c, "t", "park") == redeq.StateUnAck
		})
		require.NoError(t, e.c.RequeueUnAck(ctx, "t", "park", math.MaxInt64))
		for _, id := range []string{"never", "rejoin", "park"} {
			job, err := e.c.Get(ctx, "t", id)
			require.NoError(t, err)
			require.Equal(t, redeq.StateScheduled, job.State, id)
			require.True(t, job.RunAt.After(far), "%s due %v", id, job.RunAt)
		}
		require.Equal(t, 2, l.count())
	})
}

// TestStaleOutcomeAfterRefetch: a consumer that stalls (its heartbeats
// stop) loses its delivery to the reaper, fetches the same job again, and
// then its stalled first delivery fails: that stale failure must be
// dropped, and the live delivery's ack must apply. The old fence (id in my
// list + created ms) let the stale retry through and dropped the live ack.
func TestStaleOutcomeAfterRefetch(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		hb := newScriptHook(t, "consumer/heartbeat.lua")
		sh := newScriptHook(t, "ack/settle.lua")
		var settles atomic.Int64
		sh.set(func(ctx context.Context, cmd redis.Cmder, next func() error) error {
			err := next()
			settles.Add(1)
			return err
		})
		var stalled atomic.Bool // its lease renewals fail with its heartbeats
		rdb := e.be.New(t)
		rdb.AddHook(hb)
		rdb.AddHook(sh)
		rdb.AddHook(cutLeases(t, &stalled))
		c, err := redeq.New(rdb, e.cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Shutdown(context.Background()) })

		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
		second := make(chan struct{})
		staleSettled := make(chan struct{})
		var runs atomic.Int64
		l := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			switch runs.Add(1) {
			case 1:
				// Stall: the heartbeats fail until the job is taken back;
				// then they get through, and the consumer fetches it again.
				stalled.Store(true)
				hb.set(func(context.Context, redis.Cmder, func() error) error { return errors.New("stalled") })
				for {
					// Not the handler's ctx: it ends once the lease may
					// have lapsed, long before the test is done with it.
					j, err := e.c.Get(context.Background(), "t", "j")
					if err == nil && j.Recoveries > 0 {
						break
					}
					time.Sleep(5 * time.Millisecond)
				}
				hb.set(nil)
				stalled.Store(false)
				<-second
				return errors.New("stale failure")
			case 2:
				before := settles.Load()
				close(second)
				// The stale delivery's outcome is settled first.
				for settles.Load() == before {
					time.Sleep(time.Millisecond)
				}
				close(staleSettled)
				ch.Ack()
				return nil
			}
			return errors.New("a third run")
		})
		l.workers = 2
		startWith(t, c, l)
		require.NoError(t, e.c.Start(ctx)) // another client, to reap
		testutil.Eventually(t, 10*time.Second, "second delivery", func() bool { return runs.Load() >= 2 })
		<-staleSettled
		testutil.Eventually(t, 5*time.Second, "acked", func() bool { return state(t, e.c, "t", "j") == "" })
		settle(t, e, "t")
		require.EqualValues(t, 2, runs.Load(), "the stale failure rescheduled the job")
	})
}

// TestAdminCallsSurviveARerun: go-redis resends a command whose reply was
// lost; each admin call gives the rerun the first run's answer: a rerun of
// ProcessUnAck reports the job it just removed, not ErrJobNotFound (the
// caller would never process it, and the job would be gone).
func TestAdminCallsSurviveARerun(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		hooks := map[string]*scriptHook{}
		rdb := e.be.New(t)
		for _, path := range []string{"ack/take.lua", "ack/requeue.lua", "pool/delete.lua", "bucket/reschedule.lua"} {
			h := newScriptHook(t, path)
			h.set(rerun)
			hooks[path] = h
			rdb.AddHook(h)
		}
		c, err := redeq.New(rdb, e.cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Shutdown(context.Background()) })

		// Three jobs parked in un_ack, one dead, one scheduled.
		for _, id := range []string{"u1", "u2", "d", "s"} {
			job := &redeq.Job{Topic: "t", ID: id, MaxRetries: -1}
			if id == "s" {
				job.Delay = time.Hour
			}
			require.NoError(t, e.c.Add(ctx, job))
		}
		l := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			if job.ID == "d" {
				return errors.New("boom")
			}
			return nil // parked in un_ack
		})
		startWith(t, e.c, l)
		testutil.Eventually(t, 5*time.Second, "parked", func() bool {
			st := stats(t, e.c, "t")
			return st.UnAck == 2 && st.Dead == 1
		})

		job, err := c.ProcessUnAck(ctx, "t", "u1")
		require.NoError(t, err)
		require.Equal(t, "u1", job.ID)
		require.NoError(t, c.RequeueUnAck(ctx, "t", "u2", time.Hour))
		require.NoError(t, c.RequeueDead(ctx, "t", "d", time.Hour))
		require.NoError(t, c.Reschedule(ctx, "t", "s", time.Now().Add(2*time.Hour)))
		job, err = c.Delete(ctx, "t", "s")
		require.NoError(t, err)
		require.Equal(t, "s", job.ID)

		for id, want := range map[string]redeq.State{"u1": "", "u2": redeq.StateScheduled, "d": redeq.StateScheduled, "s": ""} {
			require.Equal(t, want, state(t, e.c, "t", id), id)
		}
		// A second call of its own is still answered truthfully.
		_, err = c.ProcessUnAck(ctx, "t", "u1")
		require.ErrorIs(t, err, redeq.ErrJobNotFound)
		_, err = c.Delete(ctx, "t", "s")
		require.ErrorIs(t, err, redeq.ErrJobNotFound)
	})
}

// TestAddSurvivesARerun: go-redis sends an add again when its reply is late
// or lost. The rerun must give the first run's answer: not ErrJobExists
// for the job it just stored, and not a second copy of a job that ran and
// was acked in between (it would run twice).
func TestAddSurvivesARerun(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		runs := newTally()
		startWith(t, e.c, newListener("t", runs.handle))
		gone := func(id string) bool {
			_, err := e.c.Get(ctx, "t", id)
			return errors.Is(err, redeq.ErrJobNotFound)
		}
		h := newScriptHook(t, "pool/add.lua")
		h.set(func(ctx context.Context, cmd redis.Cmder, next func() error) error {
			if err := next(); err != nil {
				return err
			}
			// Let the jobs due now run and be acked before the rerun.
			args := fmt.Sprint(cmd.Args())
			for _, id := range []string{"now", "b1", "b2"} {
				if strings.Contains(args, " "+id+" ") {
					testutil.Eventually(t, 10*time.Second, "ran before the rerun", func() bool { return gone(id) })
				}
			}
			return next()
		})
		rdb := e.be.New(t)
		rdb.AddHook(h)
		c, err := redeq.New(rdb, e.cfg)
		require.NoError(t, err)

		require.NoError(t, c.Add(ctx, &redeq.Job{Topic: "t", ID: "later", Delay: time.Hour}), "a rerun reported its own job as existing")
		require.NoError(t, c.Add(ctx, &redeq.Job{Topic: "t", ID: "now"}))
		require.NoError(t, c.AddBatch(ctx, []*redeq.Job{{Topic: "t", ID: "b1"}, {Topic: "t", ID: "b2"}}))
		settle(t, e, "t")
		for _, id := range []string{"now", "b1", "b2"} {
			require.True(t, gone(id), id)
			runs.mu.Lock()
			n := len(runs.runs[id])
			runs.mu.Unlock()
			require.Equal(t, 1, n, "job %s ran %d times", id, n)
		}
		require.Equal(t, redeq.StateScheduled, state(t, e.c, "t", "later"))
		// An add of its own for an existing id is still refused.
		require.ErrorIs(t, c.Add(ctx, &redeq.Job{Topic: "t", ID: "later"}), redeq.ErrJobExists)
	})
}

// TestFailedStartCanBeRetried: a Start that fails (its ctx ended before
// Redis answered) leaves the client startable; a failed Start used to
// leave it marked started, so every later Start said "already started"
// and nothing ever ran. A first heartbeat that fails (Redis still loading
// its data set) does not fail Start: nothing is fetched until a heartbeat
// gets through, and then the jobs run.
func TestFailedStartCanBeRetried(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		hb := newScriptHook(t, "consumer/heartbeat.lua")
		var failed atomic.Int64
		hb.set(func(context.Context, redis.Cmder, func() error) error {
			failed.Add(1)
			return errors.New("LOADING Redis is loading the dataset in memory")
		})
		c := e.hooked(t, hb)
		l := newListener("t", nil)
		require.NoError(t, c.Register(l))
		gone, cancel := context.WithCancel(ctx)
		cancel()
		require.ErrorIs(t, c.Start(gone), context.Canceled)
		require.NoError(t, c.Start(ctx))
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
		testutil.Eventually(t, 5*time.Second, "heartbeats failed", func() bool { return failed.Load() >= 3 })
		require.Zero(t, l.count(), "a job ran before a heartbeat got through")
		hb.set(nil)
		testutil.Eventually(t, 5*time.Second, "ran", func() bool { return l.count() == 1 })
	})
}

// TestDeletedWaitingJobNeverStarts: a job deleted while its consumer's
// workers are all busy does not start afterwards, although a runner may
// hold more deliveries than it has workers.
func TestDeletedWaitingJobNeverStarts(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		release := make(chan struct{})
		l := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			if job.ID == "a" {
				<-release
			}
			ch.Ack()
			return nil
		})
		l.workers = 1
		startWith(t, e.c, l)
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "a"}))
		testutil.Eventually(t, 5*time.Second, "a running", func() bool { return l.count() == 1 })
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "b"}))
		testutil.Eventually(t, 5*time.Second, "b due", func() bool {
			s := state(t, e.c, "t", "b")
			return s == redeq.StateReady || s == redeq.StateInFlight
		})
		_, err := e.c.Delete(ctx, "t", "b")
		require.NoError(t, err)
		close(release)
		testutil.Eventually(t, 5*time.Second, "a done", func() bool { return state(t, e.c, "t", "a") == "" })
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "c"}))
		testutil.Eventually(t, 5*time.Second, "c ran", func() bool { return l.byID()["c"] == 1 })
		settle(t, e, "t")
		require.Zero(t, l.byID()["b"], "the deleted job started")
	})
}

// TestOutcomeOfOldDeliverySparesReaddedJob: a job deleted and added again
// within the same millisecond has the same created time; the old
// delivery's ack must still not delete the new job. (The test writes the
// new job's envelope byte for byte as the old one, as such a re-add
// would.)
func TestOutcomeOfOldDeliverySparesReaddedJob(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
		k := keys.ForBucket(e.cfg.Prefix, "t", 0)
		env0 := e.rdb.HGet(ctx, k.Pool(), "j").Val()
		holding, release := make(chan struct{}), make(chan struct{})
		l := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			close(holding)
			<-release
			ch.Ack()
			return nil
		})
		startWith(t, e.c, l)
		<-holding
		_, err := e.c.Delete(ctx, "t", "j")
		require.NoError(t, err)
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j", Delay: time.Hour}))
		require.NoError(t, e.rdb.HSet(ctx, k.Pool(), "j", env0).Err())
		close(release)
		settle(t, e, "t")
		require.Equal(t, redeq.StateScheduled, state(t, e.c, "t", "j"), "the old delivery's ack deleted the new job")
	})
}

// TestReaperSparesAConsumerThatCameBack: a consumer that looked silent but
// fetched again while being reaped keeps its delivery and its place in
// the consumer set: the reaper does not drop it from the set while it holds
// a job, so that job is recovered if it dies later.
func TestReaperSparesAConsumerThatCameBack(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
		require.NoError(t, e.c.Start(ctx)) // moves and reaps
		testutil.Eventually(t, 5*time.Second, "due", func() bool { return state(t, e.c, "t", "j") == redeq.StateReady })
		// Silent (no heartbeat, joined at time 0), but it has just fetched.
		crash(t, e, "t", "back", 1)
		consumers := keys.ForTopic(e.cfg.Prefix, "t").Consumers()
		// Within a ConsumerTimeout of its fetch it counts as alive...
		for range 3 {
			time.Sleep(e.cfg.ConsumerTimeout / 4)
			require.Equal(t, redeq.StateInFlight, state(t, e.c, "t", "j"))
			require.NoError(t, e.rdb.ZScore(ctx, consumers, "back").Err(), "dropped from the consumer set")
		}
		// ...and once it heartbeats again it stays, with its job.
		alive := keys.Alive(e.cfg.Prefix)
		beat := func() { // what a heartbeat does
			e.rdb.ZAdd(ctx, alive, redis.Z{Score: float64(time.Now().UnixMilli()), Member: "back"})
		}
		deadline := time.Now().Add(3 * e.cfg.ConsumerTimeout)
		for time.Now().Before(deadline) {
			beat()
			time.Sleep(e.cfg.HeartbeatInterval)
			require.Equal(t, redeq.StateInFlight, state(t, e.c, "t", "j"))
		}
		require.NoError(t, e.rdb.ZScore(ctx, consumers, "back").Err())
		// When it dies after all, its job is recovered.
		testutil.Eventually(t, 10*time.Second, "recovered", func() bool { return state(t, e.c, "t", "j") == redeq.StateReady })
	})
}

// TestOutageLongerThanConsumerTimeout: Redis stops answering for longer
// than ConsumerTimeout while a consumer runs a job. When it answers again,
// no reaper may take the live consumer for dead before its heartbeat gets
// through: the job must not run twice.
func TestOutageLongerThanConsumerTimeout(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	for _, be := range testutil.RealBackends(t) {
		t.Run(be.Name, func(t *testing.T) {
			e := setup(t, be, testutil.Config(t))
			ctx := context.Background()
			// The consumer's heartbeats (and its lease renewals) can be
			// held back, as if they reached the server after the
			// reaper's queries.
			hb := newScriptHook(t, "consumer/heartbeat.lua")
			leases := leaseRenewals(t)
			held := make(chan struct{})
			rdb := be.New(t)
			rdb.AddHook(hb)
			rdb.AddHook(leases)
			a, err := redeq.New(rdb, e.cfg)
			require.NoError(t, err)
			t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
			release := make(chan struct{})
			l := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
				<-release
				ch.Ack()
				return nil
			})
			startWith(t, a, l)
			require.NoError(t, e.c.Start(ctx)) // the reaper of another service
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
			testutil.Eventually(t, 5*time.Second, "running", func() bool { return l.count() == 1 })

			hb.set(func(ctx context.Context, cmd redis.Cmder, next func() error) error {
				<-held
				return next()
			})
			leases.Set(func(ctx context.Context, _ []redis.Cmder, next func() error) error {
				<-held
				return next()
			})
			pause := 3 * e.cfg.ConsumerTimeout // well past it, well inside go-redis's read timeout
			pauseAll(t, be.New(t), pause)
			// The reaper's queries get through first; the heartbeats a
			// little later, still well within a ConsumerTimeout.
			time.Sleep(pause + e.cfg.ConsumerTimeout/2)
			close(held)
			hb.set(nil)
			leases.Set(nil)
			time.Sleep(3 * e.cfg.ConsumerTimeout) // the window in which a wrong reap would strike
			close(release)
			testutil.Eventually(t, 5*time.Second, "acked", func() bool { return state(t, e.c, "t", "j") == "" })
			settle(t, e, "t")
			require.Equal(t, 1, l.count(), "a live consumer's job was recovered after the outage")
		})
	}
}

// pauseAll stops every master of the deployment from serving clients for d.
func pauseAll(t *testing.T, c redis.UniversalClient, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	ms := fmt.Sprint(d.Milliseconds())
	switch cc := c.(type) {
	case *redis.ClusterClient:
		require.NoError(t, cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			return n.Do(ctx, "CLIENT", "PAUSE", ms, "ALL").Err()
		}))
	default:
		require.NoError(t, c.Do(ctx, "CLIENT", "PAUSE", ms, "ALL").Err())
	}
}

// failTopic fails, as an unreachable cluster node would, every command of
// a pipeline that names a key of topic, and lets the others through.
type failTopic struct{ tag string }

func (h failTopic) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h failTopic) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.names(cmd) {
			err := errors.New("dial tcp: connection refused (simulated)")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

func (h failTopic) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			if h.names(cmd) {
				err = errors.New("dial tcp: connection refused (simulated)")
				cmd.SetErr(err)
			}
		}
		return err
	}
}

func (h failTopic) names(cmd redis.Cmder) bool {
	for _, a := range cmd.Args() {
		if s, ok := a.(string); ok && strings.Contains(s, h.tag) {
			return true
		}
	}
	return false
}

// TestReaperTopicsIndependent: a topic whose Redis node cannot be reached
// does not stop the reaper from recovering the jobs of other topics: each
// topic is checked on its own, and one's failure ends no other's check.
func TestReaperTopicsIndependent(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		for _, topic := range []string{"down", "up"} {
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: "j"}))
		}
		testutil.Eventually(t, 5*time.Second, "due", func() bool {
			res, err := bucket.Move(ctx, e.rdb, e.cfg.Prefix, "up", 0, 10)
			require.NoError(t, err)
			return res.Moved == 1
		})
		crash(t, e, "up", "crashed", 1)
		reaper := e.hooked(t, failTopic{tag: "{down"})
		require.NoError(t, reaper.Start(ctx))
		testutil.Eventually(t, 10*time.Second, "recovered on the healthy node", func() bool { return state(t, e.c, "up", "j") == redeq.StateReady })
	})
}

// TestPoisonSparesBystanders: a job that kills every consumer running it
// goes dead as poison, and the jobs that happened to run beside it when
// it did do not: they are not recovered with it each time until they go
// dead as poison too.
func TestPoisonSparesBystanders(t *testing.T) {
	for _, be := range testutil.RealBackends(t) {
		t.Run(be.Name, func(t *testing.T) {
			cfg := testutil.Config(t)
			cfg.MaxRecoveries = 3
			e := setup(t, be, cfg)
			ctx := context.Background()
			ids := []string{"poison", "b1", "b2", "b3"}
			for _, id := range ids {
				require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: id}))
			}
			require.NoError(t, e.c.Start(ctx)) // moves and reaps
			var mu sync.Mutex
			finished := map[string]int{}
			onLine := func(line string) {
				if id, ok := strings.CutPrefix(line, "finished "); ok {
					mu.Lock()
					finished[id]++
					mu.Unlock()
				}
			}
			deadline := time.Now().Add(60 * time.Second)
			for state(t, e.c, "t", "poison") != redeq.StateDead {
				require.True(t, time.Now().Before(deadline), "the poison job never went dead")
				c := startChildKind(t, "poison", be, e.cfg.Prefix, "t", onLine)
				<-c.drained // it dies by the poison job
				c.kill()
				testutil.Eventually(t, 10*time.Second, "poison recovered", func() bool { return state(t, e.c, "t", "poison") != redeq.StateInFlight })
			}
			job, err := e.c.Get(ctx, "t", "poison")
			require.NoError(t, err)
			require.Contains(t, job.Reason, "poison")
			// The bystanders run to the end on a healthy consumer.
			l := newListener("t", nil)
			startWith(t, e.another(t, nil), l)
			testutil.Eventually(t, 10*time.Second, "bystanders done", func() bool {
				st := stats(t, e.c, "t")
				return st.Pool == 1 && st.Dead == 1
			})
			for _, id := range ids[1:] {
				mu.Lock()
				n := finished[id]
				mu.Unlock()
				require.Equal(t, 1, n+l.byID()[id], "%s ran to the end once", id)
			}
		})
	}
}

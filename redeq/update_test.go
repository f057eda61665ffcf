package redeq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/ready"
	"github.com/redeq-go/redeq/redeq"
)

// TestUpdateWaitingJobs: Update changes a scheduled job's body, settings
// and due time, keeping its attempts; a ready job changed without a new
// due time keeps its place in the ready list, and with one goes back to
// its bucket.
func TestUpdateWaitingJobs(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "s", Body: []byte("old"), Delay: time.Hour}))
		at := time.Now().Add(3 * time.Hour).Truncate(time.Millisecond)
		require.NoError(t, e.c.Update(ctx, "t", "s", func(j *redeq.Job) error {
			require.Equal(t, redeq.StateScheduled, j.State)
			require.Equal(t, "old", string(j.Body))
			j.Body = []byte("new")
			j.RunAt = at
			j.MaxRetries = 7
			j.RetryIntervals = []time.Duration{time.Second, time.Minute}
			return nil
		}))
		got, err := e.c.Get(ctx, "t", "s")
		require.NoError(t, err)
		require.Equal(t, "new", string(got.Body))
		require.Equal(t, at, got.RunAt)
		require.Equal(t, 7, got.MaxRetries)
		require.Equal(t, []time.Duration{time.Second, time.Minute}, got.RetryIntervals)
		require.Zero(t, got.Attempt)

		// Ready jobs: "a" keeps its place ahead of "b", "c" goes back.
		for _, id := range []string{"a", "b", "c"} {
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "r", ID: id}))
		}
		moveDue(t, e, "r", 1, 3)
		require.NoError(t, e.c.Update(ctx, "r", "a", func(j *redeq.Job) error {
			j.Body = []byte("changed")
			return nil
		}))
		require.NoError(t, e.c.Update(ctx, "r", "c", func(j *redeq.Job) error {
			j.Delay = time.Hour
			return nil
		}))
		require.Equal(t, []string{"a", "b"}, ids(listAll(t, e.c, "r", redeq.StateReady, 10)))
		require.Equal(t, redeq.StateScheduled, state(t, e.c, "r", "c"))
		items, _, err := ready.Fetch(ctx, e.rdb, e.cfg.Prefix, "r", 0, "me", 10, true)
		require.NoError(t, err)
		require.Len(t, items, 2, "c's stale ready entry was dropped")
		require.Contains(t, items[0].Envelope, "changed")
	})
}

// TestUpdateRefusalsWriteNothing: fn's error is returned and nothing is
// written; so for a change Add would refuse or one of redeq's fields, a
// missing job, and a job that is not waiting.
func TestUpdateRefusalsWriteNothing(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j", Body: []byte("b"), Delay: time.Hour}))
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "held"}))
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "u", ID: "parked"}))
		parker := e.another(t, nil)
		startWith(t, parker, newListener("u", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			return nil // parked in un_ack
		}))
		testutil.Eventually(t, 5*time.Second, "parked", func() bool { return state(t, e.c, "u", "parked") == redeq.StateUnAck })
		require.NoError(t, parker.Shutdown(ctx)) // its reaper would recover "held"
		moveDue(t, e, "t", 1, 1)
		crash(t, e, "t", "c1", 1)

		before := testutil.Dump(t, e.rdb, e.cfg.Prefix)
		boom := errors.New("boom")
		calls := 0
		err := e.c.Update(ctx, "t", "j", func(j *redeq.Job) error {
			calls++
			j.Body = []byte("half done")
			return boom
		})
		require.ErrorIs(t, err, boom)
		require.Equal(t, 1, calls)
		cases := []struct {
			name string
			fn   func(j *redeq.Job)
			want string
		}{
			{"id", func(j *redeq.Job) { j.ID = "k" }, "ID is set by redeq"},
			{"topic", func(j *redeq.Job) { j.Topic = "x" }, "Topic is set by redeq"},
			{"attempt", func(j *redeq.Job) { j.Attempt = 3 }, "Attempt"},
			{"broadcast", func(j *redeq.Job) { j.Broadcast = true }, "Broadcast"},
			{"body", func(j *redeq.Job) { j.Body = make([]byte, e.cfg.MaxBodyBytes+1) }, "MaxBodyBytes"},
			{"delay", func(j *redeq.Job) { j.Delay = -time.Second }, "negative Delay"},
			{"both", func(j *redeq.Job) { j.Delay = time.Second; j.RunAt = time.Now() }, "both RunAt and Delay"},
			{"retries", func(j *redeq.Job) { j.MaxRetries = -2 }, "MaxRetries"},
			{"after 9999", func(j *redeq.Job) { j.RunAt = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }, "9999"},
		}
		for _, tc := range cases {
			err := e.c.Update(ctx, "t", "j", func(j *redeq.Job) error { tc.fn(j); return nil })
			require.ErrorIs(t, err, redeq.ErrInvalidJob, tc.name)
			require.ErrorContains(t, err, tc.want, tc.name)
		}
		noop := func(j *redeq.Job) error { j.Body = []byte("x"); return nil }
		require.ErrorIs(t, e.c.Update(ctx, "t", "missing", noop), redeq.ErrJobNotFound)
		require.ErrorIs(t, e.c.Update(ctx, "t", "held", noop), redeq.ErrJobNotWaiting)
		require.ErrorIs(t, e.c.Update(ctx, "u", "parked", noop), redeq.ErrJobNotWaiting)
		require.ErrorIs(t, e.c.Update(ctx, "t", "j", nil), redeq.ErrInvalidArgument)
		require.NoError(t, e.c.Update(ctx, "t", "j", func(j *redeq.Job) error { return nil }), "a no-op")
		require.Equal(t, before, testutil.Dump(t, e.rdb, e.cfg.Prefix), "a refused Update wrote something")
	})
}

// TestUpdateIsACompareAndSet: a fetch between Update's read and its write
// wins: the job is in flight, Update says so and leaves the envelope the
// consumer got. A concurrent change of a waiting job makes Update read it
// again and call fn on the fresh copy, keeping that change.
func TestUpdateIsACompareAndSet(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j", Body: []byte("old")}))
		moveDue(t, e, "t", 1, 1)
		var fetched []ready.Item
		err := e.c.Update(ctx, "t", "j", func(j *redeq.Job) error {
			if fetched == nil {
				fetched = crash(t, e, "t", "c1", 1) // a consumer takes it meanwhile
			}
			j.Body = []byte("new")
			return nil
		})
		require.ErrorIs(t, err, redeq.ErrJobNotWaiting)
		got, err := e.c.Get(ctx, "t", "j")
		require.NoError(t, err)
		require.Equal(t, "old", string(got.Body), "the job in flight was changed under its handler")
		require.Equal(t, redeq.StateInFlight, got.State)
		require.Contains(t, fetched[0].Envelope, "old")

		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "k", Body: []byte("v1"), Delay: time.Hour}))
		other := e.another(t, nil)
		later := time.Now().Add(5 * time.Hour).Truncate(time.Millisecond)
		var seen []string
		require.NoError(t, e.c.Update(ctx, "t", "k", func(j *redeq.Job) error {
			seen = append(seen, string(j.Body))
			if len(seen) == 1 {
				require.NoError(t, other.Update(ctx, "t", "k", func(j *redeq.Job) error {
					j.Body = []byte("v2")
					return nil
				}))
				require.NoError(t, other.Reschedule(ctx, "t", "k", later))
			}
			j.Body = append(j.Body, "+mine"...)
			return nil
		}))
		require.Equal(t, []string{"v1", "v2"}, seen)
		got, err = e.c.Get(ctx, "t", "k")
		require.NoError(t, err)
		require.Equal(t, "v2+mine", string(got.Body))
		require.Equal(t, later, got.RunAt, "the concurrent reschedule was lost")
	})
}

// TestPutReplacesOrAdds: Put adds an absent job, replaces a waiting,
// parked or dead one (fresh attempts, new due time and body), and refuses
// one in flight, writing nothing. A replaced ready job runs once.
func TestPutReplacesOrAdds(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		require.NoError(t, e.c.Put(ctx, &redeq.Job{Topic: "t", ID: "digest", Body: []byte("1 change"), Delay: 10 * time.Minute}))
		first, err := e.c.Get(ctx, "t", "digest")
		require.NoError(t, err)
		require.Equal(t, redeq.StateScheduled, first.State)
		require.NoError(t, e.c.Put(ctx, &redeq.Job{Topic: "t", ID: "digest", Body: []byte("2 changes"), Delay: 20 * time.Minute, MaxRetries: 3}))
		got, err := e.c.Get(ctx, "t", "digest")
		require.NoError(t, err)
		require.Equal(t, "2 changes", string(got.Body))
		require.Equal(t, 3, got.MaxRetries)
		require.True(t, got.RunAt.After(first.RunAt.Add(9*time.Minute)), "due %v, was %v", got.RunAt, first.RunAt)
		st := stats(t, e.c, "t")
		require.EqualValues(t, 1, st.Pool)
		require.EqualValues(t, 1, st.Scheduled)

		// Ready: replaced by a job due now, it runs once, with the new body.
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "r", ID: "j", Body: []byte("old")}))
		moveDue(t, e, "r", 1, 1)
		require.NoError(t, e.c.Put(ctx, &redeq.Job{Topic: "r", ID: "j", Body: []byte("new")}))
		moveDue(t, e, "r", 1, 1)
		items, _, err := ready.Fetch(ctx, e.rdb, e.cfg.Prefix, "r", 0, "me", 10, true)
		require.NoError(t, err)
		require.Len(t, items, 1)
		require.Contains(t, items[0].Envelope, "new")

		// In flight: refused, nothing written; bad jobs too. Dead: replaced.
		before := testutil.Dump(t, e.rdb, e.cfg.Prefix)
		err = e.c.Put(ctx, &redeq.Job{Topic: "r", ID: "j", Body: []byte("newer")})
		require.ErrorIs(t, err, redeq.ErrJobNotWaiting)
		// Bad jobs are refused as by Add.
		require.ErrorIs(t, e.c.Put(ctx, &redeq.Job{Topic: "t", ID: "x", Delay: -1}), redeq.ErrInvalidJob)
		require.ErrorIs(t, e.c.Put(ctx, &redeq.Job{Topic: "t", ID: "a b"}), redeq.ErrInvalidJob)
		require.Equal(t, before, testutil.Dump(t, e.rdb, e.cfg.Prefix), "a refused Put wrote something")

		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "d", ID: "j"}))
		startWith(t, e.another(t, nil), newListener("d", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			if string(job.Body) == "" {
				return redeq.SkipRetry(errors.New("no"))
			}
			ch.Ack()
			return nil
		}))
		testutil.Eventually(t, 5*time.Second, "dead", func() bool { return state(t, e.c, "d", "j") == redeq.StateDead })
		require.NoError(t, e.c.Put(ctx, &redeq.Job{Topic: "d", ID: "j", Body: []byte("again")}))
		testutil.Eventually(t, 5*time.Second, "the new job ran", func() bool { return stats(t, e.c, "d").Pool == 0 })
		require.Zero(t, stats(t, e.c, "d").Dead)

	})
}

// TestUpdateAndPutRerunSafe: go-redis reruns a script whose reply was lost;
// the rerun of Update's and Put's writes gives the first run's answer
// (Update's rerun would otherwise find the job changed, by itself, and
// call fn again).
func TestUpdateAndPutRerunSafe(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		rdb := e.be.New(t)
		upd := newScriptHook(t, "pool/update.lua")
		put := newScriptHook(t, "pool/put.lua")
		rdb.AddHook(upd)
		rdb.AddHook(put)
		c, err := redeq.New(rdb, e.cfg)
		require.NoError(t, err)
		upd.set(rerun)
		put.set(rerun)
		require.NoError(t, c.Put(ctx, &redeq.Job{Topic: "t", ID: "j", Body: []byte("a"), Delay: time.Hour}))
		require.NoError(t, c.Put(ctx, &redeq.Job{Topic: "t", ID: "j", Body: []byte("b"), Delay: time.Hour}))
		calls := 0
		require.NoError(t, c.Update(ctx, "t", "j", func(j *redeq.Job) error {
			calls++
			j.Body = []byte("c")
			return nil
		}))
		require.Equal(t, 1, calls, "the rerun was taken for a concurrent change")
		got, err := c.Get(ctx, "t", "j")
		require.NoError(t, err)
		require.Equal(t, "c", string(got.Body))
		require.EqualValues(t, 1, stats(t, c, "t").Pool)
	})
}

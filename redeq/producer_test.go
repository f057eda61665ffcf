package redeq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

func TestAddGetDelete(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		job := &redeq.Job{Topic: "order.close", ID: "42", Body: []byte("order 42"), Delay: time.Hour,
			MaxRetries: 5, RetryIntervals: []time.Duration{time.Second, time.Minute}}
		require.NoError(t, e.c.Add(ctx, job))

		got, err := e.c.Get(ctx, "order.close", "42")
		require.NoError(t, err)
		require.Equal(t, []byte("order 42"), got.Body)
		require.Equal(t, redeq.StateScheduled, got.State)
		require.Equal(t, 5, got.MaxRetries)
		require.Equal(t, []time.Duration{time.Second, time.Minute}, got.RetryIntervals)
		require.Zero(t, got.Attempt)
		// Due an hour after creation, by the server's clock, never earlier.
		require.GreaterOrEqual(t, got.RunAt.Sub(got.CreatedAt), time.Hour)
		require.Less(t, got.RunAt.Sub(got.CreatedAt), time.Hour+5*time.Millisecond)

		err = e.c.Add(ctx, &redeq.Job{Topic: "order.close", ID: "42"})
		require.ErrorIs(t, err, redeq.ErrJobExists)

		del, err := e.c.Delete(ctx, "order.close", "42")
		require.NoError(t, err)
		require.Equal(t, []byte("order 42"), del.Body)

		_, err = e.c.Get(ctx, "order.close", "42")
		require.ErrorIs(t, err, redeq.ErrJobNotFound)
		_, err = e.c.Delete(ctx, "order.close", "42")
		require.ErrorIs(t, err, redeq.ErrJobNotFound)

		st, err := e.c.Stats(ctx, "order.close")
		require.NoError(t, err)
		require.Zero(t, st.Pool)
		require.Zero(t, st.Scheduled)

		// The id is free again.
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "order.close", ID: "42", Delay: time.Hour}))
	})
}

func TestAddAssignsID(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		job := &redeq.Job{Topic: "t", Body: nil}
		require.NoError(t, e.c.Add(ctx, job))
		require.Len(t, job.ID, 36)
		got, err := e.c.Get(ctx, "t", job.ID)
		require.NoError(t, err)
		require.Equal(t, []byte{}, got.Body)
	})
}

func TestRunAtIsAbsolute(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		at := time.Now().Add(48 * time.Hour).Truncate(time.Millisecond)
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "a", RunAt: at, Delay: time.Second}))
		got, err := e.c.Get(ctx, "t", "a")
		require.NoError(t, err)
		require.True(t, got.RunAt.Equal(at), "RunAt %v, want %v", got.RunAt, at)
		// A sub-millisecond RunAt rounds up, never down.
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "b", RunAt: at.Add(300 * time.Microsecond)}))
		got, err = e.c.Get(ctx, "t", "b")
		require.NoError(t, err)
		require.True(t, got.RunAt.Equal(at.Add(time.Millisecond)))
	})
}

func TestReschedule(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "a", Delay: time.Hour}))
		for _, at := range []time.Time{time.Now().Add(2 * time.Hour), time.Now().Add(time.Minute)} {
			at = at.Truncate(time.Millisecond)
			require.NoError(t, e.c.Reschedule(ctx, "t", "a", at))
			got, err := e.c.Get(ctx, "t", "a")
			require.NoError(t, err)
			require.True(t, got.RunAt.Equal(at))
		}
		err := e.c.Reschedule(ctx, "t", "missing", time.Now())
		require.ErrorIs(t, err, redeq.ErrJobNotFound)
		require.ErrorIs(t, e.c.Reschedule(ctx, "t", "a", time.Time{}), redeq.ErrInvalidArgument)
	})
}

func TestAddBatch(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "taken", Delay: time.Hour}))
		jobs := []*redeq.Job{
			{Topic: "t", ID: "a", Delay: time.Hour},
			{Topic: "t", ID: "taken", Delay: time.Hour},
			{Topic: "bad topic", ID: "b"},
			{Topic: "t", ID: "c", Delay: -time.Second},
			{Topic: "t", Delay: time.Hour},
			{Topic: "u", ID: "d", Delay: time.Hour},
		}
		err := e.c.AddBatch(ctx, jobs)
		var be *redeq.BatchError
		require.ErrorAs(t, err, &be)
		require.ErrorIs(t, err, redeq.ErrJobExists)
		require.ErrorIs(t, err, redeq.ErrInvalidJob)
		require.Len(t, be.Errs, len(jobs))
		require.NoError(t, be.Errs[0])
		require.ErrorIs(t, be.Errs[1], redeq.ErrJobExists)
		require.ErrorIs(t, be.Errs[2], redeq.ErrInvalidJob)
		require.ErrorIs(t, be.Errs[3], redeq.ErrInvalidJob)
		require.NoError(t, be.Errs[4])
		require.NoError(t, be.Errs[5])
		require.NotEmpty(t, jobs[4].ID)
		for _, j := range []*redeq.Job{jobs[0], jobs[4], jobs[5]} {
			_, err := e.c.Get(ctx, j.Topic, j.ID)
			require.NoError(t, err, j.ID)
		}
		_, err = e.c.Get(ctx, "t", "c")
		require.ErrorIs(t, err, redeq.ErrJobNotFound)

		many := make([]*redeq.Job, 500)
		for i := range many {
			many[i] = &redeq.Job{Topic: "t", ID: fmt.Sprintf("m%d", i), Delay: time.Hour}
		}
		require.NoError(t, e.c.AddBatch(ctx, many))
		st, err := e.c.Stats(ctx, "t")
		require.NoError(t, err)
		require.EqualValues(t, 503, st.Pool)
		require.EqualValues(t, 503, st.Scheduled)
	})
}

// TestRejectedWritesNothing: every kind of bad input is ErrInvalidJob,
// wrapped with what is wrong, and leaves the keyspace as it was.
func TestRejectedWritesNothing(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "exists", Delay: time.Hour}))
		before := testutil.Dump(t, e.rdb, e.cfg.Prefix)
		long := strings.Repeat("x", config.MaxName+1)
		cases := []struct {
			name string
			job  *redeq.Job
			want string
		}{
			{"nil job", nil, "nil job"},
			{"empty topic", &redeq.Job{ID: "a"}, "topic is empty"},
			{"brace in topic", &redeq.Job{Topic: "a{b", ID: "a"}, "topic"},
			{"close brace in topic", &redeq.Job{Topic: "a}b", ID: "a"}, "topic"},
			{"space in topic", &redeq.Job{Topic: "a b", ID: "a"}, "topic"},
			{"tab in id", &redeq.Job{Topic: "t", ID: "a\tb"}, "id"},
			{"newline in id", &redeq.Job{Topic: "t", ID: "a\nb"}, "id"},
			{"control in id", &redeq.Job{Topic: "t", ID: "a\x01b"}, "id"},
			{"brace in id", &redeq.Job{Topic: "t", ID: "{x}"}, "id"},
			{"long topic", &redeq.Job{Topic: long, ID: "a"}, "longer than 200"},
			{"long id", &redeq.Job{Topic: "t", ID: long}, "longer than 200"},
			{"negative delay", &redeq.Job{Topic: "t", ID: "a", Delay: -time.Millisecond}, "negative Delay"},
			{"retries below -1", &redeq.Job{Topic: "t", ID: "a", MaxRetries: -2}, "MaxRetries"},
			{"zero interval", &redeq.Job{Topic: "t", ID: "a", RetryIntervals: []time.Duration{time.Second, 0}}, "RetryIntervals[1]"},
			{"negative interval", &redeq.Job{Topic: "t", ID: "a", RetryIntervals: []time.Duration{-time.Second}}, "RetryIntervals[0]"},
			{"empty intervals", &redeq.Job{Topic: "t", ID: "a", RetryIntervals: []time.Duration{}}, "RetryIntervals is empty"},
			{"body too large", &redeq.Job{Topic: "t", ID: "a", Body: make([]byte, e.cfg.MaxBodyBytes+1)}, "over MaxBodyBytes"},
		}
		for _, tc := range cases {
			err := e.c.Add(ctx, tc.job)
			require.ErrorIs(t, err, redeq.ErrInvalidJob, tc.name)
			require.Contains(t, err.Error(), tc.want, tc.name)
			if tc.job != nil {
				err = e.c.AddBatch(ctx, []*redeq.Job{tc.job})
				require.ErrorIs(t, err, redeq.ErrInvalidJob, tc.name)
			}
		}
		//lint:ignore SA1012 a nil context is the bad input under test
		require.ErrorIs(t, e.c.Add(nil, &redeq.Job{Topic: "t", ID: "a"}), redeq.ErrInvalidArgument) //nolint:staticcheck
		require.ErrorIs(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "exists"}), redeq.ErrJobExists)
		_, err := e.c.Get(ctx, "t", "")
		require.ErrorIs(t, err, redeq.ErrInvalidJob)
		_, err = e.c.Delete(ctx, "", "a")
		require.ErrorIs(t, err, redeq.ErrInvalidJob)
		require.Equal(t, before, testutil.Dump(t, e.rdb, e.cfg.Prefix))
	})
}

func TestPoolFull(t *testing.T) {
	t.Parallel()
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			cfg := testutil.Config(t)
			cfg.MaxPool = 3
			e := setup(t, be, cfg)
			ctx := context.Background()
			for i := range 3 {
				require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint(i), Delay: time.Hour}))
			}
			before := testutil.Dump(t, e.rdb, e.cfg.Prefix)
			require.ErrorIs(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "x", Delay: time.Hour}), redeq.ErrPoolFull)
			require.ErrorIs(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "1", Delay: time.Hour}), redeq.ErrJobExists)
			require.Equal(t, before, testutil.Dump(t, e.rdb, e.cfg.Prefix))
		})
	}
}

func TestBucketMismatch(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "a", Delay: time.Hour}))
		before := testutil.Dump(t, e.rdb, e.cfg.Prefix)
		other := e.another(t, func(c *config.Config) { c.Concurrency = 8 })
		err := other.Add(ctx, &redeq.Job{Topic: "t", ID: "b", Delay: time.Hour})
		require.ErrorIs(t, err, redeq.ErrBucketMismatch)
		var me *redeq.MismatchError
		require.True(t, errors.As(err, &me))
		require.Equal(t, 1, me.Stored)
		require.Equal(t, 8, me.Configured)
		require.Equal(t, before, testutil.Dump(t, e.rdb, e.cfg.Prefix))
		// Lookups use the recorded count, so the other client still finds jobs.
		got, err := other.Get(ctx, "t", "a")
		require.NoError(t, err)
		require.Equal(t, "a", got.ID)
	})
}

// TestKeyLayout checks the keys of the design: one hash tag per bucket,
// the topic registered, the bucket count recorded.
func TestKeyLayout(t *testing.T) {
	t.Parallel()
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			cfg := testutil.Config(t)
			cfg.Concurrency = 4
			e := setup(t, be, cfg)
			ctx := context.Background()
			for i := range 40 {
				require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "orders", ID: fmt.Sprint(i), Delay: time.Hour}))
			}
			p := e.cfg.Prefix
			var want []string
			for b := range 4 {
				k := keys.ForBucket(p, "orders", b)
				want = append(want, k.Pool(), k.Scheduled())
			}
			want = append(want, keys.ForTopic(p, "orders").Meta(), keys.Topics(p))
			var got []string
			for _, k := range testutil.Keys(t, e.rdb, p) {
				if !strings.Contains(k, "}:op:") { // replies kept 30 s for reruns
					got = append(got, k)
				}
			}
			require.ElementsMatch(t, want, got)
			require.Equal(t, p+":{orders#3}:pool", keys.ForBucket(p, "orders", 3).Pool())
			n, err := e.rdb.HGet(ctx, keys.ForTopic(p, "orders").Meta(), "buckets").Int()
			require.NoError(t, err)
			require.Equal(t, 4, n)
			topics, err := e.rdb.SMembers(ctx, keys.Topics(p)).Result()
			require.NoError(t, err)
			require.Equal(t, []string{"orders"}, topics)
		})
	}
}

// TestEnvelopeIsCompact: the body is stored as given, with a short header.
func TestEnvelopeIsCompact(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		body := []byte(strings.Repeat("b", 100))
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "a", Body: body, Delay: time.Hour}))
		v, err := e.rdb.HGet(ctx, keys.ForBucket(e.cfg.Prefix, "t", 0).Pool(), "a").Result()
		require.NoError(t, err)
		require.True(t, strings.HasSuffix(v, string(body)))
		require.LessOrEqual(t, len(v)-len(body), 24, "header %q", v[:len(v)-len(body)])
	})
}

func TestNewRejectsBadConfig(t *testing.T) {
	t.Parallel()
	be := testutil.Backends(t)[0]
	cfg := testutil.Config(t)
	cfg.Concurrency = 6
	_, err := redeq.New(be.New(t), cfg)
	require.ErrorContains(t, err, "Concurrency 6 is not a power of two (use 4 or 8)")
	_, err = redeq.New(nil, config.Default())
	require.Error(t, err)
}

// TestDeadJobKeepsItsID: a dead job keeps its id, so an Add of that id is
// ErrJobExists; with ReplaceDead the Add replaces the dead job with a
// fresh one (attempts 0), which runs, while a job of the id that is not
// dead still makes the Add fail. Options given to Add set the job's
// fields; a nil option is refused and writes nothing.
func TestDeadJobKeepsItsID(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		runs := make(chan string, 4)
		l := newListener("deadid", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			runs <- string(job.Body)
			if string(job.Body) == "fails" {
				return redeq.SkipRetry(errors.New("fails"))
			}
			ch.Ack()
			return nil
		})
		startWith(t, e.c, l)
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "deadid", ID: "j", Body: []byte("fails")}))
		require.Equal(t, "fails", <-runs)
		testutil.Eventually(t, 5*time.Second, "dead", func() bool { return stats(t, e.c, "deadid").Dead == 1 })

		err := e.c.Add(ctx, &redeq.Job{Topic: "deadid", ID: "j", Body: []byte("again")})
		require.ErrorIs(t, err, redeq.ErrJobExists, "a dead job keeps its id")
		_, err = redeq.AddTyped(ctx, e.c, "deadid", "j", "typed", 0)
		require.ErrorIs(t, err, redeq.ErrJobExists)
		err = e.c.Add(ctx, &redeq.Job{Topic: "deadid", ID: "j", Body: []byte("again")}, nil)
		require.ErrorIs(t, err, redeq.ErrInvalidArgument)

		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "deadid", ID: "j", Body: []byte("again")}, redeq.ReplaceDead(),
			redeq.WithHeader("v", "2")))
		require.Equal(t, "again", <-runs, "the replacement runs")
		testutil.Eventually(t, 5*time.Second, "acked", func() bool { return stats(t, e.c, "deadid").Pool == 0 })

		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "deadid", ID: "w", Delay: time.Hour}))
		err = e.c.Add(ctx, &redeq.Job{Topic: "deadid", ID: "w", Body: []byte("x")}, redeq.ReplaceDead())
		require.ErrorIs(t, err, redeq.ErrJobExists, "ReplaceDead replaces dead jobs only")
		_, err = redeq.AddTyped(ctx, e.c, "deadid", "w", "x", 0, redeq.ReplaceDead())
		require.ErrorIs(t, err, redeq.ErrJobExists)
		job, err := e.c.Get(ctx, "deadid", "w")
		require.NoError(t, err)
		require.Empty(t, job.Body, "the waiting job is left as it was")
		require.Equal(t, int64(0), stats(t, e.c, "deadid").Dead)

		o := &redeq.Job{Topic: "deadid", ID: "o", Delay: time.Hour}
		require.NoError(t, e.c.Add(ctx, o, redeq.WithHeader("v", "2"), redeq.WithJobRetry(2)))
		job, err = e.c.Get(ctx, "deadid", "o")
		require.NoError(t, err)
		require.Equal(t, map[string]string{"v": "2"}, job.Headers, "Add's options set the job's fields")
		require.Equal(t, 2, job.MaxRetries)
	})
}

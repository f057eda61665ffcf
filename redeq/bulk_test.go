package redeq_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// parkAll adds the jobs named to topic "t" and runs a worker until each is
// parked: ids starting with "d" die, the others go to un_ack.
func parkAll(t *testing.T, e *env, ids ...string) {
	t.Helper()
	ctx := context.Background()
	var jobs []*redeq.Job
	for _, id := range ids {
		jobs = append(jobs, &redeq.Job{Topic: "t", ID: id})
	}
	require.NoError(t, e.c.AddBatch(ctx, jobs))
	w := e.another(t, nil)
	startWith(t, w, newListener("t", func(_ context.Context, j *redeq.Job, _ *redeq.Channel) error {
		if strings.HasPrefix(j.ID, "d") {
			return redeq.SkipRetry(errors.New("bad " + j.ID))
		}
		return nil
	}))
	testutil.Eventually(t, 10*time.Second, "parked", func() bool {
		for _, id := range ids {
			j, err := e.c.Get(ctx, "t", id)
			if err != nil || (j.State != redeq.StateDead && j.State != redeq.StateUnAck) {
				return false
			}
		}
		return true
	})
	require.NoError(t, w.Shutdown(ctx))
}

func stateOf(t *testing.T, c *redeq.Client, id string) redeq.State {
	t.Helper()
	j, err := c.Get(context.Background(), "t", id)
	if errors.Is(err, redeq.ErrJobNotFound) {
		return "gone"
	}
	require.NoError(t, err)
	return j.State
}

// TestBulkActsOnTheIdsItIsGiven: RequeueUnAckJobs, RequeueDeadJobs and
// PurgeDeadJobs act once on each id given that is still where they look,
// count the others as skipped, and leave every job they were not given
// alone; a call with a bad argument writes nothing.
func TestBulkActsOnTheIdsItIsGiven(t *testing.T) {
	t.Parallel()
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			cfg := testutil.Config(t)
			cfg.Concurrency = 4
			e := setup(t, be, cfg)
			ctx := context.Background()
			parkAll(t, e, "u1", "u2", "u3", "d1", "d2", "d3", "d4")

			t.Run("RejectsBadArgumentsWritingNothing", func(t *testing.T) {
				_, err := e.c.RequeueUnAckJobs(ctx, "t", []string{"u1", ""}, 0)
				require.ErrorIs(t, err, redeq.ErrInvalidJob)
				_, err = e.c.PurgeDeadJobs(ctx, "t", []string{"d1", strings.Repeat("x", 10_000)})
				require.ErrorIs(t, err, redeq.ErrInvalidJob)
				_, err = e.c.RequeueDeadJobs(ctx, "t", []string{"d1"}, -time.Second)
				require.ErrorIs(t, err, redeq.ErrInvalidArgument)
				require.ErrorContains(t, err, "negative delay")
				many := make([]string, redeq.MaxBulk+1)
				for i := range many {
					many[i] = fmt.Sprint("d", i)
				}
				many[0] = "d1"
				_, err = e.c.PurgeDeadJobs(ctx, "t", many)
				require.ErrorIs(t, err, redeq.ErrInvalidArgument)
				require.ErrorContains(t, err, "at most 1000")
				_, err = e.c.PurgeDeadJobs(ctx, "never", []string{"d1"})
				require.ErrorIs(t, err, redeq.ErrUnknownTopic)
				_, err = e.c.PurgeDeadJobs(ctx, "bad topic", []string{"d1"})
				require.ErrorIs(t, err, redeq.ErrInvalidJob)
				for _, id := range []string{"u1", "d1"} {
					require.NotEqual(t, redeq.State("gone"), stateOf(t, e.c, id), id)
					require.Contains(t, []redeq.State{redeq.StateUnAck, redeq.StateDead}, stateOf(t, e.c, id), id)
				}
			})

			t.Run("RequeuesEachParkedIDOnce", func(t *testing.T) {
				r, err := e.c.RequeueUnAckJobs(ctx, "t", []string{"u1", "u2", "u1", "d1", "missing"}, time.Hour)
				require.NoError(t, err)
				require.Equal(t, redeq.BulkResult{Done: 2, Skipped: 2}, r, "u1 given twice counts once; d1 is not in un_ack; missing is not there")
				for _, id := range []string{"u1", "u2"} {
					j, err := e.c.Get(ctx, "t", id)
					require.NoError(t, err)
					require.Equal(t, redeq.StateScheduled, j.State, id)
					require.WithinDuration(t, time.Now().Add(time.Hour), j.RunAt, time.Minute)
				}
				require.Equal(t, redeq.StateUnAck, stateOf(t, e.c, "u3"), "not given")
				require.Equal(t, redeq.StateDead, stateOf(t, e.c, "d1"))

				r, err = e.c.RequeueDeadJobs(ctx, "t", []string{"d1", "u3"}, time.Hour)
				require.NoError(t, err)
				require.Equal(t, redeq.BulkResult{Done: 1, Skipped: 1}, r)
				j, err := e.c.Get(ctx, "t", "d1")
				require.NoError(t, err)
				require.Equal(t, redeq.StateScheduled, j.State)
				require.Zero(t, j.Attempt, "a requeued dead job starts its attempts again")
			})

			t.Run("PurgesOnlyTheNamedDeadJobs", func(t *testing.T) {
				r, err := e.c.PurgeDeadJobs(ctx, "t", []string{"d2", "d3", "u3", "d1"})
				require.NoError(t, err)
				require.Equal(t, redeq.BulkResult{Done: 2, Skipped: 2}, r, "u3 is parked, not dead; d1 was requeued")
				for _, id := range []string{"d2", "d3"} {
					require.Equal(t, redeq.State("gone"), stateOf(t, e.c, id), id)
				}
				require.Equal(t, redeq.StateDead, stateOf(t, e.c, "d4"), "not named")
				require.Equal(t, redeq.StateUnAck, stateOf(t, e.c, "u3"))
				require.Equal(t, redeq.StateScheduled, stateOf(t, e.c, "d1"))
				require.EqualValues(t, 1, stats(t, e.c, "t").Dead)

				r, err = e.c.PurgeDeadJobs(ctx, "t", nil)
				require.NoError(t, err)
				require.Zero(t, r)
			})
		})
	}
}

// TestBulkCallsWithMarksSpareAJobAddedOrParkedAgain: given the marks of
// the jobs they listed (SelectMarks, Job.Mark), RequeueUnAckJobs,
// RequeueDeadJobs, PurgeDeadJobs, DeleteJobs and RequeueJobs act on those
// stays only: a job of a listed id deleted and added again, or requeued
// and parked again, since the listing is left as it is and counted as
// Changed, while the other listed jobs are acted on; given the same marks
// again, they act on no job twice; a bad mark writes nothing.
func TestBulkCallsWithMarksSpareAJobAddedOrParkedAgain(t *testing.T) {
	t.Parallel()
	type call func(ctx context.Context, c *redeq.Client, ids []string, marks map[string]string) (redeq.BulkResult, error)
	calls := []struct {
		name  string
		state redeq.State
		do    call
		after redeq.State // of the listed job acted on
	}{
		{"RequeueUnAckJobs", redeq.StateUnAck, func(ctx context.Context, c *redeq.Client, ids []string, m map[string]string) (redeq.BulkResult, error) {
			return c.RequeueUnAckJobs(ctx, "t", ids, time.Hour, redeq.Marks(m))
		}, redeq.StateScheduled},
		{"RequeueDeadJobs", redeq.StateDead, func(ctx context.Context, c *redeq.Client, ids []string, m map[string]string) (redeq.BulkResult, error) {
			return c.RequeueDeadJobs(ctx, "t", ids, time.Hour, redeq.Marks(m))
		}, redeq.StateScheduled},
		{"PurgeDeadJobs", redeq.StateDead, func(ctx context.Context, c *redeq.Client, ids []string, m map[string]string) (redeq.BulkResult, error) {
			return c.PurgeDeadJobs(ctx, "t", ids, redeq.Marks(m))
		}, "gone"},
		{"DeleteJobs/unack", redeq.StateUnAck, func(ctx context.Context, c *redeq.Client, ids []string, m map[string]string) (redeq.BulkResult, error) {
			return c.DeleteJobs(ctx, "t", redeq.StateUnAck, ids, redeq.Marks(m))
		}, "gone"},
		{"RequeueJobs/dead", redeq.StateDead, func(ctx context.Context, c *redeq.Client, ids []string, m map[string]string) (redeq.BulkResult, error) {
			return c.RequeueJobs(ctx, "t", redeq.StateDead, ids, time.Hour, redeq.Marks(m))
		}, redeq.StateScheduled},
	}
	for _, be := range testutil.Backends(t) {
		for _, how := range []string{"readded", "requeued"} {
			for _, tc := range calls {
				t.Run(be.Name+"/"+how+"/"+tc.name, func(t *testing.T) {
					cfg := testutil.Config(t)
					cfg.Concurrency = 4
					e := setup(t, be, cfg)
					ctx := context.Background()
					p := "u"
					if tc.state == redeq.StateDead {
						p = "d"
					}
					a, b := p+"1", p+"2"
					parkAll(t, e, a, b)
					ids, marks, err := e.c.SelectMarks(ctx, "t", tc.state, redeq.Filter{}, 0)
					require.NoError(t, err)
					require.ElementsMatch(t, []string{a, b}, ids)
					old, err := e.c.Get(ctx, "t", a)
					require.NoError(t, err)
					require.Equal(t, old.Mark(), marks[a], "Get and SelectMarks give one mark")

					// a is parked again after the listing.
					if how == "readded" {
						_, err := e.c.Delete(ctx, "t", a)
						require.NoError(t, err)
						testutil.Eventually(t, 10*time.Second, "a new created time", func() bool {
							now, err := e.c.ServerTime(ctx)
							require.NoError(t, err)
							return now.After(old.CreatedAt)
						})
						parkAll(t, e, a)
					} else {
						testutil.Eventually(t, 10*time.Second, "a new parked time", func() bool {
							now, err := e.c.ServerTime(ctx)
							require.NoError(t, err)
							return now.After(old.RunAt)
						})
						if tc.state == redeq.StateDead {
							require.NoError(t, e.c.RequeueDead(ctx, "t", a, 0))
						} else {
							require.NoError(t, e.c.RequeueUnAck(ctx, "t", a, 0))
						}
						w := e.another(t, nil)
						startWith(t, w, newListener("t", func(_ context.Context, j *redeq.Job, _ *redeq.Channel) error {
							if strings.HasPrefix(j.ID, "d") {
								return redeq.SkipRetry(errors.New("bad again"))
							}
							return nil
						}))
						testutil.Eventually(t, 10*time.Second, "parked again", func() bool {
							j, err := e.c.Get(ctx, "t", a)
							return err == nil && j.State == tc.state && !j.RunAt.Equal(old.RunAt)
						})
						require.NoError(t, w.Shutdown(ctx))
					}
					now, err := e.c.Get(ctx, "t", a)
					require.NoError(t, err)
					require.NotEqual(t, marks[a], now.Mark())

					r, err := tc.do(ctx, e.c, ids, marks)
					require.NoError(t, err)
					require.Equal(t, redeq.BulkResult{Done: 1, Changed: 1}, r)
					require.Equal(t, tc.after, stateOf(t, e.c, b), "the listed %s", b)
					require.Equal(t, tc.state, stateOf(t, e.c, a), "%s, %s after the listing, stays", a, how)

					r, err = tc.do(ctx, e.c, ids, marks)
					require.NoError(t, err)
					require.Equal(t, redeq.BulkResult{Skipped: 1, Changed: 1}, r, "the same marks again act on nothing")
					require.Equal(t, tc.after, stateOf(t, e.c, b))
					require.Equal(t, tc.state, stateOf(t, e.c, a))

					bad := map[string]string{a: now.Mark(), b: "not a mark"}
					_, err = tc.do(ctx, e.c, []string{a, b}, bad)
					require.ErrorIs(t, err, redeq.ErrInvalidArgument)
					require.ErrorContains(t, err, `job "`+b+`": `)
					require.ErrorContains(t, err, `mark "not a mark"`)
					require.Equal(t, tc.state, stateOf(t, e.c, a), "a call with a bad mark writes nothing")
				})
			}
		}
	}
}

// TestBulkCallsWithMarksSpareAWaitingJobAddedAgain: DeleteJobs and
// RequeueJobs given the marks SelectMarks took of scheduled jobs act on
// those jobs only: a job of a listed id deleted and added again since is
// left as it is and counted as Changed; a parked job's mark is refused for
// a waiting job, before anything is written.
func TestBulkCallsWithMarksSpareAWaitingJobAddedAgain(t *testing.T) {
	t.Parallel()
	for _, be := range testutil.Backends(t) {
		for _, op := range []string{"delete", "requeue"} {
			t.Run(be.Name+"/"+op, func(t *testing.T) {
				e := setup(t, be, testutil.Config(t))
				ctx := context.Background()
				for _, id := range []string{"s1", "s2"} {
					require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: id, Delay: time.Hour}))
				}
				ids, marks, err := e.c.SelectMarks(ctx, "t", redeq.StateScheduled, redeq.Filter{}, 0)
				require.NoError(t, err)
				require.ElementsMatch(t, []string{"s1", "s2"}, ids)
				old, err := e.c.Get(ctx, "t", "s1")
				require.NoError(t, err)
				require.Equal(t, old.Mark(), marks["s1"])
				_, err = e.c.Delete(ctx, "t", "s1")
				require.NoError(t, err)
				testutil.Eventually(t, 10*time.Second, "a new created time", func() bool {
					now, err := e.c.ServerTime(ctx)
					require.NoError(t, err)
					return now.After(old.CreatedAt)
				})
				require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "s1", Delay: 2 * time.Hour}))
				readded, err := e.c.Get(ctx, "t", "s1")
				require.NoError(t, err)

				do := func(ids []string, m map[string]string) (redeq.BulkResult, error) {
					if op == "delete" {
						return e.c.DeleteJobs(ctx, "t", redeq.StateScheduled, ids, redeq.Marks(m))
					}
					return e.c.RequeueJobs(ctx, "t", redeq.StateScheduled, ids, time.Minute, redeq.Marks(m))
				}
				_, err = do([]string{"s1"}, map[string]string{"s1": readded.Mark() + ":5"})
				require.ErrorIs(t, err, redeq.ErrInvalidArgument)
				require.ErrorContains(t, err, "a parked job's")

				r, err := do(ids, marks)
				require.NoError(t, err)
				require.Equal(t, redeq.BulkResult{Done: 1, Changed: 1}, r)
				now, err := e.c.Get(ctx, "t", "s1")
				require.NoError(t, err)
				require.Equal(t, readded.RunAt, now.RunAt, "s1, added again after the listing, is left as it is")
				if op == "delete" {
					require.Equal(t, redeq.State("gone"), stateOf(t, e.c, "s2"))
				} else {
					j, err := e.c.Get(ctx, "t", "s2")
					require.NoError(t, err)
					require.WithinDuration(t, time.Now().Add(time.Minute), j.RunAt, 30*time.Second)
				}
			})
		}
	}
}

// seedStates adds jobs to topic "t" and runs a worker until each waits
// where its id says: "s" scheduled (due in 1h, 2h ... by its number), "r"
// scheduled again after a failure "partner timeout" (attempt 1, due in
// 1h), "d" dead ("bad payload"), "u" un_acked.
func seedStates(t *testing.T, e *env, ids ...string) {
	t.Helper()
	ctx := context.Background()
	var jobs, later []*redeq.Job
	for _, id := range ids {
		j := &redeq.Job{Topic: "t", ID: id, RetryIntervals: []time.Duration{time.Hour}}
		if id[0] == 's' {
			n := 0
			fmt.Sscan(id[1:], &n)
			j.Delay = time.Duration(n) * time.Hour
			later = append(later, j)
			continue
		}
		jobs = append(jobs, j)
	}
	require.NoError(t, e.c.AddBatch(ctx, jobs))
	w := e.another(t, nil)
	startWith(t, w, newListener("t", func(_ context.Context, j *redeq.Job, _ *redeq.Channel) error {
		switch j.ID[0] {
		case 'r':
			return errors.New("partner timeout")
		case 'd':
			return redeq.SkipRetry(errors.New("bad payload"))
		}
		return nil
	}))
	testutil.Eventually(t, 10*time.Second, "seeded", func() bool {
		for _, j := range jobs {
			want := map[byte]redeq.State{'r': redeq.StateScheduled, 'd': redeq.StateDead, 'u': redeq.StateUnAck}[j.ID[0]]
			got, err := e.c.Get(ctx, "t", j.ID)
			if err != nil || got.State != want || (j.ID[0] == 'r' && got.Attempt != 1) {
				return false
			}
		}
		return true
	})
	require.NoError(t, w.Shutdown(ctx))
	if len(later) > 0 {
		require.NoError(t, e.c.AddBatch(ctx, later))
	}
}

func selectIDs(t *testing.T, c *redeq.Client, state redeq.State, f redeq.Filter) []string {
	t.Helper()
	ids, err := c.Select(context.Background(), "t", state, f, 0)
	require.NoError(t, err)
	slices.Sort(ids)
	return ids
}

// TestBulkOnEveryState: Select takes the ids of a state's jobs that match
// a filter (error text, attempt, due time); DeleteJobs and RequeueJobs act
// on scheduled, ready, un_acked and dead jobs by those ids, each id once,
// skipping and counting those that left; a bad call writes nothing; a call
// stopped by an error is resumed by running it again with the same ids.
func TestBulkOnEveryState(t *testing.T) {
	t.Parallel()
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			cfg := testutil.Config(t)
			cfg.Concurrency = 4
			e := setup(t, be, cfg)
			ctx := context.Background()
			seedStates(t, e, "s1", "s2", "s3", "r1", "r2", "d1", "d2", "u1", "u2")
			now := time.Now()

			t.Run("SelectMatchesEveryFilter", func(t *testing.T) {
				all := []string{"r1", "r2", "s1", "s2", "s3"}
				require.Equal(t, all, selectIDs(t, e.c, redeq.StateScheduled, redeq.Filter{}))
				require.Equal(t, []string{"r1", "r2"}, selectIDs(t, e.c, redeq.StateScheduled, redeq.Filter{MinAttempt: 1}), "retrying jobs")
				require.Equal(t, []string{"r1", "r2"}, selectIDs(t, e.c, redeq.StateScheduled, redeq.Filter{ErrorContains: "partner"}))
				require.Empty(t, selectIDs(t, e.c, redeq.StateScheduled, redeq.Filter{ErrorContains: "Partner"}), "case-sensitive")
				require.Equal(t, []string{"r1", "r2", "s1"}, selectIDs(t, e.c, redeq.StateScheduled, redeq.Filter{DueBefore: now.Add(90 * time.Minute)}))
				require.Equal(t, []string{"s2", "s3"}, selectIDs(t, e.c, redeq.StateScheduled, redeq.Filter{DueAfter: now.Add(90 * time.Minute)}))
				require.Equal(t, []string{"s2"}, selectIDs(t, e.c, redeq.StateScheduled, redeq.Filter{DueAfter: now.Add(90 * time.Minute), DueBefore: now.Add(150 * time.Minute)}))
				require.Equal(t, []string{"d1", "d2"}, selectIDs(t, e.c, redeq.StateDead, redeq.Filter{ErrorContains: "bad pay"}))
				require.Equal(t, []string{"u1", "u2"}, selectIDs(t, e.c, redeq.StateUnAck, redeq.Filter{DueBefore: time.Now().Add(time.Second)}), "parked before now")
				require.Empty(t, selectIDs(t, e.c, redeq.StateUnAck, redeq.Filter{CreatedBefore: now.Add(-time.Hour)}))
				ids, err := e.c.Select(ctx, "t", redeq.StateScheduled, redeq.Filter{}, 2)
				require.NoError(t, err)
				require.Len(t, ids, 2, "limit")
			})

			t.Run("RejectsBadArgumentsWritingNothing", func(t *testing.T) {
				before := testutil.Dump(t, e.rdb, e.cfg.Prefix)
				_, err := e.c.Select(ctx, "t", redeq.StateInFlight, redeq.Filter{}, 0)
				require.ErrorIs(t, err, redeq.ErrInvalidArgument)
				require.ErrorContains(t, err, `state "inflight" is not one of scheduled, ready, unack, dead`)
				_, err = e.c.Select(ctx, "t", redeq.StateDead, redeq.Filter{MinAttempt: -1}, 0)
				require.ErrorContains(t, err, "MinAttempt -1 is negative")
				_, err = e.c.Select(ctx, "t", redeq.StateDead, redeq.Filter{DueAfter: now, DueBefore: now}, 0)
				require.ErrorContains(t, err, "no job can match")
				_, err = e.c.Select(ctx, "t", redeq.StateDead, redeq.Filter{}, redeq.MaxSelect+1)
				require.ErrorIs(t, err, redeq.ErrInvalidArgument)
				_, err = e.c.Select(ctx, "never", redeq.StateDead, redeq.Filter{}, 0)
				require.ErrorIs(t, err, redeq.ErrUnknownTopic)
				_, err = e.c.DeleteJobs(ctx, "t", redeq.StateInFlight, []string{"s1"})
				require.ErrorIs(t, err, redeq.ErrInvalidArgument)
				_, err = e.c.DeleteJobs(ctx, "t", redeq.StateScheduled, []string{"s1", ""})
				require.ErrorIs(t, err, redeq.ErrInvalidJob)
				_, err = e.c.RequeueJobs(ctx, "t", redeq.StateReady, []string{"s1"}, 0)
				require.ErrorContains(t, err, "ready jobs are due already")
				_, err = e.c.RequeueJobs(ctx, "t", redeq.StateScheduled, []string{"s1"}, -time.Second)
				require.ErrorContains(t, err, "negative delay")
				require.Equal(t, before, testutil.Dump(t, e.rdb, e.cfg.Prefix))
			})

			t.Run("RunsScheduledJobsNowThenActsOnThemReady", func(t *testing.T) {
				r, err := e.c.RequeueJobs(ctx, "t", redeq.StateScheduled, []string{"s1", "s2", "s1", "d1", "gone"}, 0)
				require.NoError(t, err)
				require.Equal(t, redeq.BulkResult{Done: 2, Skipped: 2}, r, "s1 counts once; d1 is not waiting; gone is gone")
				require.Equal(t, redeq.StateDead, stateOf(t, e.c, "d1"))
				mover := e.another(t, nil) // no listener: it moves due jobs to ready
				require.NoError(t, mover.Start(ctx))
				testutil.Eventually(t, 10*time.Second, "ready", func() bool {
					return stateOf(t, e.c, "s1") == redeq.StateReady && stateOf(t, e.c, "s2") == redeq.StateReady
				})
				require.NoError(t, mover.Shutdown(ctx))
				page, err := e.c.List(ctx, "t", redeq.StateReady, redeq.ListOptions{})
				require.NoError(t, err)
				require.Len(t, page.Jobs, 2)
				for _, j := range page.Jobs {
					require.WithinDuration(t, time.Now(), j.RunAt, time.Minute, "a ready job shows when it fell due")
				}
				require.Equal(t, []string{"s1", "s2"}, selectIDs(t, e.c, redeq.StateReady, redeq.Filter{DueBefore: time.Now().Add(time.Second)}))

				r, err = e.c.RequeueJobs(ctx, "t", redeq.StateReady, []string{"s2"}, time.Hour)
				require.NoError(t, err)
				require.Equal(t, redeq.BulkResult{Done: 1}, r)
				j, err := e.c.Get(ctx, "t", "s2")
				require.NoError(t, err)
				require.Equal(t, redeq.StateScheduled, j.State)
				require.WithinDuration(t, time.Now().Add(time.Hour), j.RunAt, time.Minute)

				r, err = e.c.DeleteJobs(ctx, "t", redeq.StateReady, []string{"s1", "gone"})
				require.NoError(t, err)
				require.Equal(t, redeq.BulkResult{Done: 1, Skipped: 1}, r)
				require.Equal(t, redeq.State("gone"), stateOf(t, e.c, "s1"))
				require.Empty(t, selectIDs(t, e.c, redeq.StateReady, redeq.Filter{}))
			})

			t.Run("ActsOnParkedJobsOnlyWhileParked", func(t *testing.T) {
				r, err := e.c.DeleteJobs(ctx, "t", redeq.StateDead, []string{"d1", "u1"})
				require.NoError(t, err)
				require.Equal(t, redeq.BulkResult{Done: 1, Skipped: 1}, r)
				require.Equal(t, redeq.State("gone"), stateOf(t, e.c, "d1"))
				require.Equal(t, redeq.StateUnAck, stateOf(t, e.c, "u1"))

				r, err = e.c.RequeueJobs(ctx, "t", redeq.StateDead, []string{"d2", "u1"}, 0)
				require.NoError(t, err)
				require.Equal(t, redeq.BulkResult{Done: 1, Skipped: 1}, r)
				j, err := e.c.Get(ctx, "t", "d2")
				require.NoError(t, err)
				require.Equal(t, redeq.StateScheduled, j.State)
				require.Zero(t, j.Attempt, "a requeued dead job starts its attempts again")

				r, err = e.c.RequeueJobs(ctx, "t", redeq.StateUnAck, []string{"u1"}, time.Hour)
				require.NoError(t, err)
				require.Equal(t, redeq.BulkResult{Done: 1}, r)
				r, err = e.c.DeleteJobs(ctx, "t", redeq.StateUnAck, []string{"u1", "u2"})
				require.NoError(t, err)
				require.Equal(t, redeq.BulkResult{Done: 1, Skipped: 1}, r, "u1 was requeued")
				require.Equal(t, redeq.StateScheduled, stateOf(t, e.c, "u1"))
			})

			t.Run("ResumesAfterAnErrorHalfway", func(t *testing.T) {
				var jobs []*redeq.Job
				var ids []string
				for i := range 40 {
					id := fmt.Sprint("x", i)
					ids = append(ids, id)
					jobs = append(jobs, &redeq.Job{Topic: "t", ID: id, Delay: time.Hour})
				}
				require.NoError(t, e.c.AddBatch(ctx, jobs))
				hook := testutil.HookScript(testutil.LoadScript(t, "../pool/delete.lua"))
				hc := e.hooked(t, hook)
				var runs atomic.Int64
				hook.Set(func(_ context.Context, _ []redis.Cmder, next func() error) error {
					if runs.Add(1) > 10 {
						return testutil.ErrUnsent
					}
					return next()
				})
				r, err := hc.DeleteJobs(ctx, "t", redeq.StateScheduled, ids)
				require.ErrorIs(t, err, testutil.ErrUnsent)
				// At most 10 runs went through (a NOSCRIPT answer and its
				// EVAL are two), the rest stopped.
				require.True(t, r.Done > 0 && r.Done <= 10, "the calls before the error are counted: %+v", r)
				hook.Set(nil)
				r2, err := hc.DeleteJobs(ctx, "t", redeq.StateScheduled, ids)
				require.NoError(t, err)
				require.Equal(t, redeq.BulkResult{Done: len(ids) - r.Done, Skipped: r.Done}, r2, "the rerun skips what the first run deleted")
				for _, id := range ids {
					require.Equal(t, redeq.State("gone"), stateOf(t, e.c, id), id)
				}
			})

			t.Run("SelectPagesPastOneListPage", func(t *testing.T) {
				var jobs []*redeq.Job
				for i := range 2*redeq.MaxListLimit + 5 {
					jobs = append(jobs, &redeq.Job{Topic: "t", ID: fmt.Sprint("p", i), Delay: 3 * time.Hour, MaxRetries: 1 + i%2})
				}
				require.NoError(t, e.c.AddBatch(ctx, jobs))
				ids, err := e.c.Select(ctx, "t", redeq.StateScheduled, redeq.Filter{DueAfter: time.Now().Add(170 * time.Minute)}, 0)
				require.NoError(t, err)
				require.Len(t, ids, len(jobs)+1, "the p jobs and s3")
			})
		})
	}
}

package redeq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

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

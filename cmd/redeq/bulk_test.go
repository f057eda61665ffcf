package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// seed adds jobs to topic "orders" and runs a worker until each waits
// where its id says: "s<n>" scheduled in n hours, "r" scheduled again in
// an hour after a failure "partner timeout" (attempt 1), "d" dead ("bad
// payload <id>"), "u" un_acked.
func seed(t *testing.T, e *cliEnv, ids ...string) {
	t.Helper()
	ctx := context.Background()
	var now, later []*redeq.Job
	for _, id := range ids {
		j := &redeq.Job{Topic: "orders", ID: id, RetryIntervals: []time.Duration{time.Hour}}
		if id[0] == 's' {
			n := 0
			fmt.Sscan(id[1:], &n)
			j.Delay = time.Duration(n) * time.Hour
			later = append(later, j)
			continue
		}
		now = append(now, j)
	}
	require.NoError(t, e.c.AddBatch(ctx, now))
	w, err := redeq.New(e.b.New(t), e.c.Config())
	require.NoError(t, err)
	require.NoError(t, w.Register(redeq.ListenerFunc("orders", func(_ context.Context, j *redeq.Job, _ *redeq.Channel) error {
		switch j.ID[0] {
		case 'r':
			return errors.New("partner timeout")
		case 'd':
			return redeq.SkipRetry(errors.New("bad payload " + j.ID))
		}
		return nil
	})))
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { _ = w.Shutdown(context.Background()) })
	for _, j := range now {
		want := map[byte]redeq.State{'r': redeq.StateScheduled, 'd': redeq.StateDead, 'u': redeq.StateUnAck}[j.ID[0]]
		waitFor(t, func() bool {
			got, err := e.c.Get(ctx, "orders", j.ID)
			return err == nil && got.State == want && (j.ID[0] != 'r' || got.Attempt == 1)
		})
	}
	require.NoError(t, w.Shutdown(ctx))
	require.NoError(t, e.c.AddBatch(ctx, later))
}

func (e *cliEnv) gone(t *testing.T, id string) bool {
	t.Helper()
	_, err := e.c.Get(context.Background(), "orders", id)
	if errors.Is(err, redeq.ErrJobNotFound) {
		return true
	}
	require.NoError(t, err)
	return false
}

// TestCLIBulkEveryState: delete, run and requeue with --all --state act
// on the jobs of scheduled, ready, unack and dead that match --error,
// --min-attempt, --due-before and --due-after, and on no other; --dry-run
// counts and changes nothing; delete asks first unless --yes; a bad
// combination of flags is a usage error that changes nothing.
func TestCLIBulkEveryState(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := newEnv(t, b)
			ctx := context.Background()
			seed(t, e, "s1", "s2", "s3", "r1", "d1", "d2", "u1", "u2")
			at := func(d time.Duration) string { return time.Now().Add(d).UTC().Format(time.RFC3339) }

			t.Run("DryRunCountsAndChangesNothing", func(t *testing.T) {
				require.Equal(t, "would delete 1 scheduled jobs of orders with attempt >= 1 (dry run: nothing changed)\n",
					e.ok(t, "delete", "orders", "--all", "--state", "scheduled", "--min-attempt", "1", "--dry-run"))
				var got struct {
					DryRun string `json:"dry_run"`
					State  string
					Count  int
				}
				require.NoError(t, json.Unmarshal([]byte(e.ok(t, "requeue", "orders", "--all", "--state", "dead", "--error", "bad payload", "--dry-run", "-o", "json")), &got))
				require.Equal(t, "requeue", got.DryRun)
				require.Equal(t, "dead", got.State)
				require.Equal(t, 2, got.Count)
				require.Equal(t, redeq.StateScheduled, e.job(t, "orders", "r1").State)
				require.Equal(t, redeq.StateDead, e.job(t, "orders", "d1").State)
			})

			t.Run("DeleteAsksThenDeletesTheMatchingJobs", func(t *testing.T) {
				code, _, errs := e.run(t, "n\n", "delete", "orders", "--all", "--state", "scheduled", "--error", "partner")
				require.Equal(t, 1, code)
				require.Contains(t, errs, `Delete the 1 scheduled jobs of orders with error containing "partner"? [y/N]`)
				require.False(t, e.gone(t, "r1"))
				code, out, errs := e.run(t, "y\n", "delete", "orders", "--all", "--state", "scheduled", "--error", "partner")
				require.Equal(t, 0, code, errs)
				require.Equal(t, "deleted 1 scheduled jobs of orders with error containing \"partner\"\n", out)
				require.True(t, e.gone(t, "r1"))
				require.JSONEq(t, `{"done":"deleted","topic":"orders","state":"dead","count":1,"skipped":0,"changed":0}`,
					e.ok(t, "delete", "orders", "--all", "--state", "dead", "--error", "payload d1", "--yes", "-o", "json"))
				require.True(t, e.gone(t, "d1"))
				require.False(t, e.gone(t, "d2"))
				for _, id := range []string{"s1", "s2", "s3", "u1"} {
					require.False(t, e.gone(t, id), id)
				}
			})

			t.Run("RunAndRequeueByDueTime", func(t *testing.T) {
				require.Equal(t, "run now: 1 scheduled jobs of orders with due before "+at(90*time.Minute)+"\n",
					e.ok(t, "run", "orders", "--all", "--state", "scheduled", "--due-before", at(90*time.Minute)))
				require.WithinDuration(t, time.Now(), e.job(t, "orders", "s1").RunAt, time.Minute)
				e.ok(t, "requeue", "orders", "--all", "--state", "scheduled", "--due-after", at(150*time.Minute), "--in", "10h")
				require.WithinDuration(t, time.Now().Add(10*time.Hour), e.job(t, "orders", "s3").RunAt, time.Minute)
				require.WithinDuration(t, time.Now().Add(2*time.Hour), e.job(t, "orders", "s2").RunAt, time.Minute, "not matched")

				require.Equal(t, "run now: 2 unack jobs of orders\n", e.ok(t, "run", "orders", "--all", "--state", "unack"))
				require.Equal(t, redeq.StateScheduled, e.job(t, "orders", "u1").State)
				require.Equal(t, "requeued 1 dead jobs of orders\n", e.ok(t, "requeue", "dead", "orders", "--all", "--min-attempt", "0", "--in", "5h"))
				j := e.job(t, "orders", "d2")
				require.Equal(t, redeq.StateScheduled, j.State)
				require.WithinDuration(t, time.Now().Add(5*time.Hour), j.RunAt, time.Minute)
			})

			t.Run("ActsOnReadyJobs", func(t *testing.T) {
				mover, err := redeq.New(b.New(t), e.c.Config()) // no listener: moves due jobs to ready
				require.NoError(t, err)
				require.NoError(t, mover.Start(ctx))
				waitFor(t, func() bool {
					return e.job(t, "orders", "s1").State == redeq.StateReady && e.job(t, "orders", "u1").State == redeq.StateReady
				})
				require.NoError(t, mover.Shutdown(ctx))
				out := e.ok(t, "list", "orders", "ready")
				require.Regexp(t, `(?m)^s1\s+ready\s+0\s+\S+\s+20\d\d-`, out, "a ready job shows when it fell due")
				require.Regexp(t, `(?m)^due:\s+20\d\d-`, e.ok(t, "get", "orders", "s1"))

				require.Equal(t, "requeued 0 ready jobs of orders with error containing \"partner\"\n",
					e.ok(t, "requeue", "orders", "--all", "--state", "ready", "--error", "partner", "--in", "1h"))
				e.ok(t, "requeue", "orders", "--all", "--state", "ready", "--in", "1h", "--due-before", at(time.Minute))
				require.Equal(t, redeq.StateScheduled, e.job(t, "orders", "s1").State)
				require.Equal(t, redeq.StateScheduled, e.job(t, "orders", "u1").State)
				require.NoError(t, e.c.RescheduleIn(ctx, "orders", "u2", 0))
				mover, err = redeq.New(b.New(t), e.c.Config())
				require.NoError(t, err)
				require.NoError(t, mover.Start(ctx))
				waitFor(t, func() bool { return e.job(t, "orders", "u2").State == redeq.StateReady })
				require.NoError(t, mover.Shutdown(ctx))
				require.Equal(t, "deleted 1 ready jobs of orders\n", e.ok(t, "delete", "orders", "--all", "--state", "ready", "--yes"))
				require.True(t, e.gone(t, "u2"))
			})

			t.Run("RejectsBadFlagsChangingNothing", func(t *testing.T) {
				st, err := e.c.Stats(ctx, "orders")
				require.NoError(t, err)
				for _, a := range [][]string{
					{"delete", "orders", "--all"},
					{"delete", "orders", "--state", "scheduled"},
					{"delete", "orders", "--error", "x"},
					{"delete", "orders", "s1", "--all", "--state", "scheduled"},
					{"delete", "orders", "--all", "--state", "inflight", "--yes"},
					{"delete", "orders", "--all", "--state", "scheduled", "--due-before", "tomorrow", "--yes"},
					{"delete", "orders", "--all", "--state", "scheduled", "--min-attempt", "-1", "--yes"},
					{"delete", "orders", "--all", "--state", "scheduled", "--due-after", at(time.Hour), "--due-before", at(0), "--yes"},
					{"run", "orders", "--all", "--state", "ready"},
					{"requeue", "orders", "--all", "--state", "ready"},
					{"requeue", "orders", "s1", "--state", "scheduled"},
					{"requeue", "orders", "--dry-run"},
				} {
					code, _, errs := e.run(t, "y\n", a...)
					require.Equal(t, 2, code, "%v: %s", a, errs)
				}
				code, _, _ := e.run(t, "", "delete", "nosuchtopic", "--all", "--state", "dead", "--yes")
				require.Equal(t, 3, code)
				after, err := e.c.Stats(ctx, "orders")
				require.NoError(t, err)
				require.Equal(t, st, after)
			})
		})
	}
}

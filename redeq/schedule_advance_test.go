package redeq

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
)

// TestScheduleAdvanceScript: schedule_advance.lua moves the cursor once
// per plan: the pass that moved it hears 1, again on a rerun, and writes
// nothing more; another pass with the same plan hears 2, one with an old
// cursor 0, one of another generation or of a deleted schedule -1; a bad
// argument is an error that writes nothing.
func TestScheduleAdvanceScript(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			rdb := b.New(t)
			prefix := testutil.Config(t).Prefix
			rec := keys.ForSchedule(prefix, "s").Record()
			require.NoError(t, rdb.HSet(ctx, rec, "gen", "g1", "cursor", "100", "tick", "0", "prevtick", "0", "skipped", "0").Err())
			run := func(args ...any) (int64, error) {
				return scheduleAdvanceScript.Run(ctx, rdb, []string{rec}, args...).Int64()
			}
			n, err := run("g1", 100, 200, 200, 150, 5, "passA")
			require.NoError(t, err)
			require.EqualValues(t, 1, n)
			after := testutil.Dump(t, rdb, prefix)
			require.Equal(t, map[string]string{"gen": "g1", "cursor": "200", "tick": "200", "prevtick": "150", "skipped": "5", "mover": "passA"},
				rdb.HGetAll(ctx, rec).Val())

			n, err = run("g1", 100, 200, 200, 150, 5, "passA")
			require.NoError(t, err)
			require.EqualValues(t, 1, n, "a rerun after a lost reply hears what the first run did")
			n, err = run("g1", 100, 200, 200, 150, 5, "passB")
			require.NoError(t, err)
			require.EqualValues(t, 2, n, "another pass with the same plan is told it did not move it")
			n, err = run("g1", 100, 300, 300, 200, 0, "passC")
			require.NoError(t, err)
			require.EqualValues(t, 0, n, "a pass that read an old cursor")
			n, err = run("g0", 200, 300, 300, 200, 0, "passD")
			require.NoError(t, err)
			require.EqualValues(t, -1, n, "a pass of another generation")
			_, err = run("g1", 200, "x", 300, 200, 0, "passE")
			require.ErrorContains(t, err, "no whole number")
			_, err = run("g1", 200, 300, 300, 200, 0)
			require.ErrorContains(t, err, "want 7")
			require.Equal(t, after, testutil.Dump(t, rdb, prefix), "the skipped ticks count once; refused calls write nothing")

			require.NoError(t, rdb.Del(ctx, rec).Err())
			n, err = run("g1", 200, 300, 300, 200, 0, "passF")
			require.NoError(t, err)
			require.EqualValues(t, -1, n, "a deleted schedule")
			require.Empty(t, testutil.Keys(t, rdb, prefix), "a deleted schedule does not come back")
		})
	}
}

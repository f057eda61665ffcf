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
// cursor 0, one of another generation or of a deleted schedule -1; only
// the mover hears the ticks that passed while paused, once; a bad
// argument is an error that writes nothing.
func TestScheduleAdvanceScript(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			rdb := b.New(t)
			prefix := testutil.Config(t).Prefix
			rec := keys.ForSchedule(prefix, "s").Record()
			require.NoError(t, rdb.HSet(ctx, rec, "gen", "g1", "cursor", "100", "tick", "0", "prevtick", "0", "skipped", "7", "pskip", "7").Err())
			paused := int64(0) // what the last run said passed while paused
			run := func(args ...any) (int64, error) {
				v, err := scheduleAdvanceScript.Run(ctx, rdb, []string{rec}, args...).Int64Slice()
				if err != nil {
					return 0, err
				}
				require.Len(t, v, 2)
				paused = v[1]
				return v[0], nil
			}
			n, err := run("g1", 100, 200, 200, 150, 5, "passA")
			require.NoError(t, err)
			require.EqualValues(t, 1, n)
			require.EqualValues(t, 7, paused, "the mover reports the ticks that passed while paused")
			after := testutil.Dump(t, rdb, prefix)
			require.Equal(t, map[string]string{"gen": "g1", "cursor": "200", "tick": "200", "prevtick": "150", "skipped": "12", "mover": "passA",
				"moverpskip": "7"}, rdb.HGetAll(ctx, rec).Val())

			n, err = run("g1", 100, 200, 200, 150, 5, "passA")
			require.NoError(t, err)
			require.EqualValues(t, 1, n, "a rerun after a lost reply hears what the first run did")
			require.EqualValues(t, 7, paused, "the paused ticks too")
			n, err = run("g1", 100, 200, 200, 150, 5, "passB")
			require.NoError(t, err)
			require.EqualValues(t, 2, n, "another pass with the same plan is told it did not move it")
			require.Zero(t, paused, "and reports no paused tick")
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

			n, err = run("g1", 200, 300, 300, 200, 0, "passG")
			require.NoError(t, err)
			require.EqualValues(t, 1, n)
			require.Zero(t, paused, "the paused ticks are reported once")

			require.NoError(t, rdb.Del(ctx, rec).Err())
			n, err = run("g1", 200, 300, 300, 200, 0, "passF")
			require.NoError(t, err)
			require.EqualValues(t, -1, n, "a deleted schedule")
			require.Empty(t, testutil.Keys(t, rdb, prefix), "a deleted schedule does not come back")
		})
	}
}

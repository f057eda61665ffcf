package redeq

import (
	"context"
	"strconv"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
)

// TestScheduleIntentScript: schedule_intent.lua records a pass's ticks
// under the generation it read, once however often it runs (a rerun after
// a lost reply, a tick listed twice) and after removing the ticks due;
// it writes nothing for a pass of another generation, of a paused or
// deleted schedule, while an ended generation still has ticks to stop,
// nor for a bad argument or more ticks than a pass can plan (100,000).
func TestScheduleIntentScript(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			rdb := b.New(t)
			prefix := testutil.Config(t).Prefix
			k := keys.ForSchedule(prefix, "s")
			require.NoError(t, rdb.HSet(ctx, k.Record(), "gen", "g1", "paused", "0", "cursor", "100").Err())
			run := func(gen string, ticks ...any) (int64, error) {
				return scheduleIntentScript.Run(ctx, rdb, []string{k.Record(), k.TicksOf(gen), k.Stale()}, append([]any{gen}, ticks...)...).Int64()
			}
			now, err := rdb.Time(ctx).Result()
			require.NoError(t, err)
			ahead := now.UnixMilli() + 3_600_000
			require.NoError(t, rdb.ZAdd(ctx, k.TicksOf("g1"), redisZ(1000)).Err()) // due long ago

			n, err := run("g1", 2000, ahead, ahead)
			require.NoError(t, err)
			require.EqualValues(t, 1, n)
			want := []string{"2000", strconv.FormatInt(ahead, 10)}
			require.Equal(t, want, rdb.ZRange(ctx, k.TicksOf("g1"), 0, -1).Val(),
				"the due tick of an earlier pass goes; a tick listed twice is there once")
			after := testutil.Dump(t, rdb, prefix)

			n, err = run("g1", 2000, ahead, ahead)
			require.NoError(t, err)
			require.EqualValues(t, 1, n, "a rerun after a lost reply")
			require.Equal(t, after, testutil.Dump(t, rdb, prefix), "the rerun records the same ticks")

			for _, tc := range []struct {
				name string
				gen  string
				args []any
				err  string
			}{
				{"another generation", "g0", []any{ahead}, ""},
				{"no tick", "g1", nil, "want 1 to 1024"},
				{"a tick that is no number", "g1", []any{ahead, "x"}, "no whole number"},
				{"100,000 ticks", "g1", hundredThousand(ahead), "want 1 to 1024"},
			} {
				n, err := run(tc.gen, tc.args...)
				if tc.err != "" {
					require.ErrorContains(t, err, tc.err, tc.name)
				} else {
					require.NoError(t, err, tc.name)
					require.EqualValues(t, -1, n, tc.name)
				}
				require.Equal(t, after, testutil.Dump(t, rdb, prefix), "%s writes nothing", tc.name)
			}
			require.Less(t, maxRunPerPass+MaxCatchUpTicks+1, maxIntentTicks, "a pass never plans more ticks than the script takes")

			require.NoError(t, rdb.ZAdd(ctx, k.Stale(), redisZ(5)).Err())
			after = testutil.Dump(t, rdb, prefix)
			n, err = run("g1", ahead+1000)
			require.NoError(t, err)
			require.EqualValues(t, -3, n, "an ended generation's ticks are stopped first")
			require.NoError(t, rdb.Del(ctx, k.Stale()).Err())

			require.NoError(t, rdb.HSet(ctx, k.Record(), "paused", "1").Err())
			after = testutil.Dump(t, rdb, prefix)
			n, err = run("g1", ahead+1000)
			require.NoError(t, err)
			require.EqualValues(t, -1, n, "a paused schedule")
			require.NoError(t, rdb.Del(ctx, k.Record()).Err())
			n, err = run("g1", ahead+1000)
			require.NoError(t, err)
			require.EqualValues(t, -1, n, "a deleted schedule")
			delete(after, k.Record())
			require.Equal(t, after, testutil.Dump(t, rdb, prefix), "refused calls write nothing")
		})
	}
}

func redisZ(ms int64) redis.Z { return redis.Z{Score: float64(ms), Member: strconv.FormatInt(ms, 10)} }

func hundredThousand(from int64) []any {
	out := make([]any, 100_000)
	for i := range out {
		out[i] = from + int64(i)*1000
	}
	return out
}

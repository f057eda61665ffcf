package redeq

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
)

// TestPlanAppliesCatchUpOncePerOutage: the passes after an outage longer
// than one pass can walk apply the catch-up policy to the whole outage,
// not to each pass's share: CatchUpLatest runs one missed tick,
// CatchUpAll at most MaxCatchUpTicks, and every missed tick runs or is
// counted as skipped, once.
func TestPlanAppliesCatchUpOncePerOutage(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).UnixMilli()
	now := t0 + (3 * 24 * time.Hour).Milliseconds()
	for _, tc := range []struct {
		policy CatchUp
		runs   int64
	}{
		{CatchUpLatest, 1},
		{CatchUpNone, 0},
		{CatchUpAll, MaxCatchUpTicks},
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			cs, err := compile(Schedule{Name: "s", Topic: "t", Spec: "* * * * * *", CatchUp: tc.policy}, 1<<20)
			require.NoError(t, err)
			down := spans{{t0, now}}
			var runs, skipped int64
			cursor := t0
			for passes := 0; cursor <= now; passes++ {
				require.Less(t, passes, 10, "the passes come to an end")
				p := planTicks(cs, cursor, now, down, nil)
				for _, ms := range p.run {
					if ms <= now {
						runs++
					}
				}
				skipped += p.skipped
				cursor = p.cursor
			}
			total := (now - t0) / 1000
			require.Equal(t, tc.runs, runs, "missed ticks run")
			require.Equal(t, total, runs+skipped, "every missed tick runs or is counted, once")
		})
	}
}

// TestPlanAgainAfterALostCursorMovePlansTheSame: a pass whose cursor move
// was lost is planned again from the same cursor, with the ticks it
// recorded: the plan runs the same ticks and skips as many, so no policy
// runs more missed ticks than it allows.
func TestPlanAgainAfterALostCursorMovePlansTheSame(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 10, 0, time.UTC).UnixMilli()
	now := t0 + (10 * time.Minute).Milliseconds()
	down := spans{{t0, now}}
	for _, spec := range []string{"@every 1m", "0 * * * * *", "@every 1s"} {
		for _, policy := range []CatchUp{CatchUpLatest, CatchUpNone, CatchUpAll} {
			t.Run(spec+"/"+policy.String(), func(t *testing.T) {
				cs, err := compile(Schedule{Name: "s", Topic: "t", Spec: spec, CatchUp: policy}, 1<<20)
				require.NoError(t, err)
				first := planTicks(cs, t0, now, down, nil)
				recorded := map[int64]bool{}
				for _, ms := range first.run {
					recorded[ms] = true
				}
				again := planTicks(cs, t0, now, down, recorded)
				require.Equal(t, first.run, again.run)
				require.Equal(t, first.skipped, again.skipped)
			})
		}
	}
}

// TestScheduleClockScript: schedule_clock.lua records each pass and
// answers the latest spans with no pass longer than the gap, oldest
// first, at most 8 of them, the first pass ever making the span from 0;
// a rerun records nothing more; a span written by an earlier version
// (down_from, down_to only) is kept; a bad gap writes nothing.
func TestScheduleClockScript(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		if b.Mini == nil {
			continue // the clock moves on miniredis only
		}
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			rdb := b.New(t)
			key := testutil.Config(t).Prefix + ":schedules:clock"
			at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
			pass := func(sec int) []int64 {
				b.Mini.SetTime(at.Add(time.Duration(sec) * time.Second))
				v, err := scheduleClockScript.Run(ctx, rdb, []string{key}, 5000).Int64Slice()
				require.NoError(t, err)
				return v
			}
			ms := func(sec int) int64 { return at.Add(time.Duration(sec) * time.Second).UnixMilli() }
			require.Equal(t, []int64{ms(0), 0, ms(0)}, pass(0), "the first pass ever: everything before it was missed")
			require.Equal(t, []int64{ms(3), 0, ms(0)}, pass(3), "a gap within the limit is no span")
			require.Equal(t, []int64{ms(10), 0, ms(0), ms(3), ms(10)}, pass(10))
			require.Equal(t, []int64{ms(10), 0, ms(0), ms(3), ms(10)}, pass(10), "a rerun records nothing more")
			for i := 1; i <= 8; i++ {
				pass(10 + 10*i)
			}
			v := pass(100)
			require.Len(t, v, 1+2*8, "at most 8 spans")
			require.Equal(t, []int64{ms(80), ms(90), ms(90), ms(100)}, v[len(v)-4:], "the latest last")

			require.NoError(t, rdb.Del(ctx, key).Err())
			require.NoError(t, rdb.HSet(ctx, key, "seen", ms(200), "down_from", ms(150), "down_to", ms(160)).Err())
			require.Equal(t, []int64{ms(210), ms(150), ms(160), ms(200), ms(210)}, pass(210), "an earlier version's span stays")

			before := testutil.Dump(t, rdb, testutil.Config(t).Prefix)
			_, err := scheduleClockScript.Run(ctx, rdb, []string{key}, "5s").Result()
			require.ErrorContains(t, err, "no whole number")
			require.Equal(t, before, testutil.Dump(t, rdb, testutil.Config(t).Prefix), "a bad gap writes nothing")
		})
	}
}

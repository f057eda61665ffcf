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

// TestScheduleDropScript: schedule_drop.lua claims a tick for the
// generation a change ended and removes the job that generation added for
// the tick while it waits (scheduled at the tick or moved to another time
// without a failure, or due and not fetched), only when the tick came after
// the change and the current generation did not claim it; a job of the
// tick a newer generation added after the removal stays (however late the
// ended generation added its own), and a tick whose job ran (or, due
// before the change, was added) is not added again, while one due before
// the change that the ended generation never added is a newer
// generation's to add; it answers 2 for a tick that had its run (so the
// caller moves a cursor left before it), also on a rerun; a rerun, or a
// second client stopping the
// same tick, writes nothing more; a bad argument writes nothing; among
// 100,000 other claims and jobs it touches only its own.
func TestScheduleDropScript(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			rdb := b.New(t)
			prefix := testutil.Config(t).Prefix
			k := keys.ForBucket(prefix, "rs", 0)
			const change, tick = 1000, 5000
			id := tickID("s", tick)
			run := func(id, gen string, change, tick any, cur string) (int64, error) {
				return scheduleDropScript.Run(ctx, rdb, []string{k.Pool(), k.Scheduled(), k.State(), k.Ticks(), k.Errors()},
					id, gen, change, tick, cur).Int64()
			}
			// claimed writes the claim of tick job id by generation gen,
			// as schedule_tick.lua does when it adds the job.
			claimed := func(id, gen string, at int64) {
				require.NoError(t, rdb.ZAdd(ctx, k.Ticks(), redis.Z{Score: float64(at), Member: id + "#" + gen}).Err())
			}
			waiting := func(id string, at int64) {
				require.NoError(t, rdb.HSet(ctx, k.Pool(), id, "1|1|envelope").Err())
				require.NoError(t, rdb.ZAdd(ctx, k.Scheduled(), redis.Z{Score: float64(at), Member: id}).Err())
			}

			waiting(id, tick)
			claimed(id, "g1", tick)
			n, err := run(id, "g1", change, tick, "g2")
			require.NoError(t, err)
			require.EqualValues(t, 1, n, "a waiting tick of the ended generation goes")
			after := testutil.Dump(t, rdb, prefix)
			require.NotContains(t, rdb.HKeys(ctx, k.Pool()).Val(), id)
			require.Equal(t, float64(tick), rdb.ZScore(ctx, k.Ticks(), id+"#g1").Val(), "the ended generation's claim of it is made")

			for _, who := range []string{"a rerun after a lost reply", "a second client"} {
				n, err = run(id, "g1", change, tick, "g2")
				require.NoError(t, err)
				require.EqualValues(t, 0, n, who)
				require.Equal(t, after, testutil.Dump(t, rdb, prefix), "%s writes nothing", who)
			}
			for _, tc := range []struct {
				name         string
				gen          string
				change, tick any
				want         string
			}{
				{"a change instant that is no number", "g1", "x", tick, "no whole number"},
				{"a tick that is no number", "g1", change, "5s", "no whole number"},
				{"no generation", "", change, tick, "no generation"},
				{"a tick past the year 9999", "g1", change, "99999999999999999999999", "no whole number"},
			} {
				_, err := run(id, tc.gen, tc.change, tc.tick, "g2")
				require.ErrorContains(t, err, tc.want, tc.name)
				require.Equal(t, after, testutil.Dump(t, rdb, prefix), "%s writes nothing", tc.name)
			}

			_, err = scheduleDropScript.Run(ctx, rdb, []string{k.Pool(), k.Scheduled(), k.State(), k.Ticks(), k.Errors()},
				id, "g1", change, tick).Result()
			require.ErrorContains(t, err, "4 arguments, want 5")
			require.Equal(t, after, testutil.Dump(t, rdb, prefix), "a miscounted call writes nothing")

			// A newer generation adds the tick again once it was stopped
			// (its claim made after the removal); a stopper that read the
			// schedule's generation before that change (stale: "g2", no
			// claim) leaves the newer job.
			waiting(id, tick)
			claimed(id, "g3", tick)
			n, err = run(id, "g1", change, tick, "g2")
			require.NoError(t, err)
			require.EqualValues(t, 0, n)
			require.Contains(t, rdb.HKeys(ctx, k.Pool()).Val(), id, "a stale stopper leaves a newer generation's job")
			require.NoError(t, rdb.Del(ctx, k.Pool(), k.Scheduled(), k.Ticks()).Err())

			// A missed tick added late: its claim is scored by when it
			// was made, hours after the tick. The stop's mark lives as
			// long as that claim, so once pruning took everything older
			// than the claim, a stale rerun of the stop still finds its
			// mark and leaves the job a newer generation added.
			const late = tick + 3*3600_000
			waiting(id, tick)
			claimed(id, "g1", late)
			n, err = run(id, "g1", change, tick, "g2")
			require.NoError(t, err)
			require.EqualValues(t, 1, n)
			require.NoError(t, rdb.ZRemRangeByScore(ctx, k.Ticks(), "-inf", strconv.Itoa(late-1)).Err())
			waiting(id, tick)
			claimed(id, "g3", late+1)
			n, err = run(id, "g1", change, tick, "g2")
			require.NoError(t, err)
			require.EqualValues(t, 0, n)
			require.Contains(t, rdb.HKeys(ctx, k.Pool()).Val(), id, "a stale stop of a late-added tick leaves a newer generation's job")
			require.NoError(t, rdb.Del(ctx, k.Pool(), k.Scheduled(), k.Ticks()).Err())

			// What stays.
			for _, tc := range []struct {
				name  string
				at    int64 // tick instant
				due   int64 // the job's due time
				cur   string
				wrote bool  // the ended generation added the job
				ran   int64 // 2: the tick had its run
			}{
				{"a tick due before the change", change - 1, change - 1, "", true, 2},
				{"a job the current generation claimed", tick + 1, tick + 1, "g2", true, 0},
				{"a retry of the tick's job, due later", tick + 2, tick + 60_000, "", true, 2},
				{"a job the ended generation never added", tick + 6, tick + 6, "", false, 0},
			} {
				id := tickID("s", tc.at)
				waiting(id, tc.due)
				if tc.wrote {
					claimed(id, "g1", tc.at)
				}
				if tc.due != tc.at {
					require.NoError(t, rdb.HSet(ctx, k.Errors(), id, "boom").Err())
				}
				if tc.cur != "" {
					require.NoError(t, rdb.ZAdd(ctx, k.Ticks(), redis.Z{Score: float64(tc.at), Member: id + "#" + tc.cur}).Err())
				}
				n, err := run(id, "g1", change, tc.at, tc.cur)
				require.NoError(t, err)
				require.Equal(t, tc.ran, n, tc.name)
				n, err = run(id, "g1", change, tc.at, tc.cur)
				require.NoError(t, err)
				require.Equal(t, tc.ran, n, "%s: a rerun answers the same", tc.name)
				require.Contains(t, rdb.HKeys(ctx, k.Pool()).Val(), id, "%s stays", tc.name)
				require.NotEqual(t, redis.Nil, rdb.ZScore(ctx, k.Ticks(), id+"#g1").Err(), "%s: the ended generation's claim is made", tc.name)
			}

			// tickRun runs schedule_tick.lua for tick at's job, claimed
			// by generation gen: it returns whether the job was added.
			tickRun := func(at int64, gen string) bool {
				id := tickID("s", at)
				had := rdb.HExists(ctx, k.Pool(), id).Val()
				v, err := scheduleTickScript.Run(ctx, rdb, []string{k.Pool(), k.Scheduled(), k.Ticks()},
					id, id+"#"+gen, at, "|0|0|0||\n", "body", 1000, "wake", "rs#0", 60_000).Int64()
				require.NoError(t, err)
				require.EqualValues(t, 1, v, "the tick stands claimed")
				return !had && rdb.HExists(ctx, k.Pool(), id).Val()
			}
			// The tick due before the change had its run by the ended
			// generation: once its job is acked, a newer generation whose
			// cursor was left before the tick does not add it again.
			early := tickID("s", change-1)
			require.NoError(t, rdb.HDel(ctx, k.Pool(), early).Err())
			require.False(t, tickRun(change-1, "g3"), "a tick due before the change, run by the ended generation, is not added again")
			// A tick due before the change that the ended generation never
			// added (its pass is late, or died): its late write adds
			// nothing, and a newer generation adds it, once.
			unwritten := int64(change - 2)
			n, err = run(tickID("s", unwritten), "g1", change, unwritten, "g3")
			require.NoError(t, err)
			require.EqualValues(t, 0, n)
			require.False(t, tickRun(unwritten, "g1"), "the ended generation's late write adds nothing")
			require.True(t, tickRun(unwritten, "g3"), "a newer generation adds the tick due before the change")

			// Moved to another due time without a failure (rescheduled by
			// an operator, or rejoined): still the tick's waiting job.
			moved := tickID("s", tick+5)
			waiting(moved, tick+90_000)
			claimed(moved, "g1", tick+5)
			n, err = run(moved, "g1", change, strconv.Itoa(tick+5), "")
			require.NoError(t, err)
			require.EqualValues(t, 1, n, "a tick's job moved to another time goes")
			require.NotContains(t, rdb.HKeys(ctx, k.Pool()).Val(), moved)
			require.Equal(t, redis.Nil, rdb.ZScore(ctx, k.Scheduled(), moved).Err())

			// Due and not fetched yet, its ready state in either format
			// (the current one carries the due time); in flight.
			ready, inflight := tickID("s", tick+3), tickID("s", tick+4)
			for _, state := range []string{"r", "r" + strconv.Itoa(tick+3)} {
				require.NoError(t, rdb.HSet(ctx, k.Pool(), ready, "1|1|envelope").Err())
				require.NoError(t, rdb.HSet(ctx, k.State(), ready, state).Err())
				claimed(ready, "g1", tick+3)
				n, err = run(ready, "g1", change, strconv.Itoa(tick+3), "")
				require.NoError(t, err)
				require.EqualValues(t, 1, n, "a due tick not fetched yet goes, its state %q", state)
				require.NotContains(t, rdb.HKeys(ctx, k.Pool()).Val(), ready)
				require.NotContains(t, rdb.HKeys(ctx, k.State()).Val(), ready)
				require.NoError(t, rdb.ZRem(ctx, k.Ticks(), ready+"#g1", ready+"#g1!").Err())
			}
			require.NoError(t, rdb.HSet(ctx, k.Pool(), inflight, "1|1|envelope").Err())
			require.NoError(t, rdb.HSet(ctx, k.State(), inflight, "token@consumer").Err())
			claimed(inflight, "g1", tick+4)
			n, err = run(inflight, "g1", change, strconv.Itoa(tick+4), "")
			require.NoError(t, err)
			require.EqualValues(t, 2, n, "a running tick's job is its delivery's: the tick had its run")
			require.Contains(t, rdb.HKeys(ctx, k.Pool()).Val(), inflight)
			// That tick had its run: a newer generation does not add it
			// again once the job is acked.
			require.NoError(t, rdb.HDel(ctx, k.Pool(), inflight).Err())
			require.NoError(t, rdb.HDel(ctx, k.State(), inflight).Err())
			added, err := scheduleTickScript.Run(ctx, rdb, []string{k.Pool(), k.Scheduled(), k.Ticks()},
				inflight, inflight+"#g3", tick+4, "|0|0|0||\n", "body", 1000, "wake", "rs#0", 60_000).Int64()
			require.NoError(t, err)
			require.EqualValues(t, 1, added, "the tick stands claimed")
			require.NotContains(t, rdb.HKeys(ctx, k.Pool()).Val(), inflight, "a tick that had its run is not added again")
			// Among 100,000 other claims and jobs: only its own change.
			require.NoError(t, rdb.Del(ctx, k.Pool(), k.Scheduled(), k.State(), k.Ticks()).Err())
			others := make([]redis.Z, 0, 100_000)
			fields := make([]any, 0, 200_000)
			for i := range 100_000 {
				other := tickID("o", int64(i))
				others = append(others, redis.Z{Score: float64(i), Member: other + "#g1"})
				fields = append(fields, other, "1|1|envelope")
			}
			for i := 0; i < len(others); i += 10_000 {
				require.NoError(t, rdb.ZAdd(ctx, k.Ticks(), others[i:i+10_000]...).Err())
				require.NoError(t, rdb.ZAdd(ctx, k.Scheduled(), others[i:i+10_000]...).Err())
				require.NoError(t, rdb.HSet(ctx, k.Pool(), fields[2*i:2*i+20_000]...).Err())
			}

			waiting(id, tick)
			claimed(id, "g1", tick)
			n, err = run(id, "g1", change, tick, "g2")
			require.NoError(t, err)
			require.EqualValues(t, 1, n)
			require.Equal(t, int64(100_002), rdb.ZCard(ctx, k.Ticks()).Val(), "the others' claims stay, its own and its mark are there")
			require.Equal(t, int64(100_000), rdb.HLen(ctx, k.Pool()).Val(), "the others' jobs stay, its own goes")
			require.Equal(t, int64(100_000), rdb.ZCard(ctx, k.Scheduled()).Val())
		})
	}
}

// TestScheduleRanScript: schedule_ran.lua moves a record's cursor and
// latest tick up to a tick that had its run, never back, only while the
// record has the generation the caller read; a rerun writes nothing more,
// and a bad tick writes nothing.
func TestScheduleRanScript(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			rdb := b.New(t)
			prefix := testutil.Config(t).Prefix
			k := keys.ForSchedule(prefix, "s")
			run := func(gen string, tick any) (int64, error) {
				return scheduleRanScript.Run(ctx, rdb, []string{k.Record()}, gen, tick).Int64()
			}
			require.NoError(t, rdb.HSet(ctx, k.Record(), "gen", "g1", "cursor", "1000", "tick", "900", "prevtick", "800").Err())
			n, err := run("g1", 2000)
			require.NoError(t, err)
			require.EqualValues(t, 1, n)
			after := testutil.Dump(t, rdb, prefix)
			require.Equal(t, []any{"2000", "2000", "900"}, rdb.HMGet(ctx, k.Record(), "cursor", "tick", "prevtick").Val())
			for _, tc := range []struct {
				name string
				gen  string
				tick any
			}{
				{"a rerun", "g1", 2000},
				{"an earlier tick", "g1", 1500},
				{"another generation", "g2", 5000},
			} {
				_, err := run(tc.gen, tc.tick)
				require.NoError(t, err)
				require.Equal(t, after, testutil.Dump(t, rdb, prefix), "%s writes nothing", tc.name)
			}
			_, err = run("g1", "5s")
			require.ErrorContains(t, err, "no whole number")
			require.Equal(t, after, testutil.Dump(t, rdb, prefix), "a bad tick writes nothing")
			require.NoError(t, rdb.Del(ctx, k.Record()).Err())
			n, err = run("g1", 3000)
			require.NoError(t, err)
			require.EqualValues(t, 0, n)
			require.Zero(t, rdb.Exists(ctx, k.Record()).Val(), "a deleted record is not written again")
		})
	}
}

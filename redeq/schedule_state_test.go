package redeq

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
)

// TestScheduleChangeEndsItsGenerationOnce: a put that changes a schedule,
// a pause and a delete leave the generation they end in the stale set,
// once however often go-redis reruns them after a lost reply; a put that
// changes nothing, a create, a pause of a paused schedule and a resume
// leave nothing there, and a refused call writes nothing (a resume
// that reaches the server after the first tick past its cursor is
// refused with "retry": that tick passed while paused).
func TestScheduleChangeEndsItsGenerationOnce(t *testing.T) {
	t.Parallel()
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			ctx := context.Background()
			rdb := b.New(t)
			prefix := testutil.Config(t).Prefix
			k := keys.ForSchedule(prefix, "s")
			gen := func() string { return rdb.HGet(ctx, k.Record(), "gen").Val() }
			stale := func() []string { return rdb.ZRange(ctx, k.Stale(), 0, -1).Val() }
			put := func(op, body, newGen string) string {
				cs, err := compile(Schedule{Name: "s", Topic: "rs", Spec: "@every 1s", Body: []byte(body)}, 1<<20)
				require.NoError(t, err)
				args := append(append([]any{60_000}, cs.content()...), newGen)
				out, err := schedulePutScript.Run(ctx, rdb, []string{k.Record(), k.Op(op), k.Stale()}, args...).Text()
				require.NoError(t, err)
				return out
			}
			// extra, for a resume: the generation read, the cursor, the
			// ticks skipped and the first tick after the cursor.
			state := func(op, action, newGen string, extra ...any) (string, error) {
				args := []any{60_000, action, "", "", "", newGen, ""}
				for i, v := range extra {
					args[[]int{2, 3, 4, 6}[i]] = v
				}
				return scheduleStateScript.Run(ctx, rdb, []string{k.Record(), k.Op(op), k.Stale()}, args...).Text()
			}
			ended := func(g, topic string) {
				t.Helper()
				var found []string
				for _, m := range stale() {
					if strings.HasPrefix(m, g+"|") {
						found = append(found, m)
					}
				}
				require.Len(t, found, 1, "generation %s ended once", g)
				require.True(t, strings.HasSuffix(found[0], "|"+topic), found[0])
			}

			require.NotEqual(t, "0", put("p1", "a", "g1"))
			require.Equal(t, "0", put("p2", "a", "g9"), "the same content")
			require.Empty(t, stale(), "a create or a put that changes nothing ends no generation")

			first := put("p3", "b", "g2")
			require.Equal(t, first, put("p3", "b", "g2-rerun"), "a rerun answers as the first run")
			require.Equal(t, "g2", gen())
			ended("g1", "rs")
			require.Len(t, stale(), 1)

			first, err := state("s1", "pause", "g3")
			require.NoError(t, err)
			again, err := state("s1", "pause", "g3-rerun")
			require.NoError(t, err)
			require.Equal(t, first, again)
			ended("g2", "rs")
			out, err := state("s2", "pause", "g4")
			require.NoError(t, err)
			require.Equal(t, "0", out, "a pause of a paused schedule")
			require.Len(t, stale(), 2)

			before := testutil.Dump(t, rdb, prefix)
			_, err = state("s3", "resume", "g5", "g3", "x", 0, 1)
			require.ErrorContains(t, err, "no whole number")
			now := rdb.Time(ctx).Val().UnixMilli()
			out, err = state("s3", "resume", "g5", "g3", now-1000, 0, now-1)
			require.NoError(t, err)
			require.Equal(t, "retry", out, "a resume that reaches the server after the first tick past its cursor")
			_, err = state("s4", "jump", "g5")
			require.ErrorContains(t, err, "unknown action")
			_, err = scheduleStateScript.Run(ctx, rdb, []string{k.Record(), k.Op("s8"), k.Stale()}, 0, "delete", "", "", "", "", "").Text()
			require.ErrorContains(t, err, "op TTL 0")
			cs, err := compile(Schedule{Name: "s", Topic: "rs", Spec: "@every 2s"}, 1<<20)
			require.NoError(t, err)
			_, err = schedulePutScript.Run(ctx, rdb, []string{k.Record(), k.Op("p9"), k.Stale()}, append(append([]any{0}, cs.content()...), "g8")...).Text()
			require.ErrorContains(t, err, "op TTL 0")
			require.Equal(t, before, testutil.Dump(t, rdb, prefix), "a refused call writes nothing")

			now = rdb.Time(ctx).Val().UnixMilli()
			_, err = state("s5", "resume", "g5", "g3", now, 0, now+60_000)
			require.NoError(t, err)
			require.Len(t, stale(), 2, "a paused generation wrote no tick: a resume ends nothing to stop")

			first, err = state("s6", "delete", "")
			require.NoError(t, err)
			again, err = state("s6", "delete", "")
			require.NoError(t, err)
			require.Equal(t, first, again)
			ended("g5", "rs")
			require.Len(t, stale(), 3)
			out, err = state("s7", "delete", "")
			require.NoError(t, err)
			require.Equal(t, "nf", out)
			require.Len(t, stale(), 3)
		})
	}
}

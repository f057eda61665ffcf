package redeq

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
			down := span{t0, now}
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

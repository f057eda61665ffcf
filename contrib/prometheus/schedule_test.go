package redeqprom_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	redeqprom "github.com/redeq-go/redeq/contrib/prometheus"
	rqtest "github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// scheduleMetrics are the series of the schedule metrics.
var scheduleMetrics = []string{"redeq_schedule_ticks_total", "redeq_schedule_lag_seconds", "redeq_schedule_last_tick_timestamp_seconds"}

// TestScheduleMetrics: each schedule has its run and skipped tick series
// at 0 before any tick; a client counts each tick it adds once and each
// missed tick its catch-up drops; the lag gauge reads 0 while the next
// tick waits ahead and, while the fleet is down, how long the first tick
// not added has been due; the last tick gauge is the latest tick added.
func TestScheduleMetrics(t *testing.T) {
	be := rqtest.Backends(t)[0] // the clock moves on miniredis only
	mini := be.Mini
	rdb := be.New(t)
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 12, 0, 10, 0, time.UTC)
	minute := func(m int) time.Time { return t0.Truncate(time.Minute).Add(time.Duration(m) * time.Minute) }
	mini.SetTime(t0)

	c := newClient(t, rdb)
	require.NoError(t, c.PutSchedule(ctx, redeq.Schedule{Name: "digest", Topic: "digests", Spec: "@every 1m"}))
	reg := prometheus.NewPedanticRegistry()
	col, err := redeqprom.Register(c, reg, redeqprom.Options{CacheFor: time.Nanosecond})
	require.NoError(t, err)
	require.NoError(t, testutil.GatherAndCompare(reg, sortedWithPrefix(c, `
# HELP redeq_schedule_lag_seconds How long ago the first tick of a schedule whose job was not added yet fell due (the server's clock); 0 while each tick waits ahead and while paused. Read at scrape (cached).
# TYPE redeq_schedule_lag_seconds gauge
redeq_schedule_lag_seconds{schedule="digest"} 0
# HELP redeq_schedule_last_tick_timestamp_seconds Unix time of the latest tick of a schedule, at or before now, whose job was added; 0 when none was. Read at scrape (cached).
# TYPE redeq_schedule_last_tick_timestamp_seconds gauge
redeq_schedule_last_tick_timestamp_seconds{schedule="digest"} 0
# HELP redeq_schedule_ticks_total Ticks of a periodic schedule this client handled: run (its job added) or skipped (missed while no client ran and dropped by the catch-up policy, or passed while paused). Summed over the fleet, each tick counts once.
# TYPE redeq_schedule_ticks_total counter
redeq_schedule_ticks_total{outcome="run",schedule="digest"} 0
redeq_schedule_ticks_total{outcome="skipped",schedule="digest"} 0
`), scheduleMetrics...), "every schedule's series exist before its first tick")

	ticks := func(col *redeqprom.Collector, outcome string) float64 {
		return testutil.ToFloat64(col.Ticks().WithLabelValues("digest", outcome))
	}
	require.NoError(t, c.Start(ctx))
	require.Eventually(t, func() bool { return ticks(col, "run") == 1 }, 10*time.Second, 10*time.Millisecond, "the tick of 12:01 is added ahead")
	lag, ok := gauge(t, reg, "redeq_schedule_lag_seconds", map[string]string{"schedule": "digest"})
	require.True(t, ok)
	require.Zero(t, lag)
	require.NoError(t, c.Shutdown(ctx))

	// The fleet is down from 12:00:10 to 12:10:30: 12:02 is the first tick
	// not added.
	mini.SetTime(minute(10).Add(30 * time.Second))
	lag, _ = gauge(t, reg, "redeq_schedule_lag_seconds", map[string]string{"schedule": "digest"})
	require.Equal(t, 510.0, lag)

	back, err := redeq.New(be.New(t), c.Config()) // the same prefix: another instance
	require.NoError(t, err)
	t.Cleanup(func() { _ = back.Shutdown(context.Background()) })
	backReg := prometheus.NewPedanticRegistry()
	backCol, err := redeqprom.Register(back, backReg, redeqprom.Options{CacheFor: time.Nanosecond})
	require.NoError(t, err)
	require.NoError(t, back.Start(ctx))
	// CatchUpLatest: 12:10 runs, 12:11 waits ahead, 12:02 to 12:09 are
	// skipped.
	require.Eventually(t, func() bool { return ticks(backCol, "run") == 2 && ticks(backCol, "skipped") == 8 }, 10*time.Second, 10*time.Millisecond)
	lag, _ = gauge(t, backReg, "redeq_schedule_lag_seconds", map[string]string{"schedule": "digest"})
	require.Zero(t, lag)
	last, _ := gauge(t, backReg, "redeq_schedule_last_tick_timestamp_seconds", map[string]string{"schedule": "digest"})
	require.Equal(t, float64(minute(10).Unix()), last)
	require.Equal(t, 1.0, ticks(col, "run"), "a stopped client counts nothing more")
	require.Zero(t, ticks(col, "skipped"))
}

// sortedWithPrefix adds c's prefix label to every series of an expected
// exposition text of the schedule metrics, in the labels' sorted place
// (after outcome, before schedule), as the registry writes them.
func sortedWithPrefix(c *redeq.Client, text string) io.Reader {
	p := `prefix="` + c.Config().Prefix + `",`
	return strings.NewReader(strings.NewReplacer(`{outcome="run",`, `{outcome="run",`+p,
		`{outcome="skipped",`, `{outcome="skipped",`+p, `{schedule=`, `{`+p+`schedule=`).Replace(text))
}

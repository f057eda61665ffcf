package redeqotel_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	redeqotel "github.com/redeq-go/redeq/contrib/otel"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// ticksOf reads redeq.schedule.ticks from reader: outcome -> sum, and
// the attribute sets seen.
func ticksOf(t *testing.T, reader *sdkmetric.ManualReader) (map[string]int64, []attribute.Set) {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, reader.Collect(context.Background(), &rm))
	sums := map[string]int64{}
	var sets []attribute.Set
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			d, ok := m.Data.(metricdata.Sum[int64])
			if !ok || m.Name != "redeq.schedule.ticks" {
				continue
			}
			require.True(t, d.IsMonotonic, "a counter")
			for _, p := range d.DataPoints {
				o, _ := p.Attributes.Value(redeqotel.AttrOutcome)
				sums[o.AsString()] += p.Value
				sets = append(sets, p.Attributes)
			}
		}
	}
	return sums, sets
}

// TestScheduleTicksAreCounted: an instrumented client counts each tick
// whose job it adds once (outcome run) and each missed tick its catch-up
// drops (outcome skipped), per schedule and topic; a client stopped counts
// nothing more.
func TestScheduleTicksAreCounted(t *testing.T) {
	be := testutil.Backends(t)[0] // the clock moves on miniredis only
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 12, 0, 10, 0, time.UTC)
	minute := func(m int) time.Time { return t0.Truncate(time.Minute).Add(time.Duration(m) * time.Minute) }
	be.Mini.SetTime(t0)

	f := setup(t, be.New(t))
	require.NoError(t, f.c.PutSchedule(ctx, redeq.Schedule{Name: "digest", Topic: "digests", Spec: "@every 1m"}))
	require.NoError(t, f.c.Start(ctx))
	require.Eventually(t, func() bool { s, _ := ticksOf(t, f.reader); return s["run"] == 1 }, 10*time.Second, 10*time.Millisecond,
		"the tick of 12:01 is added ahead")
	require.NoError(t, f.c.Shutdown(ctx))

	// The fleet is down from 12:00:10 to 12:10:30; another instance comes.
	be.Mini.SetTime(minute(10).Add(30 * time.Second))
	back, err := redeq.New(be.New(t), f.c.Config())
	require.NoError(t, err)
	t.Cleanup(func() { _ = back.Shutdown(context.Background()) })
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	_, err = redeqotel.Instrument(back, redeqotel.Options{MeterProvider: mp})
	require.NoError(t, err)
	require.NoError(t, back.Start(ctx))
	// CatchUpLatest: 12:10 runs, 12:11 waits ahead, 12:02 to 12:09 are
	// skipped.
	require.Eventually(t, func() bool { s, _ := ticksOf(t, reader); return s["run"] == 2 && s["skipped"] == 8 },
		10*time.Second, 10*time.Millisecond)
	_, sets := ticksOf(t, reader)
	require.Len(t, sets, 2)
	for _, set := range sets {
		for k, want := range map[attribute.Key]string{redeqotel.AttrSystem: "redeq", redeqotel.AttrSchedule: "digest",
			redeqotel.AttrDestination: "digests"} {
			v, ok := set.Value(k)
			require.True(t, ok, "%s", k)
			require.Equal(t, want, v.AsString(), "%s", k)
		}
	}
	first, _ := ticksOf(t, f.reader)
	require.Equal(t, map[string]int64{"run": 1}, first, "a stopped client counts nothing more")
}

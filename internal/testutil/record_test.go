package testutil_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
)

// TestRecorder: a Recorder counts each job's runs, keeps their order and
// times, names the jobs that ran twice, and signals each run.
func TestRecorder(t *testing.T) {
	var r testutil.Recorder
	before := time.Now()
	var wg sync.WaitGroup
	for _, id := range []string{"a", "b", "a", "c", "a", "b"} {
		wg.Go(func() { r.Record(id) })
	}
	wg.Wait()
	select {
	case <-r.Ran():
	default:
		t.Fatal("Ran did not signal the runs")
	}
	require.Equal(t, 6, r.Total())
	require.Equal(t, map[string]int{"a": 3, "b": 2, "c": 1}, r.Counts())
	require.Equal(t, 3, r.Count("a"))
	require.Zero(t, r.Count("z"))
	require.Equal(t, []string{"a", "b"}, r.Twice())
	times := r.Times("a")
	require.Len(t, times, 3)
	for i, at := range times {
		require.False(t, at.Before(before), "run %d recorded before it ran", i)
		if i > 0 {
			require.False(t, at.Before(times[i-1]), "runs out of order")
		}
	}
	require.Len(t, r.Runs(), 6)

	r.Record("d")
	select {
	case <-r.Ran():
	case <-time.After(10 * time.Second):
		t.Fatal("Ran did not signal a later run")
	}
}

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

// TestRecorderFollowsRunsToTheirEnd: runs begun with Begin count as under
// way until they end; a job with two runs under way at once is named, the
// most runs at once is kept, each run keeps its job's counts and end, and
// a run that began before its due time is early.
func TestRecorderFollowsRunsToTheirEnd(t *testing.T) {
	var r testutil.Recorder
	endA := r.Begin(testutil.Run{ID: "a", Attempt: 1, Recoveries: 2})
	endB := r.Begin(testutil.Run{ID: "b", Due: time.Now().Add(time.Hour)})
	require.Equal(t, 2, r.Running())
	require.Empty(t, r.AtOnce(), "no job ran twice at once yet")
	endA()
	endA() // a second call changes nothing
	require.Equal(t, 1, r.Running())
	endA2 := r.Begin(testutil.Run{ID: "a"})
	require.Empty(t, r.AtOnce(), "a's first run had ended when its second began")
	endA3 := r.Begin(testutil.Run{ID: "a", Due: time.Now().Add(-time.Second)})
	require.Equal(t, []string{"a"}, r.AtOnce())
	require.Equal(t, 3, r.Running())
	require.Equal(t, 3, r.MaxRunning())
	endA2()
	endA3()
	endB()
	require.Zero(t, r.Running())
	require.Equal(t, 3, r.MaxRunning(), "the most at once is kept")

	runs := r.Of("a")
	require.Len(t, runs, 3)
	require.Equal(t, 1, runs[0].Attempt)
	require.Equal(t, 2, runs[0].Recoveries)
	for _, run := range r.Runs() {
		require.False(t, run.End.Before(run.At), "run of %s ended before it began", run.ID)
	}
	require.Equal(t, map[string]int{"a": 3, "b": 1}, r.Counts())
	require.Len(t, r.ByID()["a"], 3)
	require.Equal(t, runs[0].At, r.Firsts()["a"])

	early := r.Early(5 * time.Millisecond)
	require.Len(t, early, 1, "b's run began an hour before it was due")
	require.Equal(t, "b", early[0].ID)
}

// TestRecorderCountsRunsAtOncePerBound: runs begun with a Bound count as
// under way in that bound only, the most at once is kept per bound, and
// a run ended with EndWith keeps its result.
func TestRecorderCountsRunsAtOncePerBound(t *testing.T) {
	var r testutil.Recorder
	endL1 := r.BeginWith(testutil.Run{ID: "a", Bound: "L"})
	endL2 := r.BeginWith(testutil.Run{ID: "b", Bound: "L"})
	endX := r.BeginWith(testutil.Run{ID: "c", Bound: "X"})
	require.Equal(t, 2, r.RunningIn("L"))
	require.Equal(t, 1, r.RunningIn("X"))
	require.Equal(t, 3, r.Running())
	endL1("ack")
	endL1("again") // a second call changes nothing
	require.Equal(t, 1, r.RunningIn("L"))
	require.Equal(t, 2, r.MaxRunningIn("L"), "the most at once is kept per bound")
	endL2("canceled")
	endX("")
	require.Zero(t, r.RunningIn("L"))
	require.Equal(t, 1, r.MaxRunningIn("X"))
	require.Zero(t, r.MaxRunningIn("Y"), "a bound that never ran")
	require.Equal(t, "ack", r.Of("a")[0].Result)
	require.Equal(t, "canceled", r.Of("b")[0].Result)
}

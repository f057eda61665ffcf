package testutil

import (
	"testing"
	"time"
)

// Eventually polls cond every 5 ms until it holds, and fails the test,
// naming what it waited for, when it does not within timeout.
//
// Redis schedules jobs by its wall clock, and a test machine's wall clock
// is stepped now and then: a step back delays every job by as much,
// rightly (they are never early by the server's clock). So the wait is
// extended by any step back of the wall clock since it began.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	EventuallyEvery(t, timeout, 5*time.Millisecond, what, cond)
}

// EventuallyEvery is Eventually polling every `every`, for conditions
// that cost a round trip or more to check.
func EventuallyEvery(t testing.TB, timeout, every time.Duration, what string, cond func() bool) {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start)-WallBack(start) >= timeout {
			if cond() {
				return
			}
			t.Fatalf("timed out waiting for %s (waited %v, the wall clock went back %v meanwhile)",
				what, time.Since(start).Round(time.Millisecond), WallBack(start))
		}
		time.Sleep(every)
	}
}

// WallBack is how far the wall clock went back since start: the elapsed
// monotonic time beyond the elapsed wall time.
func WallBack(start time.Time) time.Duration {
	now := time.Now()
	return max(0, now.Sub(start)-now.Round(0).Sub(start.Round(0)))
}

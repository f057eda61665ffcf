package redeq_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestReview13RecoveryKeepsScheduleHeadersAttempts attacks promise 6: a
// job that failed twice (its own RetryIntervals, MaxRetries, headers) is
// in flight on a consumer that dies (its heartbeats stop). The job that
// comes back must carry its attempts, headers, last error and retry
// schedule: the next failure schedules it at now + its third interval,
// not earlier, and its fourth failure... its retries still end in dead at
// MaxRetries. A job not yet due that a dead consumer never held must not
// run early because of the recovery.
func TestReview13RecoveryKeepsScheduleHeadersAttempts(t *testing.T) {
	t.Parallel() // its own Redis and processes: it runs beside the other fault tests
	_, be := privateServer(t)
	ctx := context.Background()
	cfg := testutil.Config(t)
	e := setup(t, be, cfg)

	var dead atomic.Bool
	hb := newScriptHook(t, "consumer/heartbeat.lua")
	hb.set(func(ctx context.Context, cmd redis.Cmder, next func() error) error {
		if dead.Load() {
			cmd.SetErr(errors.New("dead"))
			return cmd.Err()
		}
		return next()
	})
	// The dying consumer: fails attempts 0 and 1, then holds attempt 2
	// until it "dies".
	held := make(chan struct{}, 1)
	gone := make(chan struct{})
	t.Cleanup(func() { close(gone) })
	la := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		if job.ID != "j" {
			ch.Ack()
			return nil
		}
		if job.Attempt < 2 {
			return fmt.Errorf("fail %d", job.Attempt)
		}
		held <- struct{}{}
		<-gone // the process is gone: no outcome before the test ends
		return errors.New("too late")
	})
	a := e.hooked(t, hb)
	startWith(t, a, la)
	intervals := []time.Duration{50 * time.Millisecond, 50 * time.Millisecond, 4 * time.Second, 50 * time.Millisecond}
	require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j", MaxRetries: 4, RetryIntervals: intervals,
		Headers: map[string]string{"trace": "abc"}}))
	require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "later", Delay: 8 * time.Second}))
	select {
	case <-held:
	case <-time.After(10 * time.Second):
		t.Fatal("attempt 2 never held")
	}
	time.Sleep(cfg.ConsumerTimeout) // the delivery is old
	dead.Store(true)

	var got atomic.Pointer[redeq.Job]
	lb := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		if job.ID == "j" && got.Load() == nil {
			got.Store(job)
			return errors.New("fail after recovery")
		}
		ch.Ack()
		return nil
	})
	b := e.another(t, nil)
	startWith(t, b, lb)
	waitFor(t, 10*time.Second, "recovered j ran on b", func() bool { return got.Load() != nil })
	rj := got.Load()
	require.Equal(t, 2, rj.Attempt)
	require.Equal(t, 1, rj.Recoveries)
	require.Equal(t, 4, rj.MaxRetries)
	require.Equal(t, intervals, rj.RetryIntervals)
	require.Equal(t, "abc", rj.Headers["trace"])
	failedAt := time.Now()
	waitFor(t, 3*time.Second, "j scheduled", func() bool { return state(t, e.c, "t", "j") == redeq.StateScheduled })
	j, err := e.c.Get(ctx, "t", "j")
	require.NoError(t, err)
	require.Equal(t, 3, j.Attempt)
	wait := j.RunAt.Sub(failedAt)
	t.Logf("after recovery and a failure: attempt %d, due in %v (interval[2] = %v)", j.Attempt, wait, intervals[2])
	require.InDelta(t, float64(intervals[2]), float64(wait), float64(time.Second))
	for _, d := range lb.deliveries() {
		if d.job.ID == "later" {
			require.False(t, d.at.Before(failedAt.Add(8*time.Second-3*time.Second)), "a future job ran early")
		}
	}
}

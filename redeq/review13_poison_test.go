package redeq_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestReview13PoisonKillsBystanderOfAnotherTopic attacks promise 5 (and
// the design's "the jobs that ran beside it once or twice are counted at
// most twice and then run normally"): one service listens to two topics,
// "a" and "b", in one process. The job "poison" of "a" kills the process
// every time it runs. A healthy, slow job "b1" of "b" happens to run in
// the same process. Quarantine keeps a job alone only within its own
// listener (runner.idle), so the quarantined b1 keeps being fetched
// beside the quarantined poison of the other topic, is counted at every
// crash, and goes to the dead set as poison although it never failed.
func TestReview13PoisonKillsBystanderOfAnotherTopic(t *testing.T) {
	_, be := r13Server(t)
	ctx := context.Background()
	cfg := testutil.Config(t)
	cfg.MaxRecoveries = 3
	e := setup(t, be, cfg)
	require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "a", ID: "poison"}))
	require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "b", ID: "b1"}))
	require.NoError(t, e.c.Start(ctx)) // moves and reaps, consumes nothing

	var mu sync.Mutex
	var starts []string
	deadline := time.Now().Add(45 * time.Second)
	crashes := 0
	for state(t, e.c, "a", "poison") != redeq.StateDead {
		require.True(t, time.Now().Before(deadline), "the poison job never went dead")
		// A supervisor restarts the crashed service.
		c := r13StartChild(t, "twotopics", be.Addrs, false, cfg.Prefix, "", "R13_MAX_RECOVERIES=3", "R13_HOLD_MS=3000")
		go func() {
			for l := range c.lines {
				if strings.HasPrefix(l, "start ") {
					mu.Lock()
					starts = append(starts, l)
					mu.Unlock()
				}
			}
		}()
		<-c.drained // it dies by the poison job
		c.kill()
		crashes++
		waitFor(t, 10*time.Second, "poison recovered", func() bool { return state(t, e.c, "a", "poison") != redeq.StateInFlight })
		waitFor(t, 10*time.Second, "b1 recovered", func() bool { return state(t, e.c, "b", "b1") != redeq.StateInFlight })
	}
	mu.Lock()
	t.Logf("%d crashes; handler starts: %v", crashes, starts)
	mu.Unlock()
	b1, err := e.c.Get(ctx, "b", "b1")
	if errors.Is(err, redeq.ErrJobNotFound) {
		return // b1 ran to the end alone, and was acked
	}
	require.NoError(t, err)
	t.Logf("b1: state %s, recoveries %d, reason %q", b1.State, b1.Recoveries, b1.Reason)
	require.NotEqualf(t, redeq.StateDead, b1.State,
		"a healthy job of another topic, run beside the poison job, went dead as poison after %d recoveries: %q", b1.Recoveries, b1.Reason)
	require.LessOrEqual(t, b1.Recoveries, 2, "a bystander is counted at most twice")
}

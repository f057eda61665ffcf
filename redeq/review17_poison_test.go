package redeq_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestReview17LowMaxRecoveriesKillsBystander: review 17 attacked promise
// 1 ("a healthy job that was in flight beside a poison job through
// crashes is not sent to dead because of the poison job") with
// MaxRecoveries 1, which config.Validate then accepted. Quarantine starts
// at the second recovery (ready.Quarantine = 2), but the recovery script
// sends a job recovered more than MaxRecoveries times to the dead set:
// with 1, the healthy job b1 that ran beside the poison job through two
// crashes (not yet quarantined at the second) went dead with it. A
// MaxRecoveries below Quarantine is now refused; at the least one
// accepted, b1 survives.
func TestReview17LowMaxRecoveriesKillsBystander(t *testing.T) {
	t.Parallel()
	_, be := privateServer(t)
	ctx := context.Background()
	cfg := testutil.Config(t)
	cfg.MaxRecoveries = 1
	_, err := redeq.New(be.New(t), cfg)
	require.ErrorContains(t, err, "MaxRecoveries", "MaxRecoveries 1 is refused")
	cfg.MaxRecoveries = config.MinMaxRecoveries
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
		c := startFaultChild(t, "twotopics", be, cfg.Prefix, "", childMaxRecoveriesEnv+"="+fmt.Sprint(config.MinMaxRecoveries), childHoldEnv+"=3000")
		go func() {
			for l := range c.lines {
				if strings.HasPrefix(l, "start ") {
					mu.Lock()
					starts = append(starts, l)
					mu.Unlock()
				}
			}
		}()
		<-c.drained
		c.kill()
		crashes++
		waitFor(t, 10*time.Second, "poison recovered", func() bool { return state(t, e.c, "a", "poison") != redeq.StateInFlight })
		waitFor(t, 10*time.Second, "b1 recovered", func() bool { return state(t, e.c, "b", "b1") != redeq.StateInFlight })
	}
	mu.Lock()
	t.Logf("%d crashes; handler starts: %v", crashes, starts)
	mu.Unlock()
	st := state(t, e.c, "b", "b1")
	t.Logf("b1 is %q", st)
	require.NotEqual(t, redeq.StateDead, st, "the healthy job b1 went dead with the poison job (MaxRecoveries %d)", cfg.MaxRecoveries)
}

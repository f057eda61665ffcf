package redeq_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestAddsRacingRetirementAreMoved: a producer that keeps adding to a
// topic at the pace it retires at (RetireAfter 1 s, no consumer) never has
// a job stranded: each one reaches the ready list when due, whether its
// Add landed before, during or after the topic's retirement.
func TestAddsRacingRetirementAreMoved(t *testing.T) {
	testutil.FaultTier(t)
	eachReal(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		const topic = "retiring"
		mod := func(c *config.Config) { c.RetireAfter = time.Second }
		m1, m2 := e.another(t, mod), e.another(t, mod)
		require.NoError(t, m1.Start(ctx))
		require.NoError(t, m2.Start(ctx))
		producer := e.another(t, mod) // not started: it only adds
		var retired int
		for i := range 15 {
			id := fmt.Sprint("j", i)
			require.NoError(t, producer.Add(ctx, &redeq.Job{Topic: topic, ID: id, Delay: time.Duration(rand.IntN(300)) * time.Millisecond}))
			waitFor(t, 2*time.Second+20*e.cfg.ScanInterval, "job "+id+" moved to ready", func() bool {
				j, err := e.c.Get(ctx, topic, id)
				require.NoError(t, err)
				return j.State == redeq.StateReady
			})
			_, err := e.c.Delete(ctx, topic, id)
			require.NoError(t, err)
			time.Sleep(time.Duration(700+rand.IntN(1300)) * time.Millisecond)
			ts, err := e.c.Topics(ctx)
			require.NoError(t, err)
			if len(ts) == 0 {
				retired++
			}
		}
		t.Logf("the topic was retired at %d of 15 adds", retired)
		require.Positive(t, retired, "the topic never retired: the race was not run")
	})
}

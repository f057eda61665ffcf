package redeq_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// loseEverything makes e's deployment forget every key of the test, as a
// restart without persistence does: the embedded server is flushed, a
// shared real one loses the keys under the test's prefix (other suites'
// keys stay).
func loseEverything(t *testing.T, e *env) {
	t.Helper()
	if e.be.Mini != nil {
		e.be.Mini.FlushAll()
		return
	}
	ctx := context.Background()
	for _, k := range testutil.Keys(t, e.rdb, e.cfg.Prefix) {
		require.NoError(t, e.rdb.Del(ctx, k).Err())
	}
}

// checkOutcomeAfterDataLoss starts c with a listener that holds each
// delivery, lets Redis lose its data (lose) while the handler of job x
// runs, adds x again, and checks that the old handler's ack spares the new
// delivery of x, which the same consumer runs to its own outcome (a
// rejoin). settled counts the settle script's replies on c's connection.
func checkOutcomeAfterDataLoss(t *testing.T, c *redeq.Client, settled *atomic.Int64, lose func()) {
	t.Helper()
	ctx := context.Background()
	runs := make(chan held, 4)
	l := newListener("t", func(_ context.Context, job *redeq.Job, ch *redeq.Channel) error {
		h := held{job: job, done: make(chan struct{})}
		runs <- h
		<-h.done
		if job.Headers["run"] == "new" {
			ch.Rejoin(time.Hour)
		} else {
			ch.Ack()
		}
		return nil
	})
	l.workers = 2
	startWith(t, c, l)

	require.NoError(t, c.Add(ctx, &redeq.Job{Topic: "t", ID: "x", Headers: map[string]string{"run": "old"}}))
	stale := next(t, runs, "first delivery of x")
	lose()
	testutil.Eventually(t, 10*time.Second, "x added again", func() bool {
		return c.Add(ctx, &redeq.Job{Topic: "t", ID: "x", Headers: map[string]string{"run": "new"}}) == nil
	})
	again := next(t, runs, "delivery of the re-added x")
	require.Equal(t, "new", again.job.Headers["run"])
	job, err := c.Get(ctx, "t", "x")
	require.NoError(t, err)
	require.Equal(t, redeq.StateInFlight, job.State)
	require.Equal(t, c.ConsumerID(), job.Consumer, "the same consumer holds both deliveries")

	before := settled.Load()
	close(stale.done)
	testutil.Eventually(t, 5*time.Second, "stale outcome settled", func() bool { return settled.Load() > before })
	require.Equal(t, redeq.StateInFlight, state(t, c, "t", "x"), "the old delivery's ack acted on the new one")

	close(again.done)
	testutil.Eventually(t, 5*time.Second, "new outcome applied", func() bool { return state(t, c, "t", "x") == redeq.StateScheduled })
	job, err = c.Get(ctx, "t", "x")
	require.NoError(t, err)
	require.Equal(t, "new", job.Headers["run"])
}

// TestDeliveryTokenUniqueAcrossDataLoss: Redis loses its data while a
// handler runs job x (a restart without persistence, or a failover that
// loses the last writes); x is added again and the same consumer fetches
// it. The two deliveries have different tokens, so the old handler's ack
// is dropped and the new delivery runs to its own outcome: x is neither
// lost nor acked by a handler that did not run it.
func TestDeliveryTokenUniqueAcrossDataLoss(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		settles, settled := completions(t, "ack/settle.lua")
		checkOutcomeAfterDataLoss(t, e.hooked(t, settles), settled, func() { loseEverything(t, e) })
	})
}

// TestDeliveryTokenUniqueAcrossServerRestart is
// TestDeliveryTokenUniqueAcrossDataLoss with a real restart: the
// redis-server process is killed and started again empty (no persistence)
// while the handler runs.
func TestDeliveryTokenUniqueAcrossServerRestart(t *testing.T) {
	srv := testutil.StartServer(t)
	rdb := srv.Client(nil)
	settles, settled := completions(t, "ack/settle.lua")
	rdb.AddHook(settles)
	c, err := redeq.New(rdb, testutil.Config(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
	checkOutcomeAfterDataLoss(t, c, settled, func() {
		srv.Kill()
		srv.Start()
	})
}

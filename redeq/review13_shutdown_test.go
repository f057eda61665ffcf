package redeq_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestReview13ShutdownDuringPause attacks promise 7: a consumer shuts down
// while Redis is paused (CLIENT PAUSE ALL, 4 s). Shutdown must return
// within its budget; its jobs, which it could not roll back, must run
// again on another client (unspent) soon after Redis answers again; once
// everything has shut down no goroutine may be left.
func TestReview13ShutdownDuringPause(t *testing.T) {
	if !isolated(t) {
		return // it counts goroutines or takes the quarantine slot: a process of its own
	}
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
	srv, be := privateServer(t)
	ctx := context.Background()
	cfg := testutil.Config(t)
	e := setup(t, be, cfg)
	release := make(chan struct{})
	a := e.another(t, nil)
	la := blockingListener("t", release)
	startWith(t, a, la)
	for i := range 2 {
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint("j", i)}))
	}
	waitFor(t, 5*time.Second, "a holds both", func() bool { return la.count() == 2 })
	lb := newListener("t", nil)
	startWith(t, e.c, lb)
	time.Sleep(2 * cfg.ConsumerTimeout)

	admin := srv.Client(nil)
	require.NoError(t, admin.Do(ctx, "CLIENT", "PAUSE", "4000", "ALL").Err())
	paused := time.Now()
	sctx, cancel := context.WithTimeout(ctx, time.Second)
	err := shutdownLogStuck(t, sctx, a, "Shutdown still running 2.5 s after it began", func(g string) bool {
		return strings.Contains(g, "Shutdown")
	})
	cancel()
	took := time.Since(paused)
	n, some := redeqGoroutines()
	t.Logf("Shutdown during the pause returned after %v: %v; redeq goroutines alive in the process right after (both clients): %d", took, err, n)
	_ = some
	defer func() {
		require.Lessf(t, took, 3*time.Second, "Shutdown(ctx with a 1 s deadline) overran its budget while Redis was paused")
	}()

	waitFor(t, 15*time.Second, "both jobs ran on the other client", func() bool { return lb.count() >= 2 })
	t.Logf("jobs ran again %v after the pause began (pause 4 s)", time.Since(paused))
	for _, d := range lb.deliveries() {
		require.Zero(t, d.job.Attempt)
	}
	close(release)
	require.NoError(t, e.c.Shutdown(ctx))
}

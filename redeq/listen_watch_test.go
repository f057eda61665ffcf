package redeq_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestSubscribingAgainHangsButLooksGoOn: the promise that a job is
// delivered late by at most about 10 x ScanInterval while the client's
// subscription carries nothing, also when subscribing again hangs. L's
// subscription goes deaf and every new connection to Redis hangs in its
// handshake (go-redis waits its read timeout, 3 s, each time), so every
// attempt to subscribe again hangs. L's other commands use the 16
// connections its pool opened before. Jobs added one after another over 5 s
// must each run within 2 x 10 ScanIntervals: the client keeps looking at
// the ready lists whatever its subscription does.
func TestSubscribingAgainHangsButLooksGoOn(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	t.Parallel()
	addr := standaloneAddr(t)
	ctx := context.Background()
	p := testutil.StartProxy(t, addr)
	topic, m, _, l, _ := proxiedListenerWith(t, p, addr, redis.Options{PoolSize: 16, MinIdleConns: 16})
	within := 2 * 10 * testutil.Fast().ScanInterval

	p.HoldNew.Store(true)
	p.Deaf.Store(true)
	// The listener gives up on its deaf subscription: a first attempt to
	// subscribe again is under way, and hangs.
	testutil.Eventually(t, 10*time.Second, "the deaf subscription closed", func() bool { return p.SubscriptionsOpen() == 0 })
	var worst time.Duration
	for i := range 10 {
		id := fmt.Sprint("held", i)
		start := time.Now()
		require.NoError(t, m.Add(ctx, &redeq.Job{Topic: topic, ID: id}))
		testutil.Eventually(t, within, fmt.Sprintf("job %d of 10, added while subscribing again hangs, ran", i+1), func() bool { return l.byID()[id] == 1 })
		worst = max(worst, time.Since(start))
		time.Sleep(500 * time.Millisecond) // a pace, not a wait: the jobs come over seconds of the hang
	}
	t.Logf("the latest of 10 jobs ran %v after its Add", worst)
}

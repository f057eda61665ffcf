package redeq_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/bucket"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestReview11SilentSubscriptionStrandsJobs attacks promise 3 (a lost
// pub/sub message cannot strand a job; it is delivered within a few
// ScanIntervals) and the brief's "Redisson: due items stay stranded ...
// after its pub/sub subscription silently dies".
//
// Two clients: M (moves the topic's only bucket) and L (the only listener,
// connected through a proxy). L's subscription connection stays open but
// stops carrying anything from the server (a half-open connection, a
// middlebox that stopped forwarding): every wake-up and ready notification
// to L is lost, and go-redis's health check only writes a PING, which
// succeeds. L heartbeats, announces and fetches normally otherwise. A job
// that M moves to the ready list must still reach L within a few
// ScanIntervals; we allow 100 of them (10 s).
func TestReview11SilentSubscriptionStrandsJobs(t *testing.T) {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		testutil.RealBackends(t) // skips, or fails under REDEQ_REQUIRE_SERVER
		t.Skip("no REDIS_ADDR")
	}
	ctx := context.Background()
	cfg := testutil.Config(t)
	proxy := startFaultProxy(t, addr)

	direct := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { direct.Close() })
	viaProxy := redis.NewClient(&redis.Options{Addr: proxy.Addr()})
	t.Cleanup(func() { viaProxy.Close() })

	m, err := redeq.New(direct, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Shutdown(context.Background()) })
	lc, err := redeq.New(viaProxy, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = lc.Shutdown(context.Background()) })

	topic := ""
	for i := 0; topic == ""; i++ {
		if name := fmt.Sprint("t", i); bucket.Owner([]string{m.ConsumerID(), lc.ConsumerID()}, keys.Address(name, 0)) == m.ConsumerID() {
			topic = name
		}
	}
	require.NoError(t, m.Add(ctx, &redeq.Job{Topic: topic, ID: "before"}))
	require.NoError(t, m.Start(ctx))
	l := newListener(topic, nil)
	startWith(t, lc, l)
	waitFor(t, 10*time.Second, "the job added before the cut ran (setup works)", func() bool { return l.byID()["before"] == 1 })
	waitFor(t, 10*time.Second, "both clients announced", func() bool {
		return direct.ZCard(ctx, keys.Movers(cfg.Prefix)).Val() == 2
	})
	time.Sleep(3 * cfg.ScanInterval) // M's loop for the bucket runs

	proxy.deaf.Store(os.Getenv("R11_CONTROL") == "") // L's subscription goes silent
	start := time.Now()
	for i := range 5 {
		require.NoError(t, m.Add(ctx, &redeq.Job{Topic: topic, ID: fmt.Sprint("after", i), Delay: time.Duration(i) * 100 * time.Millisecond}))
	}
	deadline := 100 * cfg.ScanInterval
	ok := false
	for time.Since(start) < deadline {
		if len(l.byID()) == 6 {
			ok = true
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	st := stats(t, m, topic)
	require.Truef(t, ok, "after %v (%d ScanIntervals) with a silently dead subscription, %d of 5 due jobs ran; stats: ready=%d scheduled=%d inflight=%d",
		deadline, deadline/cfg.ScanInterval, len(l.byID())-1, st.Ready, st.Scheduled, st.InFlight)
	t.Logf("all delivered %v after the cut", time.Since(start))
}

package redeq_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/bucket"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// r12Setup starts M (direct; owns the topic's only bucket) and L (the only
// listener, through proxy p). It returns the topic, M, L's listener and a
// direct client.
func r12Setup(t *testing.T, p *faultProxy, addr string) (string, *redeq.Client, *redeq.Client, *listener, *redis.Client) {
	t.Helper()
	return r12SetupWith(t, p, addr, redis.Options{})
}

// r12SetupWith is r12Setup with L's client built from opts (its Addr set
// to the proxy's).
func r12SetupWith(t *testing.T, p *faultProxy, addr string, opts redis.Options) (string, *redeq.Client, *redeq.Client, *listener, *redis.Client) {
	t.Helper()
	ctx := context.Background()
	cfg := testutil.Config(t)
	direct := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { direct.Close() })
	opts.Addr = p.Addr()
	viaProxy := redis.NewClient(&opts)
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
	waitFor(t, 10*time.Second, "the job added before the fault ran (setup works)", func() bool { return l.byID()["before"] == 1 })
	waitFor(t, 10*time.Second, "both clients announced", func() bool {
		return direct.ZCard(ctx, keys.Movers(cfg.Prefix)).Val() == 2
	})
	time.Sleep(3 * cfg.ScanInterval)
	return topic, m, lc, l, direct
}

func r12Addr(t *testing.T) string {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		testutil.RealBackends(t)
		t.Skip("no REDIS_ADDR")
	}
	return addr
}

// TestReview12SubscriptionDropsMessagesButAnswersPing attacks promise 1:
// "delivered ... also while the client's pub/sub subscription drops all
// messages while the connection stays open ... late by at most about 10 x
// ScanInterval, never stranded". The proxy drops every pub/sub message
// push to L but forwards the PING replies on the same connection (as a
// subscription on a cluster node cut off from the cluster bus would
// behave). The silence probe in listen() is satisfied by the PONG, so it
// never resubscribes nor looks at the ready lists, and fetchers do not poll.
func TestReview12SubscriptionDropsMessagesButAnswersPing(t *testing.T) {
	addr := r12Addr(t)
	ctx := context.Background()
	p := startFaultProxy(t, addr)
	topic, m, _, l, _ := r12Setup(t, p, addr)
	scan := testutil.Fast().ScanInterval

	p.dropMsgs.Store(os.Getenv("R12_CONTROL") == "")
	start := time.Now()
	for i := range 5 {
		require.NoError(t, m.Add(ctx, &redeq.Job{Topic: topic, ID: fmt.Sprint("after", i), Delay: time.Duration(i) * 100 * time.Millisecond}))
	}
	deadline := 2 * 10 * scan // 2x slack on 10 x ScanInterval
	if deadline < 3*time.Second {
		deadline = 3 * time.Second
	}
	if d, err := time.ParseDuration(os.Getenv("R12_WAIT")); err == nil {
		deadline = d
	}
	ok := false
	for time.Since(start) < deadline+400*time.Millisecond {
		if len(l.byID()) == 6 {
			ok = true
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	st := stats(t, m, topic)
	require.Truef(t, ok, "after %v with a subscription that drops messages but answers PINGs (%d pushes dropped), %d of 5 due jobs ran; stats: ready=%d scheduled=%d inflight=%d",
		time.Since(start), p.dropped.Load(), len(l.byID())-1, st.Ready, st.Scheduled, st.InFlight)
	t.Logf("all delivered %v after the fault", time.Since(start))
}

var _ = runtime.NumGoroutine

// TestReview12DeafSubscriptionLeaksAndShutdown attacks promise 1: "The
// client must not leak goroutines or connections while it resubscribes
// (e.g. over a minute of a deaf proxy), and Shutdown must return promptly".
// L's subscriptions go fully deaf for R12_DEAF (default 40 s); the test
// counts goroutines and open subscribed connections at 10 s and at the end,
// checks a job added at the end is still delivered, then times Shutdown.
func TestReview12DeafSubscriptionLeaksAndShutdown(t *testing.T) {
	if !isolated(t) {
		return // it counts goroutines or takes the quarantine slot: a process of its own
	}
	addr := r12Addr(t)
	ctx := context.Background()
	p := startFaultProxy(t, addr)
	topic, m, lc, l, _ := r12Setup(t, p, addr)
	total := 40 * time.Second
	if d, err := time.ParseDuration(os.Getenv("R12_DEAF")); err == nil {
		total = d
	}
	p.deaf.Store(true)
	time.Sleep(10 * time.Second)
	g1, s1, o1 := runtime.NumGoroutine(), p.subOpen.Load(), p.open.Load()
	time.Sleep(total - 10*time.Second)
	g2, s2, o2 := runtime.NumGoroutine(), p.subOpen.Load(), p.open.Load()
	t.Logf("at 10s: goroutines=%d subscribed conns open=%d all conns open=%d; at %v: goroutines=%d subscribed open=%d all open=%d; subscriptions made=%d",
		g1, s1, o1, total, g2, s2, o2, p.subs.Load())
	require.LessOrEqualf(t, s2, int64(3), "subscribed connections left open after %v deaf", total)
	require.LessOrEqualf(t, o2, o1+3, "open connections grew from %d to %d", o1, o2)
	require.LessOrEqualf(t, g2, g1+15, "goroutines grew from %d to %d", g1, g2)

	require.NoError(t, m.Add(ctx, &redeq.Job{Topic: topic, ID: "late"}))
	waitFor(t, 4*time.Second, "a job added while deaf ran within 2 x 10 ScanIntervals", func() bool { return l.byID()["late"] == 1 })

	start := time.Now()
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	err := lc.Shutdown(sctx)
	took := time.Since(start)
	t.Logf("Shutdown took %v (err %v)", took, err)
	require.NoError(t, err)
	require.Lessf(t, took, 2*time.Second, "Shutdown of a client with a deaf subscription took %v", took)
}

// TestReview12ShutdownWhileMessagesDropped: Shutdown's promptness while the
// subscription drops messages but answers PINGs, and while it delays every
// frame by 3 s.
func TestReview12ShutdownWhileSubscriptionMisbehaves(t *testing.T) {
	addr := r12Addr(t)
	for _, mode := range []string{"dropMsgs", "delay"} {
		t.Run(mode, func(t *testing.T) {
			p := startFaultProxy(t, addr)
			_, _, lc, _, _ := r12Setup(t, p, addr)
			if mode == "dropMsgs" {
				p.dropMsgs.Store(true)
			} else {
				p.delay.Store(int64(3 * time.Second))
			}
			time.Sleep(2500 * time.Millisecond)
			start := time.Now()
			sctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err := lc.Shutdown(sctx)
			took := time.Since(start)
			t.Logf("Shutdown took %v (err %v)", took, err)
			require.NoError(t, err)
			require.Lessf(t, took, 2*time.Second, "Shutdown took %v", took)
		})
	}
}

// TestReview12SubscriptionPartialDropsAndDelays attacks promise 1 with a
// subscription that loses only some messages (90% of the pushes, PING
// replies pass) or delays every frame by 5 s, while another topic of the
// deployment keeps producing (so the subscription is never silent). Each of
// 5 due jobs must run within 2 x 10 ScanIntervals of its due time.
func TestReview12SubscriptionPartialDropsAndDelays(t *testing.T) {
	t.Parallel()
	addr := r12Addr(t)
	for _, mode := range []string{"drop90", "delay5s"} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			p := startFaultProxy(t, addr)
			topic, m, _, l, _ := r12Setup(t, p, addr)
			scan := testutil.Fast().ScanInterval
			stop := make(chan struct{})
			done := make(chan struct{})
			go func() { // background traffic: wake-ups on another topic
				defer close(done)
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					case <-time.After(50 * time.Millisecond):
					}
					_ = m.Add(ctx, &redeq.Job{Topic: topic + "bg", ID: fmt.Sprint(i), Delay: time.Hour - time.Duration(i)*time.Second}) // each the earliest: a wake-up
				}
			}()
			defer func() { close(stop); <-done }()
			if mode == "drop90" {
				p.setDropRate(0.9)
			} else {
				p.delay.Store(int64(5 * time.Second))
			}
			time.Sleep(6 * time.Second) // the fault is established
			due := map[string]time.Time{}
			for i := range 5 {
				id := fmt.Sprint("j", i)
				j := &redeq.Job{Topic: topic, ID: id, Delay: time.Duration(i) * 300 * time.Millisecond}
				due[id] = time.Now().Add(j.Delay)
				require.NoError(t, m.Add(ctx, j))
			}
			bound := 2 * 10 * scan
			time.Sleep(1200*time.Millisecond + bound + 500*time.Millisecond)
			var bad []string
			seen := map[string]time.Time{}
			for _, d := range l.deliveries() {
				if _, ok := seen[d.job.ID]; !ok {
					seen[d.job.ID] = d.at
				}
			}
			for id, at := range due {
				got, ok := seen[id]
				if ok {
					t.Logf("%s ran %v after due", id, got.Sub(at).Round(time.Millisecond))
				}
				switch {
				case !ok:
					bad = append(bad, fmt.Sprintf("%s not delivered %v after due", id, time.Since(at).Round(time.Millisecond)))
				case got.Sub(at) > bound:
					bad = append(bad, fmt.Sprintf("%s late by %v", id, got.Sub(at).Round(time.Millisecond)))
				}
			}
			require.Emptyf(t, bad, "mode %s: bound %v (2 x 10 ScanIntervals); dropped pushes %d", mode, bound, p.dropped.Load())
		})
	}
}

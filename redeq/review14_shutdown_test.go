package redeq_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// serverPid returns the process id of srv.
func serverPid(t *testing.T, srv *testutil.Server) int {
	t.Helper()
	info, err := srv.Client(nil).Info(context.Background(), "server").Result()
	require.NoError(t, err)
	m := regexp.MustCompile(`process_id:(\d+)`).FindStringSubmatch(info)
	require.NotNil(t, m)
	pid, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	return pid
}

// TestReview14ShutdownWhileRedisStopped attacks promise 4: Shutdown(ctx)
// returns within about a second of ctx's deadline while Redis hangs, and
// leaks no goroutine: the calls it left behind end within go-redis's own
// timeouts; what it could not roll back runs again later, unspent.
//
//   - "sigstop": the redis-server process is stopped (SIGSTOP) while the
//     consumer runs jobs.
//   - "reset-then-sigstop": the subscription's connection is reset (CLIENT
//     KILL TYPE pubsub: a network blip, a proxy restart) just before the
//     server stops. go-redis reconnects the subscription inside
//     PubSub.ReceiveTimeout while holding the PubSub's mutex, and the new
//     connection's handshake waits for ReadTimeout (3 s) whatever the ctx;
//     Shutdown closes the subscription (redeq/runtime.go closePubSub ->
//     PubSub.Close, which takes that mutex) outside any budget, and only
//     then computes the budget for the movers (at least another 500 ms).
func TestReview14ShutdownWhileRedisStopped(t *testing.T) {
	if !isolated(t) {
		return // it counts goroutines or takes the quarantine slot: a process of its own
	}
	for _, mode := range []string{"sigstop", "reset-then-sigstop"} {
		t.Run(mode, func(t *testing.T) {
			srv, be := privateServer(t)
			ctx := context.Background()
			cfg := testutil.Config(t)
			pid := serverPid(t, srv)
			admin := srv.Client(nil)
			t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })

			e := setup(t, be, cfg) // the producer, never started
			a := e.another(t, nil)
			la := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
				<-ctx.Done() // returns when canceled
				return ctx.Err()
			})
			la.workers = 4
			startWith(t, a, la)
			for i := range 4 {
				require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint("j", i)}))
			}
			waitFor(t, 5*time.Second, "a holds all four", func() bool { return la.count() == 4 })
			time.Sleep(2 * cfg.ConsumerTimeout)

			if mode == "reset-then-sigstop" {
				require.NoError(t, admin.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err())
			}
			require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
			stopped := time.Now()
			time.Sleep(100 * time.Millisecond)

			sctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			began := time.Now()
			err := shutdownLogStuck(t, sctx, a, "still running 2.5 s after Shutdown began", func(g string) bool {
				return strings.Contains(g, "redeq.(*Client).Shutdown") || strings.Contains(g, "PubSub).Close")
			})
			took := time.Since(began)
			t.Logf("%s: Shutdown(ctx with a 1 s deadline) returned after %v: %v", mode, took, err)

			// redeq's goroutines must end soon after Shutdown returned
			// (Redis still stopped): go-redis's read timeout is 3 s.
			returned := time.Now()
			n, some := redeqGoroutines()
			at5 := ""
			for n > 0 && time.Since(returned) < 20*time.Second {
				time.Sleep(250 * time.Millisecond)
				if at5 == "" && time.Since(returned) > 5*time.Second {
					at5 = redeqFrames()
				}
				if m, s := redeqGoroutines(); m > 0 || n == 0 {
					n, some = m, s
				} else {
					n = 0
				}
			}
			lingered := time.Since(returned)
			if lingered > 5*time.Second {
				t.Logf("at 5 s after Shutdown returned, still running:\n%s", at5)
			}
			t.Logf("redeq goroutines outlived Shutdown by %v (Redis stopped throughout)", lingered)
			_ = some
			require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))
			t.Logf("redis stopped for %v", time.Since(stopped))
			// What a could not roll back runs again, unspent, on another client.
			lb := newListener("t", nil)
			startWith(t, e.c, lb)
			waitFor(t, 15*time.Second, "all four ran again", func() bool { return len(lb.byID()) == 4 })
			for _, d := range lb.deliveries() {
				require.Zerof(t, d.job.Attempt, "job %s ran again with an attempt spent", d.job.ID)
			}
			require.LessOrEqualf(t, took, 2250*time.Millisecond, "Shutdown(ctx with a 1 s deadline) took %v while Redis was stopped", took)
			// Calls left behind (a mover's lock release, the fleet leave)
			// end when go-redis gives up: its dial (5 s) and read (3 s)
			// timeouts, which ignore ctx, bound them; operations.md says so.
			require.Lessf(t, lingered, 18*time.Second, "redeq goroutines (movers releasing locks, leaving the fleet) outlived Shutdown by %v", lingered)
		})
	}
}

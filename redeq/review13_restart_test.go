package redeq_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestReview13RestartKillDuringDowntime attacks promises 1, 3 and 4: the
// redis-server restarts (with AOF, appendfsync always; and without any
// persistence) while two live clients run slow jobs; a consumer process
// holding jobs is SIGKILLed while Redis is down. With AOF its jobs run
// again unspent and no live consumer's job is recovered. Without
// persistence every job is gone with the data; a consumer killed after
// the restart still has the jobs added since recovered.
func TestReview13RestartKillDuringDowntime(t *testing.T) {
	t.Parallel() // its own Redis and processes: it runs beside the other fault tests
	for _, persist := range []bool{true, false} {
		t.Run(fmt.Sprintf("aof=%v", persist), func(t *testing.T) {
			var args []string
			if persist {
				args = []string{"--appendonly", "yes", "--appendfsync", "always"}
			}
			srv, be := privateServer(t, args...)
			ctx := context.Background()
			cfg := testutil.Config(t)
			// Live consumers get a ConsumerTimeout after the restart to
			// heartbeat again; 600 ms is too thin a margin for a new
			// connection under a loaded CI run (its dial retries back off).
			cfg.ConsumerTimeout, cfg.HeartbeatInterval = 3*time.Second, time.Second
			e := setup(t, be, cfg)
			runs := &jobRuns{}
			ch, held := startHolder(t, e, 15*time.Second, 4, nil)
			startSlowConsumers(t, e, runs, 2)
			const n = 20
			for i := range n {
				require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint("j", i), Delay: time.Duration(i) * 100 * time.Millisecond}))
			}
			time.Sleep(1500 * time.Millisecond)
			srv.Stop()
			time.Sleep(500 * time.Millisecond)
			ch.kill()
			time.Sleep(1500 * time.Millisecond)
			srv.Start()
			restarted := time.Now()
			if !persist {
				// Everything is gone; a new consumer process takes new jobs and dies.
				ch2 := startFaultChild(t, "slow", be, cfg.Prefix, "t", childHoldForever)
				ch2.expect(t, "id ", 15*time.Second)
				time.Sleep(time.Second)
				for i := range 30 {
					require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint("n", i)}))
				}
				held = map[string]bool{}
				select {
				case l := <-ch2.lines:
					t.Logf("second child: %s", l)
				case <-time.After(10 * time.Second):
					t.Fatal("second child took nothing after the restart")
				}
				time.Sleep(500 * time.Millisecond)
				ch2.kill()
				for len(ch2.lines) > 0 {
					if l := <-ch2.lines; len(l) > 6 && l[:6] == "start " {
						held[l[6:]] = true
					}
				}
				waitFor(t, 20*time.Second, "every new job ran", func() bool { return runs.ranAll("n", 30, nil) })
				t.Logf("after a restart without persistence, %d+ jobs of a killed consumer and all new jobs ran within %v", len(held), time.Since(restarted))
				return
			}
			waitFor(t, 30*time.Second, "every job ran", func() bool { return runs.ranAll("j", n, held) })
			t.Logf("all ran %v after the restart", time.Since(restarted))
			var bad []string
			for id, js := range runs.snapshot() {
				want := 0
				if held[id] {
					want = 1
				}
				if len(js) != 1 || js[0].Recoveries != want || js[0].Attempt != 0 {
					bad = append(bad, fmt.Sprintf("%s: first run rec=%d att=%d (held by the killed one: %v), runs %d", id, js[0].Recoveries, js[0].Attempt, held[id], len(js)))
				}
			}
			require.Empty(t, bad)
		})
	}
}

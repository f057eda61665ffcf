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

// TestReview13RedisTroubleWithKilledAndSlowConsumers attacks promises 1, 3
// and 4 on one real redis-server: three live clients run slow jobs (1.5 s,
// well over ConsumerTimeout 600 ms, so their jobs stay in flight across
// the trouble) while a fourth consumer process holds jobs and is killed
// during a CLIENT PAUSE WRITE. Then CLIENT PAUSE ALL, DEBUG SLEEP and a
// CLIENT KILL of every connection follow. Every job must run; the killed
// consumer's jobs run again with Attempt 0; no job of a live consumer is
// recovered (Recoveries 0, one run).
func TestReview13RedisTroubleWithKilledAndSlowConsumers(t *testing.T) {
	t.Parallel() // its own Redis and processes: it runs beside the other fault tests
	srv, be := privateServer(t, "--enable-debug-command", "yes")
	ctx := context.Background()
	cfg := testutil.Config(t)
	e := setup(t, be, cfg)
	runs := &jobRuns{}
	ch, held := startHolder(t, e, 15*time.Second, 4, map[string]string{"h": "v"})
	startSlowConsumers(t, e, runs, 3)
	const n = 60
	for i := range n {
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint("j", i), Delay: time.Duration(i) * 150 * time.Millisecond}))
	}
	admin := srv.Client(nil)
	time.Sleep(2 * time.Second)

	require.NoError(t, admin.Do(ctx, "CLIENT", "PAUSE", "3000", "WRITE").Err())
	time.Sleep(time.Second)
	ch.kill()
	killed := time.Now()
	time.Sleep(3 * time.Second)
	require.NoError(t, admin.Do(ctx, "CLIENT", "PAUSE", "3000", "ALL").Err())
	time.Sleep(4 * time.Second)
	require.NoError(t, admin.Do(ctx, "DEBUG", "SLEEP", "2").Err())
	time.Sleep(time.Second)
	require.NoError(t, admin.Do(ctx, "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes").Err())
	require.NoError(t, admin.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err())

	waitFor(t, 30*time.Second, "every job ran", func() bool { return runs.ranAll("j", n, held) })
	got := runs.snapshot()
	runs.mu.Lock()
	var lastRecovered time.Time
	for id := range held {
		if a := runs.at[id]; a.After(lastRecovered) {
			lastRecovered = a
		}
	}
	runs.mu.Unlock()
	t.Logf("killed consumer's jobs all ran again %v after the kill (trouble lasted ~10s from the kill)", lastRecovered.Sub(killed))
	for id := range held {
		j := got[id][0]
		require.Zero(t, j.Attempt, id)
		require.Equal(t, 1, j.Recoveries, id)
		require.Equal(t, "v", j.Headers["h"], id)
	}
	var bad []string
	for id, js := range got {
		if held[id] {
			continue
		}
		if len(js) != 1 || js[0].Recoveries != 0 || js[0].Attempt != 0 {
			var rs []string
			for _, j := range js {
				rs = append(rs, fmt.Sprintf("rec=%d att=%d", j.Recoveries, j.Attempt))
			}
			bad = append(bad, fmt.Sprintf("%s: %v", id, rs))
		}
	}
	t.Logf("killed %v ago", time.Since(killed))
	require.Emptyf(t, bad, "jobs of live consumers recovered or run twice through Redis trouble")
	_ = redis.Nil
}

package redeq_test

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// r12Live returns the movers announced within window, by the server clock.
func r12Live(t *testing.T, rdb redis.UniversalClient, prefix string, window time.Duration) []string {
	ctx := context.Background()
	now, err := rdb.Time(ctx).Result()
	require.NoError(t, err)
	ids, err := rdb.ZRangeByScore(ctx, keys.Movers(prefix), &redis.ZRangeBy{
		Min: fmt.Sprint(now.Add(-window).UnixMilli()), Max: "+inf"}).Result()
	require.NoError(t, err)
	return ids
}

// TestReview12FleetKilledStoppedAndBounded attacks promise 4: killed
// clients leave the live set within ~2.5 ScanIntervals and the movers ZSET
// does not keep them; a SIGSTOPped client is dropped and, after SIGCONT,
// rejoins.
func TestReview12FleetKilledStoppedAndBounded(t *testing.T) {
	t.Parallel()
	for _, be := range testutil.RealBackends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			cfg := testutil.Config(t)
			rdb := be.New(t)
			keep, err := redeq.New(rdb, cfg)
			require.NoError(t, err)
			t.Cleanup(func() { _ = keep.Shutdown(context.Background()) })
			require.NoError(t, keep.Start(ctx))
			start := func() (*child, string) {
				ids := make(chan string, 1)
				c := startChildKind(t, "mover", be, cfg.Prefix, "x", func(line string) {
					if id, ok := strings.CutPrefix(line, "id "); ok {
						ids <- id
					}
				})
				select {
				case id := <-ids:
					return c, id
				case <-time.After(15 * time.Second):
					t.Fatal("child did not start")
				}
				return nil, ""
			}
			live := cfg.ScanInterval * 5 / 2
			// 8 clients that are killed one after another.
			for i := range 8 {
				c, id := start()
				waitFor(t, 5*time.Second, "child announced", func() bool { return contains(r12Live(t, rdb, cfg.Prefix, live), id) })
				killed := c.kill()
				ok := false
				for time.Since(killed) < 2*live+cfg.ScanInterval {
					if !contains(r12Live(t, rdb, cfg.Prefix, live), id) {
						ok = true
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
				require.Truef(t, ok, "killed client %d still live %v after its death", i, time.Since(killed))
			}
			time.Sleep(2 * time.Second) // several prunes
			all := rdb.ZCard(ctx, keys.Movers(cfg.Prefix)).Val()
			require.LessOrEqualf(t, all, int64(2), "movers ZSET holds %d entries with 1 live client after 8 were killed", all)

			// SIGSTOP, then SIGCONT.
			c, id := start()
			waitFor(t, 5*time.Second, "child announced", func() bool { return contains(r12Live(t, rdb, cfg.Prefix, live), id) })
			require.NoError(t, c.cmd.Process.Signal(syscall.SIGSTOP))
			waitFor(t, 2*live+cfg.ScanInterval+500*time.Millisecond, "stopped client dropped", func() bool { return !contains(r12Live(t, rdb, cfg.Prefix, live), id) })
			time.Sleep(2 * time.Second)
			require.NoError(t, c.cmd.Process.Signal(syscall.SIGCONT))
			cont := time.Now()
			waitFor(t, 2*time.Second, "continued client rejoined", func() bool { return contains(r12Live(t, rdb, cfg.Prefix, live), id) })
			t.Logf("rejoined %v after SIGCONT", time.Since(cont))
			// and stays
			time.Sleep(1 * time.Second)
			require.True(t, contains(r12Live(t, rdb, cfg.Prefix, live), id), "continued client dropped again")
		})
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

package redeq_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// chaosEnv selects the chaos test's size: "ci" (reduced, run by .ci/run)
// or "full" (20,000 jobs, for manual runs).
const chaosEnv = "REDEQ_CHAOS"

type chaosSize struct {
	jobs      int
	maxDelay  time.Duration
	killEvery time.Duration
	consumers int
}

// chaosConfig is the consumers' settings: short enough to recover quickly
// from kills, long enough that a consumer slowed by the race detector is
// not taken for dead.
func chaosConfig(c *config.Config) {
	c.Concurrency = 4 // fetch, settle and recovery across buckets (and slots)
	c.HeartbeatInterval = 200 * time.Millisecond
	c.ConsumerTimeout = 3 * time.Second
	c.Retry = 3
	c.RetryIntervals = []time.Duration{50 * time.Millisecond, 100 * time.Millisecond}
	c.Workers = 8
}

// runChaosChild consumes topic "chaos": it fails one call in ten at random
// and prints "ran <id> <start unix ns> <attempt> <recoveries> ok|fail" for
// every call,
// before it returns.
func runChaosChild() {
	c := childClient(chaosConfig)
	l := newListener("chaos", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		start := time.Now().UnixNano()
		time.Sleep(time.Duration(rand.IntN(40)) * time.Millisecond) // work, so kills catch jobs in flight
		if rand.IntN(10) == 0 {
			fmt.Printf("ran %s %d %d %d fail\n", job.ID, start, job.Attempt, job.Recoveries)
			return errors.New("chaos")
		}
		fmt.Printf("ran %s %d %d %d ok\n", job.ID, start, job.Attempt, job.Recoveries)
		ch.Ack()
		return nil
	})
	if err := c.Register(l); err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	// Redis may be restarting right now: keep trying, as a service would.
	for c.Start(context.Background()) != nil {
		time.Sleep(200 * time.Millisecond)
	}
	select {}
}

// run is one handler call reported by a child.
type run struct {
	instance  int
	at        time.Time
	recovered bool
	ok        bool
}

// TestChaos: jobs with delays over consumer processes that are killed with
// SIGKILL every few seconds, handlers that fail 10% of calls, a Redis
// restart mid-run (AOF, appendfsync always) and deletes before due time.
// Nothing may be lost, no deleted job may run, and every duplicate must be
// explained by a kill or the Redis restart.
func TestChaos(t *testing.T) {
	var size chaosSize
	switch os.Getenv(chaosEnv) {
	case "ci":
		size = chaosSize{jobs: 3000, maxDelay: 3 * time.Second, killEvery: 700 * time.Millisecond, consumers: 3}
	case "full":
		size = chaosSize{jobs: 20000, maxDelay: 5 * time.Second, killEvery: 2 * time.Second, consumers: 3}
	default:
		t.Skip("set REDEQ_CHAOS=ci (reduced; .ci/run does) or REDEQ_CHAOS=full")
	}
	t.Run("redis", func(t *testing.T) {
		srv := testutil.StartServer(t, "--appendonly", "yes", "--appendfsync", "always")
		runChaos(t, size, testutil.Backend{Name: "redis", Addrs: []string{srv.Addr}}, srv.Client(nil), srv)
	})
	for _, be := range testutil.Backends(t) {
		if be.Name == "cluster" {
			// CI's cluster is shared: kills, failures and deletes, no restart.
			t.Run("cluster", func(t *testing.T) { runChaos(t, size, be, be.New(t), nil) })
		}
	}
}

// runChaos runs the chaos scenario on be; srv, when not nil, is a server
// of the test's own that it kills and restarts once.
func runChaos(t *testing.T, size chaosSize, be testutil.Backend, rdb redis.UniversalClient, srv *testutil.Server) {
	cfg := testutil.Config(t)
	chaosConfig(&cfg)
	ctx := context.Background()
	producer, err := redeq.New(rdb, cfg)
	require.NoError(t, err)
	require.NoError(t, producer.Start(ctx)) // moves and reaps; consumes nothing
	t.Cleanup(func() { _ = producer.Shutdown(context.Background()) })

	var mu sync.Mutex
	runs := map[string][]run{}
	killedAt := map[int]time.Time{}
	instances := 0
	start := func() *child {
		mu.Lock()
		instances++
		inst := instances
		mu.Unlock()
		return startChildKind(t, "chaos", be, cfg.Prefix, "chaos", func(line string) {
			f := strings.Fields(line)
			if len(f) != 6 || f[0] != "ran" {
				t.Log("child:", line)
				return
			}
			ns, _ := strconv.ParseInt(f[2], 10, 64)
			mu.Lock()
			runs[f[1]] = append(runs[f[1]], run{instance: inst, at: time.Unix(0, ns), recovered: f[4] != "0", ok: f[5] == "ok"})
			mu.Unlock()
		})
	}
	children := make([]*child, size.consumers)
	ids := make([]int, size.consumers)
	for i := range children {
		children[i] = start()
		ids[i] = i + 1
	}

	// Add the jobs, and delete 5% of them right away, well before due.
	deleted := map[string]time.Time{}
	began := time.Now()
	for i := 0; i < size.jobs; i += 100 {
		batch := make([]*redeq.Job, 0, 100)
		for j := i; j < min(i+100, size.jobs); j++ {
			batch = append(batch, &redeq.Job{Topic: "chaos", ID: fmt.Sprint(j), Delay: time.Duration(rand.Int64N(int64(size.maxDelay)))})
		}
		require.NoError(t, producer.AddBatch(ctx, batch))
		for _, j := range batch {
			if rand.IntN(20) == 0 && j.Delay > 500*time.Millisecond {
				_, err := producer.Delete(ctx, "chaos", j.ID)
				require.NoError(t, err)
				deleted[j.ID] = time.Now()
			}
		}
	}

	// Kill a consumer every killEvery while jobs fall due; restart Redis once.
	kills := 0
	restartFrom, restartTo := time.Time{}, time.Time{}
	for time.Since(began) < size.maxDelay+2*time.Second {
		time.Sleep(size.killEvery)
		k := rand.IntN(len(children))
		at := children[k].kill()
		mu.Lock()
		killedAt[ids[k]] = at
		mu.Unlock()
		kills++
		children[k] = start()
		mu.Lock()
		ids[k] = instances
		mu.Unlock()
		if srv != nil && restartFrom.IsZero() && time.Since(began) > size.maxDelay/2 {
			restartFrom = time.Now()
			srv.Kill()
			time.Sleep(500 * time.Millisecond)
			srv.Start()
			restartTo = time.Now()
		}
	}

	// Wait until every job that was not deleted ran to success or is dead.
	want := size.jobs - len(deleted)
	var dead map[string]bool
	settled := func() bool {
		st, err := producer.Stats(ctx, "chaos")
		if err != nil || st.Pool != st.Dead {
			return false
		}
		list, err := producer.DeadJobs(ctx, "chaos", 10_000)
		if err != nil {
			return false
		}
		dead = map[string]bool{}
		for _, j := range list {
			dead[j.ID] = true
		}
		return true
	}
	require.Eventually(t, settled, 3*time.Minute, 100*time.Millisecond, "jobs still pending")

	mu.Lock()
	defer mu.Unlock()
	lost, ranAfterDelete, duplicates, byKill, byRestart, unexplained, recovered := 0, 0, 0, 0, 0, 0, 0
	for i := range size.jobs {
		id := fmt.Sprint(i)
		rs := runs[id]
		if at, ok := deleted[id]; ok {
			for _, r := range rs {
				if r.at.After(at) {
					ranAfterDelete++
				}
			}
			continue
		}
		var oks []run
		wasRecovered := false
		for _, r := range rs {
			if r.ok {
				oks = append(oks, r)
			}
			wasRecovered = wasRecovered || r.recovered
		}
		if wasRecovered {
			recovered++
		}
		if len(oks) == 0 && !dead[id] {
			lost++
			t.Logf("lost job %s: runs %+v", id, rs)
		}
		duplicates += max(len(oks)-1, 0)
		// Each extra successful run must follow one whose outcome a kill or
		// the restart may have swallowed.
		for k := 0; k+1 < len(oks); k++ {
			prev := oks[k]
			switch {
			case !killedAt[prev.instance].IsZero() && killedAt[prev.instance].After(prev.at):
				byKill++
			case srv != nil && prev.at.After(restartFrom.Add(-2*time.Second)) && prev.at.Before(restartTo.Add(2*time.Second)):
				byRestart++
			default:
				unexplained++
				t.Logf("unexplained duplicate of %s: %+v", id, oks)
			}
		}
	}
	restarts := 0
	if srv != nil {
		restarts = 1
	}
	t.Logf("chaos on %s: %d jobs (%d deleted, %d to run), %d consumer processes started, %d SIGKILLs, %d Redis restart; "+
		"jobs recovered from killed consumers %d; lost %d, dead after retries %d, deleted-then-ran %d, duplicates %d (after a kill %d, around the restart %d, unexplained %d)",
		be.Name, size.jobs, len(deleted), want, instances, kills, restarts, recovered, lost, len(dead), ranAfterDelete, duplicates, byKill, byRestart, unexplained)
	require.Zero(t, lost, "lost jobs")
	require.Zero(t, ranAfterDelete, "deleted jobs that ran")
	require.Zero(t, unexplained, "unexplained duplicates")
}

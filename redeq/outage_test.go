package redeq_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// lineLog collects every log line at Info and above, timestamped.
type lineLog struct {
	mu    sync.Mutex
	lines []string
	at    []time.Time
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		l.lines = append(l.lines, s)
		l.at = append(l.at, time.Now())
	}
	return len(p), nil
}

func (l *lineLog) since(t0 time.Time) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for i, s := range l.lines {
		if !l.at[i].Before(t0) {
			out = append(out, s)
		}
	}
	return out
}

// TestOutageOfManyBucketsRunsEachJobOnceAfter: on a topic with 16 buckets
// and two consuming clients, the redis-server process is stopped (SIGSTOP)
// for 10 s while jobs keep falling due. The loops back off and log a
// handful of lines; afterwards every job runs exactly once, none before
// its due time, and the jobs due during the outage run soon after it.
func TestOutageOfManyBucketsRunsEachJobOnceAfter(t *testing.T) {
	t.Parallel()
	srv, be := privateServer(t)
	ctx := context.Background()
	cfg := testutil.Config(t)
	cfg.Concurrency = 16
	var logs lineLog
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	e := setup(t, be, cfg)
	runs := map[string][]time.Time{}
	var mu sync.Mutex
	due := map[string]time.Time{}
	handler := func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		mu.Lock()
		runs[job.ID] = append(runs[job.ID], time.Now())
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		ch.Ack()
		return nil
	}
	l1, l2 := newListener("t", handler), newListener("t", handler)
	l1.workers, l2.workers = 4, 4
	startWith(t, e.c, l1)
	startWith(t, e.another(t, nil), l2)

	const n = 300
	base := time.Now()
	var jobs []*redeq.Job
	for i := range n {
		at := base.Add(time.Duration(i) * 70 * time.Millisecond) // over 21 s
		id := fmt.Sprint("j", i)
		due[id] = at
		jobs = append(jobs, &redeq.Job{Topic: "t", ID: id, RunAt: at})
	}
	require.NoError(t, e.c.AddBatch(ctx, jobs))
	time.Sleep(3 * time.Second)

	pid := serverPid(t, srv)
	stopAt := time.Now()
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	time.Sleep(10 * time.Second)
	require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))
	contAt := time.Now()

	testutil.Eventually(t, 40*time.Second, "every job ran", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(runs) == n
	})
	time.Sleep(time.Second) // doubles, if any
	mu.Lock()
	defer mu.Unlock()
	var twice, early []string
	var lateAfterCont time.Duration
	for id, rs := range runs {
		if len(rs) > 1 {
			twice = append(twice, id)
		}
		if e := earlyBy(rs[0], due[id], base); e > 5*time.Millisecond {
			early = append(early, fmt.Sprintf("%s %v early", id, e))
		}
		if due[id].Before(contAt) && due[id].After(stopAt) {
			lateAfterCont = max(lateAfterCont, rs[0].Sub(contAt))
		}
	}
	lines := logs.since(stopAt)
	sort.Strings(twice)
	t.Logf("%d log lines from the stop on:\n%s", len(lines), strings.Join(lines, "\n"))
	t.Logf("ran twice: %v; early: %v; the last job due during the stop ran %v after SIGCONT",
		twice, early, lateAfterCont.Round(time.Millisecond))
	require.Empty(t, twice, "jobs ran twice")
	require.Empty(t, early, "jobs ran before their due time")
	require.Less(t, lateAfterCont, 5*time.Second, "throughput did not return after the outage")
	require.LessOrEqual(t, len(lines), 20, "an outage of 10 s logged more than a handful of lines")
}

// TestServerRestartRecoversConsumerKilledWhileDown: the redis-server
// restarts (with AOF, appendfsync always; and without any persistence)
// while two live clients run slow jobs; a consumer process holding jobs is
// SIGKILLed while Redis is down. With AOF its jobs run again unspent and
// no live consumer's job is recovered. Without persistence every job is
// gone with the data; a consumer killed after the restart still has the
// jobs added since recovered.
func TestServerRestartRecoversConsumerKilledWhileDown(t *testing.T) {
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
				testutil.Eventually(t, 20*time.Second, "every new job ran", func() bool { return runs.ranAll("n", 30, nil) })
				t.Logf("after a restart without persistence, %d+ jobs of a killed consumer and all new jobs ran within %v", len(held), time.Since(restarted))
				return
			}
			testutil.Eventually(t, 30*time.Second, "every job ran", func() bool { return runs.ranAll("j", n, held) })
			t.Logf("all ran %v after the restart", time.Since(restarted))
			var bad []string
			for id, js := range runs.ByID() {
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

// TestRedisTroubleRecoversOnlyKilledConsumersJobs: on one real
// redis-server, three live clients run slow jobs (1.5 s, well over
// ConsumerTimeout 600 ms, so their jobs stay in flight across the trouble)
// while a fourth consumer process holds jobs and is killed during a CLIENT
// PAUSE WRITE; then CLIENT PAUSE ALL, DEBUG SLEEP and a CLIENT KILL of
// every connection follow. Every job runs; the killed consumer's jobs run
// again with Attempt 0; no job of a live consumer is recovered
// (Recoveries 0, one run).
func TestRedisTroubleRecoversOnlyKilledConsumersJobs(t *testing.T) {
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

	testutil.Eventually(t, 30*time.Second, "every job ran", func() bool { return runs.ranAll("j", n, held) })
	got := runs.ByID()
	firsts := runs.Firsts()
	var lastRecovered time.Time
	for id := range held {
		if a := firsts[id]; a.After(lastRecovered) {
			lastRecovered = a
		}
	}
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

// TestDownMasterHoldsUpOnlyItsJobs: a client started while one master of
// the cluster is down (cluster-require-full-coverage no, no failover)
// starts, whichever master is down. With the default prefix every master
// holds one of the fleet's shared keys: the one of slots 0-5460 the
// movers' set, the one of 5461-10922 the notification channels
// (redeq:wake, redeq:ready), the one of 10923-16383 the alive set and the
// topic set. When the down master holds the movers' set or the channels,
// the client moves and delivers, promptly, the jobs of every topic whose
// keys live on the healthy masters. When it holds the alive set, no
// consumer can prove it is alive, so none fetches (the heartbeat fetch
// gate, docs/operations.md): the client reports it, its movers still move
// the due jobs to their ready lists, and once the master is back every
// job runs, once.
func TestDownMasterHoldsUpOnlyItsJobs(t *testing.T) {
	testutil.FaultTier(t)
	for down := range 3 {
		t.Run(fmt.Sprint("slots", []string{"0-5460", "5461-10922", "10923-16383"}[down]), func(t *testing.T) {
			cl := testutil.StartCluster(t, 3, time.Second)
			ctx := context.Background()
			for _, addr := range cl.Addrs {
				n := redis.NewClient(&redis.Options{Addr: addr})
				require.NoError(t, n.ConfigSet(ctx, "cluster-require-full-coverage", "no").Err())
				require.NoError(t, n.ConfigSet(ctx, "cluster-replica-no-failover", "yes").Err())
				n.Close()
			}
			be := clusterBackend(cl.Addrs, false)
			probe := be.New(t)
			dead := mastersBySlot(t, probe)[down]
			cfg := testutil.Config(t)
			cfg.Prefix = "redeq" // the default: a private cluster
			var shared []string
			for name, k := range map[string]string{"movers": keys.Movers(cfg.Prefix), "alive": keys.Alive(cfg.Prefix),
				"topics": keys.Topics(cfg.Prefix), "wake": keys.WakeChannel(cfg.Prefix), "ready": keys.ReadyChannel(cfg.Prefix)} {
				if masterOf(t, probe, k) == dead {
					shared = append(shared, name)
				}
			}
			slices.Sort(shared)
			t.Logf("the down master holds %v", shared)
			const topics = 12
			healthy := map[string]bool{}
			for i := range topics {
				name := fmt.Sprint("t", i)
				healthy[name] = masterOf(t, probe, keys.ForTopic(cfg.Prefix, name).Meta()) != dead &&
					masterOf(t, probe, keys.ForBucket(cfg.Prefix, name, 0).Pool()) != dead
			}
			e := setup(t, be, cfg)
			for i := range topics {
				require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: fmt.Sprint("t", i), ID: "before", Delay: 3 * time.Second}))
			}
			cl.Node(dead).Kill()

			ccfg := e.cfg
			var logs lineLog
			ccfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
			c, err := redeq.New(be.New(t), ccfg)
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
			var mu sync.Mutex
			ran := map[string]int{}
			for name, ok := range healthy {
				if !ok {
					continue
				}
				require.NoError(t, c.Register(redeq.ListenerFunc(name, func(_ context.Context, j *redeq.Job, ch *redeq.Channel) error {
					mu.Lock()
					ran[j.Topic+"/"+j.ID]++
					mu.Unlock()
					ch.Ack()
					return nil
				})))
			}
			require.NoError(t, c.Start(ctx), "start while master %s is down", dead)
			for name, ok := range healthy {
				if ok {
					require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: name, ID: "after"}))
				}
			}
			start := time.Now()
			allRan := func() bool {
				mu.Lock()
				defer mu.Unlock()
				for name, ok := range healthy {
					if ok && (ran[name+"/before"] == 0 || ran[name+"/after"] == 0) {
						return false
					}
				}
				return true
			}
			if slices.Contains(shared, "alive") {
				// Moved, reported, and not fetched while the alive set
				// cannot be written.
				testutil.EventuallyEvery(t, 3*time.Second+60*cfg.ScanInterval, 50*time.Millisecond, "the healthy topics' jobs are ready", func() bool {
					for name, ok := range healthy {
						if !ok {
							continue
						}
						n := int64(0)
						for b := range max(1, cfg.Concurrency) {
							n += probe.LLen(ctx, keys.ForBucket(cfg.Prefix, name, b).Ready()).Val()
						}
						if n < 2 {
							return false
						}
					}
					return true
				})
				testutil.Eventually(t, 10*time.Second, "the client reports that it does not fetch", func() bool {
					return slices.ContainsFunc(logs.since(start), func(l string) bool {
						return strings.Contains(l, "fetch waits for a heartbeat") || strings.Contains(l, "first heartbeat failed")
					})
				})
				mu.Lock()
				require.Empty(t, ran, "jobs ran while the client could not heartbeat")
				mu.Unlock()
				cl.Node(dead).Start()
				start = time.Now()
			}
			testutil.EventuallyEvery(t, 3*time.Second+60*cfg.ScanInterval, 50*time.Millisecond, "every healthy topic's jobs ran", allRan)
			t.Logf("master %s down: healthy topics' jobs ran within %v", dead, time.Since(start))
			mu.Lock()
			for k, n := range ran {
				require.Equal(t, 1, n, "job %s ran more than once", k)
			}
			mu.Unlock()
		})
	}
}

// mastersBySlot lists the cluster's masters in the order of their slots.
func mastersBySlot(t *testing.T, rdb redis.UniversalClient) []string {
	t.Helper()
	slots, err := rdb.ClusterSlots(context.Background()).Result()
	require.NoError(t, err)
	slices.SortFunc(slots, func(a, b redis.ClusterSlot) int { return a.Start - b.Start })
	var out []string
	for _, s := range slots {
		if a := s.Nodes[0].Addr; !slices.Contains(out, a) {
			out = append(out, a)
		}
	}
	return out
}

// TestDownMasterHoldsUpOnlyItsBuckets: with the fleet's shared keys on the
// healthy masters, a client started while one master is down runs
// promptly every job whose bucket and topic meta live on healthy masters,
// in topics of 16 buckets spread over every master, whether or not it
// also listens to a topic whose meta is on the down master.
func TestDownMasterHoldsUpOnlyItsBuckets(t *testing.T) {
	testutil.FaultTier(t)
	for _, alsoDown := range []bool{false, true} {
		t.Run(fmt.Sprintf("listens_to_a_down_topic=%v", alsoDown), func(t *testing.T) {
			downMasterBuckets(t, alsoDown)
		})
	}
}

func downMasterBuckets(t *testing.T, alsoDown bool) {
	cl := testutil.StartCluster(t, 3, time.Second)
	ctx := context.Background()
	for _, addr := range cl.Addrs {
		n := redis.NewClient(&redis.Options{Addr: addr})
		require.NoError(t, n.ConfigSet(ctx, "cluster-require-full-coverage", "no").Err())
		require.NoError(t, n.ConfigSet(ctx, "cluster-replica-no-failover", "yes").Err())
		n.Close()
	}
	be := clusterBackend(cl.Addrs, false)
	probe := be.New(t)
	prefix, dead := spareMaster(t, probe, nil, nil)
	cfg := testutil.Config(t)
	cfg.Prefix = prefix
	cfg.Concurrency = 16
	const topics = 6
	e := setup(t, be, cfg)
	healthy := map[string]bool{} // topic/id -> its bucket and meta are on healthy masters
	for i := range topics {
		name := fmt.Sprint("t", i)
		metaOK := masterOf(t, probe, keys.ForTopic(prefix, name).Meta()) != dead
		for j := range 40 {
			id := fmt.Sprint("j", j)
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: name, ID: id, Delay: 2 * time.Second}))
			healthy[name+"/"+id] = metaOK && masterOf(t, probe, keys.ForBucket(prefix, name, bucketOf(id, 16)).Pool()) != dead
		}
	}
	cl.Node(dead).Kill()
	c, err := redeq.New(be.New(t), e.cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
	var mu sync.Mutex
	ran := map[string]bool{}
	for i := range topics {
		name := fmt.Sprint("t", i)
		if !alsoDown && masterOf(t, probe, keys.ForTopic(prefix, name).Meta()) == dead {
			continue
		}
		require.NoError(t, c.Register(redeq.ListenerFunc(name, func(_ context.Context, j *redeq.Job, ch *redeq.Channel) error {
			mu.Lock()
			ran[j.Topic+"/"+j.ID] = true
			mu.Unlock()
			ch.Ack()
			return nil
		})))
	}
	require.NoError(t, c.Start(ctx), "start while master %s is down", dead)
	start := time.Now()
	missing := func() []string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for k, ok := range healthy {
			if ok && !ran[k] {
				out = append(out, k)
			}
		}
		return out
	}
	testutil.EventuallyEvery(t, 2*time.Second+60*cfg.ScanInterval, 50*time.Millisecond, "every job of a healthy bucket ran", func() bool { return len(missing()) == 0 })
	t.Logf("ran within %v", time.Since(start))
}

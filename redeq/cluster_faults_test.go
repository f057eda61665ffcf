package redeq_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/ready"
	"github.com/redeq-go/redeq/redeq"
)

// idPerBucket returns one job id per bucket of a topic of n buckets.
func idPerBucket(n int) []string {
	ids := make([]string, n)
	left := n
	for i := 0; left > 0; i++ {
		id := fmt.Sprint("j", i)
		if b := bucketOf(id, n); ids[b] == "" {
			ids[b] = id
			left--
		}
	}
	return ids
}

// TestHungNodeDelaysOnlyItsOwnJobs: on a Redis Cluster, a master that
// hangs delays only the jobs stored on it: the recovery of crashed
// consumers' jobs on healthy nodes, of many buckets at once, and the
// fetches and outcomes of a live listener go on.
func TestHungNodeDelaysOnlyItsOwnJobs(t *testing.T) {
	t.Parallel() // every case runs beside the other fault tests, as each did alone
	t.Run("recovery_of_crashed_consumers", testHungNodeDelaysOnlyItsOwnRecovery)
	t.Run("recovery_of_many_buckets", testHungNodeDelaysOnlyItsOwnBucketsRecovery)
	t.Run("live_listener", testHungNodeLeavesHealthyNodesRunning)
}

// testHungNodeDelaysOnlyItsOwnBucketsRecovery: one crashed consumer whose
// topic has 64 buckets over 3 masters; one master (not the alive set's)
// hangs (CLIENT PAUSE ALL). The reaper recovers the buckets 8 at a time,
// each call bounded by max(ConsumerTimeout/5, 1 s); the jobs on the
// healthy nodes run again without waiting a ReadTimeout per round behind
// the calls to the hung node. REDEQ_CTX_TIMEOUTS=1 runs it with
// ContextTimeoutEnabled on the client.
func testHungNodeDelaysOnlyItsOwnBucketsRecovery(t *testing.T) {
	t.Parallel() // its own Redis and processes: it runs beside the other fault tests
	rc, be := privateCluster(t, 3)
	if os.Getenv("REDEQ_CTX_TIMEOUTS") != "" {
		be = clusterBackend(rc.Addrs, true)
	}
	ctx := context.Background()
	cfg := testutil.Config(t)
	cfg.Concurrency = 64
	e := setup(t, be, cfg)
	ids := idPerBucket(64)
	for _, id := range ids {
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: id}))
	}
	require.NoError(t, e.c.Start(ctx)) // the one client: it moves and reaps
	testutil.Eventually(t, 10*time.Second, "all due", func() bool { return stats(t, e.c, "t").Ready == 64 })
	for b := range 64 {
		items, _, err := ready.Fetch(ctx, e.rdb, cfg.Prefix, "t", b, "c1", 10, true)
		require.NoError(t, err)
		require.Len(t, items, 1)
	}
	time.Sleep(2 * cfg.ConsumerTimeout) // the reaper has looked for long, the deliveries are old

	aliveNode := nodeOf(t, e.rdb, keys.Alive(cfg.Prefix))
	var hung string
	for _, id := range ids {
		if n := nodeOf(t, e.rdb, keys.ForBucket(cfg.Prefix, "t", bucketOf(id, 64)).Pool()); n != aliveNode {
			hung = n
			break
		}
	}
	var healthy []string
	for _, id := range ids {
		if nodeOf(t, e.rdb, keys.ForBucket(cfg.Prefix, "t", bucketOf(id, 64)).Pool()) != hung {
			healthy = append(healthy, id)
		}
	}
	t.Logf("alive set on %s; %d of 64 buckets on the hung node %s", aliveNode, 64-len(healthy), hung)
	pauseNode(t, hung, 12*time.Second, "ALL") // Redis 7.0 pauses CLIENT UNPAUSE too: it ends by itself

	// c1 crashed.
	require.NoError(t, e.rdb.HSet(ctx, keys.AliveTopics(cfg.Prefix), "c1", keys.Address("t", 64)).Err())
	require.NoError(t, e.rdb.ZAdd(ctx, keys.Alive(cfg.Prefix), redis.Z{Score: 1, Member: "c1"}).Err())
	died := time.Now()
	back := map[string]time.Duration{}
	for time.Since(died) < 11*time.Second && len(back) < len(healthy) {
		for _, id := range healthy {
			if _, ok := back[id]; ok {
				continue
			}
			k := keys.ForBucket(cfg.Prefix, "t", bucketOf(id, 64))
			if strings.HasPrefix(e.rdb.HGet(ctx, k.State(), id).Val(), "r") { // ready
				back[id] = time.Since(died)
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	var last time.Duration
	for _, d := range back {
		last = max(last, d)
	}
	t.Logf("%d of %d jobs on healthy nodes back in ready; the last after %v", len(back), len(healthy), last)

	// The hung node answers again, with the reaper's late calls queued:
	// every job comes back once, counted once, none lost.
	time.Sleep(time.Until(died.Add(12 * time.Second)))
	testutil.Eventually(t, 20*time.Second, "all 64 back", func() bool { return stats(t, e.c, "t").Ready == 64 })
	for _, id := range ids {
		j, err := e.c.Get(ctx, "t", id)
		require.NoError(t, err)
		require.Equalf(t, 1, j.Recoveries, "job %s counted %d recoveries", id, j.Recoveries)
		require.Zero(t, j.Attempt)
	}
	ready := map[string]int{}
	for b := range 64 {
		for _, id := range e.rdb.LRange(ctx, keys.ForBucket(cfg.Prefix, "t", b).Ready(), 0, -1).Val() {
			ready[id]++
		}
	}
	for _, id := range ids {
		require.Equalf(t, 1, ready[id], "job %s is %d times in its ready list", id, ready[id])
	}
	limit := cfg.ConsumerTimeout + 3*time.Second
	require.Len(t, back, len(healthy), "jobs on healthy nodes did not come back within 11 s")
	require.LessOrEqualf(t, last, limit, "jobs of a crashed consumer on healthy nodes waited %v (limit %v) behind a hung node they do not live on", last, limit)
}

// testHungNodeLeavesHealthyNodesRunning: one listener, 64 buckets over 3
// masters, a steady stream of 10 ms jobs; one master (not the alive set's)
// hangs for 12 s. The jobs on the two healthy masters keep running:
// neither a fetch from a hung bucket nor the outcome of a job stored there
// holds up the others.
func testHungNodeLeavesHealthyNodesRunning(t *testing.T) {
	t.Parallel() // its own Redis: it runs beside the other fault tests
	_, be := privateCluster(t, 3)
	ctx := context.Background()
	cfg := testutil.Config(t)
	cfg.Concurrency = 64
	e := setup(t, be, cfg)
	ids := idPerBucket(64)
	aliveNode := nodeOf(t, e.rdb, keys.Alive(cfg.Prefix))
	nodeOfBucket := bucketNodes(t, e, "t", 64)
	var hung string
	for _, n := range nodeOfBucket {
		if n != aliveNode {
			hung = n
			break
		}
	}
	var hungIDs, healthyIDs []string
	for b, id := range ids {
		if nodeOfBucket[b] == hung {
			hungIDs = append(hungIDs, id)
		} else {
			healthyIDs = append(healthyIDs, id)
		}
	}

	var healthyRuns atomic.Int64
	l := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		if nodeOfBucket[bucketOf(job.ID, 64)] != hung {
			healthyRuns.Add(1)
		}
		time.Sleep(10 * time.Millisecond)
		ch.Ack()
		return nil
	})
	l.workers = 8
	consumer := e.another(t, nil)
	startWith(t, consumer, l)
	require.NoError(t, e.c.Start(ctx))

	// Streams of Adds: one over the healthy buckets, one over the hung
	// node's (stopped when it hangs: an Add there would wait for it). An id
	// is added again once its last run was acked (ErrJobExists before).
	stop, stopHung := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	stream := func(stop chan struct{}, pick []string) {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			_ = e.c.Add(ctx, &redeq.Job{Topic: "t", ID: pick[i%len(pick)]})
		}
	}
	wg.Go(func() { stream(stop, healthyIDs) })
	wg.Go(func() { stream(stopHung, hungIDs) })
	var hungStopped sync.Once
	stopHungStream := func() { hungStopped.Do(func() { close(stopHung) }) }
	// Both streams end however the test ends: a failure before the hang
	// must not leave wg.Wait waiting for the hung node's stream.
	defer func() { close(stop); stopHungStream(); wg.Wait() }()
	// The streams run for 3 s before the hang, and until the listener ran
	// a hundred healthy jobs (a loaded machine runs fewer in 3 s).
	time.Sleep(3 * time.Second)
	require.Eventually(t, func() bool { return healthyRuns.Load() > 100 }, 30*time.Second, 10*time.Millisecond, "the listener runs")
	before := healthyRuns.Load()

	stopHungStream()
	pauseNode(t, hung, 12*time.Second, "ALL")
	perSec := perSecond(&healthyRuns, 10*time.Second)
	t.Logf("%d of 64 buckets on the hung node %s; runs of jobs on healthy nodes: %d before, per second while it hangs: %v",
		len(hungIDs), hung, before, perSec)
	stalled := 0
	for _, n := range perSec {
		if n < 10 {
			stalled++
		}
	}
	require.LessOrEqualf(t, stalled, 1, "the listener ran fewer than 10 jobs stored on healthy nodes in %d of the 10 s a node it does not need hung: %v", stalled, perSec)
}

// testHungNodeDelaysOnlyItsOwnRecovery: two consumers crash, one holding
// jobs of a topic whose bucket lives on a node that is paused (CLIENT
// PAUSE ALL, 30 s), the other holding jobs on a healthy node. The jobs on
// the healthy node run again within about ConsumerTimeout plus a few
// seconds: they do not wait behind the recover calls to the paused node
// (each of which waits for go-redis's read timeout and retries).
func testHungNodeDelaysOnlyItsOwnRecovery(t *testing.T) {
	t.Parallel() // its own Redis and processes: it runs beside the other fault tests
	_, be := privateCluster(t, 3)
	ctx := context.Background()
	cfg := testutil.Config(t)
	e := setup(t, be, cfg)
	aliveNode := nodeOf(t, e.rdb, keys.Alive(cfg.Prefix))
	// A topic on a node other than the alive set's (to pause), and one on
	// a third node.
	var paused, healthy, pausedNode string
	for i := 0; i < 200 && (paused == "" || healthy == ""); i++ {
		topic := fmt.Sprintf("t%d", i)
		n := nodeOf(t, e.rdb, keys.ForBucket(cfg.Prefix, topic, 0).Pool())
		tn := nodeOf(t, e.rdb, keys.ForTopic(cfg.Prefix, topic).Consumers())
		switch {
		case n == aliveNode || tn == aliveNode:
		case paused == "":
			paused, pausedNode = topic, n
		case n != pausedNode && tn != pausedNode && healthy == "":
			healthy = topic
		}
	}
	require.NotEmpty(t, paused)
	require.NotEmpty(t, healthy)
	t.Logf("alive set on %s, topic %s paused on %s, topic %s healthy", aliveNode, paused, pausedNode, healthy)

	const n = 5
	for i := range n {
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: paused, ID: fmt.Sprint("p", i)}))
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: healthy, ID: fmt.Sprint("h", i)}))
	}
	require.NoError(t, e.c.Start(ctx)) // the one client: it moves and reaps
	for _, topic := range []string{paused, healthy} {
		k := keys.ForBucket(cfg.Prefix, topic, 0)
		testutil.Eventually(t, 5*time.Second, "due", func() bool { return e.rdb.LLen(ctx, k.Ready()).Val() == n })
	}
	// Two consumers take the jobs (neither is in the alive set yet, so
	// nobody reaps them).
	for cid, topic := range map[string]string{"c1": paused, "c2": healthy} {
		items, _, err := ready.Fetch(ctx, e.rdb, cfg.Prefix, topic, 0, cid, n, true)
		require.NoError(t, err)
		require.Len(t, items, n)
	}
	time.Sleep(2 * cfg.ConsumerTimeout) // the reaper has looked for long, and the deliveries are old

	// The paused topic's node stops answering for 30 s.
	pauseNode(t, pausedNode, 30*time.Second, "ALL")
	// Both consumers crashed: c1 a moment before c2.
	alive := keys.Alive(cfg.Prefix)
	require.NoError(t, e.rdb.HSet(ctx, keys.AliveTopics(cfg.Prefix),
		"c1", keys.Address(paused, cfg.Concurrency), "c2", keys.Address(healthy, cfg.Concurrency)).Err())
	require.NoError(t, e.rdb.ZAdd(ctx, alive, redis.Z{Score: 1, Member: "c1"}, redis.Z{Score: 2, Member: "c2"}).Err())
	died := time.Now()

	ok := false
	for time.Since(died) < 28*time.Second {
		if state(t, e.c, healthy, "h0") == redeq.StateReady {
			ok = true
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	took := time.Since(died)
	t.Logf("jobs on the healthy node back in ready after %v (ok=%v)", took, ok)
	limit := cfg.ConsumerTimeout + 3*time.Second
	require.Truef(t, ok && took <= limit,
		"jobs of a crashed consumer on a healthy node waited %v (limit %v) behind a paused node they do not live on", took, limit)
}

// TestClusterKilledConsumerRecoveredThroughAliveNodePause: on a real Redis
// Cluster (3 masters, 4 buckets per topic) a consumer process holding jobs
// is SIGKILLed while the node of the alive set is paused (CLIENT PAUSE
// WRITE, 3 s), then a bucket node sleeps (CLIENT PAUSE ALL, 2 s); two live
// clients run slow jobs throughout. The killed consumer's jobs run again
// unspent; no live consumer's job is recovered or run twice.
func TestClusterKilledConsumerRecoveredThroughAliveNodePause(t *testing.T) {
	t.Parallel() // its own Redis and processes: it runs beside the other fault tests
	_, be := privateCluster(t, 3)
	ctx := context.Background()
	cfg := testutil.Config(t)
	cfg.Concurrency = 4
	e := setup(t, be, cfg)
	aliveNode := nodeOf(t, e.rdb, keys.Alive(cfg.Prefix))
	var otherNode string
	for b := range 4 {
		if n := nodeOf(t, e.rdb, keys.ForBucket(cfg.Prefix, "t", b).Pool()); n != aliveNode {
			otherNode = n
		}
	}
	runs := &jobRuns{}
	ch, held := startHolder(t, e, 20*time.Second, 8, nil, childConcurrencyEnv+"=4")
	startSlowConsumers(t, e, runs, 2)
	const n = 40
	for i := range n {
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint("j", i), Delay: time.Duration(i) * 150 * time.Millisecond}))
	}
	time.Sleep(2 * time.Second)
	pauseNode(t, aliveNode, 3*time.Second, "WRITE")
	time.Sleep(time.Second)
	ch.kill()
	killed := time.Now()
	time.Sleep(3 * time.Second)
	if otherNode != "" {
		pauseNode(t, otherNode, 2*time.Second, "ALL")
	}
	testutil.Eventually(t, 40*time.Second, "every job ran", func() bool { return runs.ranAll("j", n, nil) && runs.ranAll("k", 8, nil) })
	t.Logf("all ran %v after the kill", time.Since(killed))
	got := runs.ByID()
	var bad []string
	for id, js := range got {
		want := 0
		if held[id] {
			want = 1
		}
		if len(js) != 1 || js[0].Recoveries != want || js[0].Attempt != 0 {
			var rs []string
			for _, j := range js {
				rs = append(rs, fmt.Sprintf("rec=%d att=%d", j.Recoveries, j.Attempt))
			}
			bad = append(bad, fmt.Sprintf("%s (held by the killed one: %v): %v", id, held[id], rs))
		}
	}
	require.Emptyf(t, bad, "jobs recovered wrongly or run twice")
}

// TestHungAliveNodePausesFetchingWithoutDoubleRuns: the master holding the
// alive set (redeq:{alive}, one key for the whole deployment) hangs for
// 6 s while a backlog stored on the other two masters drains. A listener
// fetches nothing once no heartbeat got through for 2/3 of
// ConsumerTimeout (a reaper that still reaches the alive set could
// otherwise recover its jobs while it runs them, and a consumer cannot
// tell a hung node from a partition), the documented limit
// (docs/operations.md). Held: no job runs twice, and fetching resumes
// within 2 s of the node's return.
func TestHungAliveNodePausesFetchingWithoutDoubleRuns(t *testing.T) {
	t.Parallel()
	_, be := privateCluster(t, 3)
	ctx := context.Background()
	cfg := testutil.Config(t)
	cfg.Concurrency = 64
	e := setup(t, be, cfg)
	aliveNode := nodeOf(t, e.rdb, keys.Alive(cfg.Prefix))
	healthyBucket := map[int]bool{}
	for b, n := range bucketNodes(t, e, "t", 64) {
		if n != aliveNode {
			healthyBucket[b] = true
		}
	}
	var jobs []*redeq.Job
	for i := 0; len(jobs) < 3000; i++ {
		id := fmt.Sprint("j", i)
		if healthyBucket[bucketOf(id, 64)] {
			jobs = append(jobs, &redeq.Job{Topic: "t", ID: id})
		}
	}
	require.NoError(t, e.c.AddBatch(ctx, jobs))

	var mu sync.Mutex
	runs := map[string]int{}
	var ran atomic.Int64
	l := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		mu.Lock()
		runs[job.ID]++
		mu.Unlock()
		ran.Add(1)
		time.Sleep(20 * time.Millisecond)
		ch.Ack()
		return nil
	})
	l.workers = 4 // about 200 jobs a second: the backlog lasts 15 s
	require.NoError(t, e.c.Start(ctx))
	consumer := e.another(t, nil)
	startWith(t, consumer, l)
	testutil.Eventually(t, 10*time.Second, "the listener runs", func() bool { return ran.Load() >= 10 })
	from := ran.Load()
	time.Sleep(2 * time.Second)
	before := ran.Load() - from
	require.Positive(t, before, "the listener runs")

	pauseNode(t, aliveNode, 6*time.Second, "ALL")
	perSec := perSecond(&ran, 9*time.Second)
	t.Logf("%d of 64 buckets on healthy nodes, none on the hung alive node %s; runs in the 2 s before: %d; per second while it hangs (6 s) and after: %v",
		len(healthyBucket), aliveNode, before, perSec)
	mu.Lock()
	for id, k := range runs {
		require.Equal(t, 1, k, "job %s ran %d times", id, k)
	}
	mu.Unlock()
	require.Len(t, perSec, 9)
	// From 1 s after the node came back, at least a fifth of the rate
	// before the hang (a loaded machine runs fewer than the 200 a second
	// the workers allow).
	for _, n := range perSec[7:] {
		require.GreaterOrEqualf(t, n, max(1, before/2/5), "runs per second from 1 s after the alive set's node came back: %v (%d in the 2 s before the hang)", perSec, before)
	}
}

// TestLateFetchAnswersGivenBackNeverRunTwice: a bucket node (not the alive
// set's) pauses for 1.5 s, three times, while a backlog drains over 64
// buckets, so fetches to it answer after slowFetch (200 ms) when their
// workers serve other buckets: what they bring beyond the free workers is
// given back, never run beside Workers others, never run twice, never
// lost.
func TestLateFetchAnswersGivenBackNeverRunTwice(t *testing.T) {
	t.Parallel()
	_, be := privateCluster(t, 3)
	ctx := context.Background()
	cfg := testutil.Config(t)
	cfg.Concurrency = 64
	e := setup(t, be, cfg)
	aliveNode := nodeOf(t, e.rdb, keys.Alive(cfg.Prefix))
	var hung string
	for _, n := range bucketNodes(t, e, "t", 64) {
		if n != aliveNode {
			hung = n
			break
		}
	}
	var jobs []*redeq.Job
	for i := range 1500 {
		jobs = append(jobs, &redeq.Job{Topic: "t", ID: fmt.Sprint("j", i)})
	}
	require.NoError(t, e.c.AddBatch(ctx, jobs))

	var mu sync.Mutex
	runs := map[string]int{}
	var cur, peak atomic.Int64
	l := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		c := cur.Add(1)
		for {
			p := peak.Load()
			if c <= p || peak.CompareAndSwap(p, c) {
				break
			}
		}
		mu.Lock()
		runs[job.ID]++
		mu.Unlock()
		time.Sleep(10 * time.Millisecond)
		cur.Add(-1)
		ch.Ack()
		return nil
	})
	l.workers = 4
	require.NoError(t, e.c.Start(ctx))
	consumer := e.another(t, nil)
	startWith(t, consumer, l)
	for range 3 {
		time.Sleep(700 * time.Millisecond)
		pauseNode(t, hung, 1500*time.Millisecond, "ALL")
		time.Sleep(1500 * time.Millisecond)
	}
	testutil.Eventually(t, 40*time.Second, "all jobs ran", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(runs) == len(jobs)
	})
	time.Sleep(time.Second)
	mu.Lock()
	defer mu.Unlock()
	twice := 0
	for _, k := range runs {
		if k > 1 {
			twice++
		}
	}
	t.Logf("%d jobs ran, %d more than once, at most %d at once (Workers 4)", len(runs), twice, peak.Load())
	require.Zero(t, twice)
	require.LessOrEqual(t, peak.Load(), int64(4))
	st := stats(t, e.c, "t")
	require.Zero(t, st.InFlight+st.Ready+st.Pool, "%+v", st)
}

type warnLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *warnLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *warnLog) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Split(strings.TrimSpace(l.buf.String()), "\n")
}

type bcastCounter struct {
	topics []string
	mu     sync.Mutex
	n      int
}

func (b *bcastCounter) Topics() []string { return b.topics }

func (b *bcastCounter) OnBroadcast(ctx context.Context, job *redeq.Job) {
	b.mu.Lock()
	b.n++
	b.mu.Unlock()
}

// TestClusterBackgroundLoopsLogNoError: on Redis Cluster no background
// loop logs a CROSSSLOT or any other warning or error: three clients with
// listeners on several topics (4 buckets each), a broadcast listener,
// RetireAfter of 1 s (topics retire and come back), pause and resume, jobs
// that fail and retry, a client that leaves and one that joins.
func TestClusterBackgroundLoopsLogNoError(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	be := testutil.Cluster(t)
	ctx := context.Background()
	logs := &warnLog{}
	cfg := testutil.Config(t)
	cfg.Concurrency = 4
	cfg.RetireAfter = time.Second
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	topics := []string{"a.x", "b.y", "c.z", "d.w", "e.v"}
	var clients []*redeq.Client
	var ls []*listener
	newClient := func() *redeq.Client {
		c, err := redeq.New(be.New(t), cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
		for _, tp := range topics {
			l := newListener(tp, func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
				if strings.HasPrefix(job.ID, "fail") && job.Attempt == 0 {
					return fmt.Errorf("first attempt fails")
				}
				ch.Ack()
				return nil
			})
			ls = append(ls, l)
			require.NoError(t, c.Register(l))
		}
		require.NoError(t, c.RegisterBroadcast(&bcastCounter{topics: topics[:2]}))
		require.NoError(t, c.Start(ctx))
		return c
	}
	for range 3 {
		clients = append(clients, newClient())
	}
	p := clients[0]
	for round := range 6 {
		for i, tp := range topics {
			for j := range 8 {
				id := fmt.Sprintf("r%d-%d", round, j)
				if j == 0 {
					id = "fail" + id
				}
				require.NoError(t, p.Add(ctx, &redeq.Job{Topic: tp, ID: id, Delay: time.Duration(j*50) * time.Millisecond}))
			}
			require.NoError(t, p.Add(ctx, &redeq.Job{Topic: tp, ID: fmt.Sprintf("bc%d-%d", round, i), Broadcast: true}))
		}
		if round == 2 {
			require.NoError(t, p.Pause(ctx, topics[0]))
			time.Sleep(300 * time.Millisecond)
			require.NoError(t, p.Resume(ctx, topics[0]))
			require.NoError(t, clients[2].Shutdown(ctx))
			clients = append(clients, newClient())
		}
		time.Sleep(1500 * time.Millisecond) // idle long enough to retire
	}
	time.Sleep(2 * time.Second)
	var bad []string
	for _, line := range logs.lines() {
		if line != "" {
			bad = append(bad, line)
		}
	}
	if len(bad) > 20 {
		bad = append(bad[:20], fmt.Sprintf("... %d more", len(bad)-20))
	}
	require.Emptyf(t, bad, "background loops logged warnings/errors on Redis Cluster")
}

// TestConsumerHungOnAliveMasterRunsNoInFlightJobTwice: a consumer (A)
// runs a job whose keys live on a healthy master when its connections to
// the alive set's master hang (replies held, new connections unanswered);
// another consumer (B) reaches every master. While A's handler still runs
// the job (it would stop if its context ended), B does not run it too: the
// job runs once at a time, and once in all when A's handler acks it.
func TestConsumerHungOnAliveMasterRunsNoInFlightJobTwice(t *testing.T) {
	testutil.FaultTier(t)
	be := testutil.Cluster(t)
	for run := range 3 {
		t.Run(fmt.Sprint("run", run), func(t *testing.T) {
			cfg := testutil.Config(t)
			cfg.Concurrency = 16
			ctx := context.Background()
			e := setup(t, be, cfg)
			alive := nodeOf(t, e.rdb, keys.Alive(cfg.Prefix))
			topic := "t"
			for i := 0; nodeOf(t, e.rdb, keys.ForTopic(cfg.Prefix, topic).Meta()) == alive; i++ {
				topic = fmt.Sprint("t", i)
			}
			nodes := bucketNodes(t, e, topic, cfg.Concurrency)
			id := ""
			for i := 0; id == ""; i++ {
				if c := fmt.Sprint("j", i); nodes[bucketOf(c, cfg.Concurrency)] != alive {
					id = c
				}
			}

			var mu sync.Mutex
			var running, overlaps, runs int
			entered := make(chan struct{}, 10)
			handler := func(who string, hold time.Duration) func(context.Context, *redeq.Job, *redeq.Channel) error {
				return func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
					mu.Lock()
					runs++
					if running > 0 {
						overlaps++
						t.Logf("%s runs %s while another handler runs it", who, job.ID)
					}
					running++
					mu.Unlock()
					entered <- struct{}{}
					select { // a long job that stops when its context ends
					case <-time.After(hold):
					case <-ctx.Done():
					}
					mu.Lock()
					running--
					mu.Unlock()
					if ctx.Err() != nil {
						return ctx.Err()
					}
					ch.Ack()
					return nil
				}
			}
			rdbA, hang := hangByProxy(t, be.Addrs, alive)
			a, err := redeq.New(rdbA, e.cfg)
			require.NoError(t, err)
			t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
			startWith(t, a, newListener(topic, handler("A", 4*time.Second)))
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: id}))
			select {
			case <-entered:
			case <-time.After(10 * time.Second):
				t.Fatal("A did not start the job")
			}
			hang()
			b := e.another(t, nil)
			startWith(t, b, newListener(topic, handler("B", 0)))
			testutil.Eventually(t, 30*time.Second, "the job is done", func() bool {
				_, err := e.c.Get(ctx, topic, id)
				return errors.Is(err, redeq.ErrJobNotFound)
			})
			time.Sleep(10 * cfg.ScanInterval) // a second run, if any
			mu.Lock()
			defer mu.Unlock()
			require.Zero(t, overlaps, "the job ran beside its running handler (%d runs)", runs)
			require.Equal(t, 1, runs, "the job ran more than once")
		})
	}
}

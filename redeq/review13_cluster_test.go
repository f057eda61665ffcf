package redeq_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/ready"
	"github.com/redeq-go/redeq/redeq"
)

// TestReview13PausedNodeHoldsUpRecoveryElsewhere attacks promise 3 (a
// Redis Cluster where a node is paused): two consumers crash, one holding
// jobs of a topic whose bucket lives on a node that is paused (CLIENT
// PAUSE ALL, 30 s), the other holding jobs on a healthy node. The jobs on
// the healthy node must run again within about ConsumerTimeout plus a few
// seconds. The reaper handles silent consumers one after another in one
// pass (consumer/reaper.go reap -> reapConsumer -> recoverList), and each
// recover script on the paused node waits for go-redis's read timeout and
// retries (3 s x 4), then the reaper backs off; so the healthy node's jobs
// wait behind the paused one.
func TestReview13PausedNodeHoldsUpRecoveryElsewhere(t *testing.T) {
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
		waitFor(t, 5*time.Second, "due", func() bool { return e.rdb.LLen(ctx, k.Ready()).Val() == n })
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

// TestReview13ClusterKillNineDuringAliveNodePause attacks promises 1, 3
// and 4 on a real Redis Cluster (3 masters, 4 buckets per topic): a
// consumer process holding jobs is SIGKILLed while the node of the alive
// set is paused (CLIENT PAUSE WRITE, 3 s), then a bucket node sleeps
// (CLIENT PAUSE ALL, 2 s). Two live clients run slow jobs throughout. The
// killed consumer's jobs run again unspent; no live consumer's job is
// recovered or run twice.
func TestReview13ClusterKillNineDuringAliveNodePause(t *testing.T) {
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
	waitFor(t, 40*time.Second, "every job ran", func() bool { return runs.ranAll("j", n, nil) && runs.ranAll("k", 8, nil) })
	t.Logf("all ran %v after the kill", time.Since(killed))
	got := runs.snapshot()
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

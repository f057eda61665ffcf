package redeq_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// cuttable is a cluster client of addrs whose connections to the node at
// node can be cut at any time: cut closes the open ones and refuses new
// ones, as a partition between this client and that node would.
type cuttable struct {
	mu    sync.Mutex
	conns []net.Conn
	cut   atomic.Bool
	node  string
}

func (c *cuttable) client(t *testing.T, addrs []string) *redis.ClusterClient {
	var d net.Dialer
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: addrs,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if addr == c.node && c.cut.Load() {
				return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
			}
			conn, err := d.DialContext(ctx, network, addr)
			if err == nil && addr == c.node {
				c.mu.Lock()
				c.conns = append(c.conns, conn)
				c.mu.Unlock()
			}
			return conn, err
		},
	})
	t.Cleanup(func() { cc.Close() })
	return cc
}

func (c *cuttable) cutNow() {
	c.cut.Store(true)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		conn.Close()
	}
}

// TestOwnerCutOffMidRunHandsItsBucketsOver: a client that owns every
// bucket of a topic (and holds their locks) and then loses its
// connections to one master, refused from then on, keeps serving the
// buckets of the other masters, and the other clients take over the
// buckets it cannot move: every job runs once, within a few scan
// intervals of its due time plus the lock's expiry.
func TestOwnerCutOffMidRunHandsItsBucketsOver(t *testing.T) {
	testutil.FaultTier(t)
	be := testutil.Cluster(t)
	probe := be.New(t)
	const topic = "t"
	for run := range 3 {
		t.Run(fmt.Sprint("run", run), func(t *testing.T) {
			prefix, cut := spareMaster(t, probe, []string{topic}, nil)
			cfg := testutil.Config(t)
			cfg.Prefix = prefix
			cfg.Concurrency = 16
			ctx := context.Background()
			var runs jobRuns
			var fromA atomic.Int64
			cc := &cuttable{node: cut}
			a, err := redeq.New(cc.client(t, be.Addrs), cfg)
			require.NoError(t, err)
			t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
			la := newListener(topic, func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
				fromA.Add(1)
				return runs.handler(0)(ctx, job, ch)
			})
			startWith(t, a, la)
			e := setup(t, be, cfg)
			onCut := 0
			for _, n := range bucketNodes(t, e, topic, cfg.Concurrency) {
				if n == cut {
					onCut++
				}
			}
			require.Positive(t, onCut)
			// A alone for a while: it owns and locks every bucket.
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: "warm"}))
			waitFor(t, 10*time.Second, "warm-up ran", func() bool { return runs.ranAll("warm", 0, map[string]bool{"warm": true}) })
			b := e.another(t, nil)
			startWith(t, b, newListener(topic, runs.handler(0)))
			startWith(t, e.c, newListener(topic, runs.handler(0)))
			waitFor(t, 5*time.Second, "three clients announced", func() bool {
				return e.rdb.ZCard(ctx, keys.Movers(prefix)).Val() == 3
			})
			const jobs = 160
			for i := range jobs {
				require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: fmt.Sprint("j", i), Delay: time.Second}))
			}
			cc.cutNow()
			start := time.Now()
			before := fromA.Load()
			waitFor(t, time.Second+cfg.LockExpiry+40*cfg.ScanInterval, "every job ran", func() bool { return runs.ranAll("j", jobs, nil) })
			t.Logf("all ran %v after the cut; A ran %d of them", time.Since(start), fromA.Load()-before)
			for id, r := range runs.snapshot() {
				require.Len(t, r, 1, "job %s ran more than once", id)
			}
			require.EqualValues(t, 3, e.rdb.ZCard(ctx, keys.Movers(prefix)).Val(), "A stopped announcing")
			// A keeps serving the reachable masters.
			for i := range 40 {
				require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: fmt.Sprint("k", i)}))
			}
			waitFor(t, 40*cfg.ScanInterval, "every later job ran", func() bool { return runs.ranAll("k", 40, nil) })
		})
	}
}

// TestClientCutOffFromASharedKeysMasterKeepsServingTheRest: a client that
// loses its connections to one master, refused from then on, keeps
// running the jobs whose keys live on the other masters, whichever of the
// fleet's shared keys (the alive set, the movers' set, the topic set) that
// master holds; another started client moves and runs what it cannot.
func TestClientCutOffFromASharedKeysMasterKeepsServingTheRest(t *testing.T) {
	testutil.FaultTier(t)
	be := testutil.Cluster(t)
	probe := be.New(t)
	roles := map[string]func(string) string{"alive": keys.Alive, "movers": keys.Movers, "topics": keys.Topics}
	for _, role := range []string{"alive", "movers", "topics"} {
		t.Run(role, func(t *testing.T) {
			// Apart from the alive set's master, unless that is the case.
			prefix := testutil.Prefix(t)
			for role != "alive" && masterOf(t, probe, roles[role](prefix)) == masterOf(t, probe, keys.Alive(prefix)) {
				prefix = testutil.Prefix(t)
			}
			cut := masterOf(t, probe, roles[role](prefix))
			// A topic whose meta lives elsewhere than the role's key.
			topic := "t"
			for i := 0; masterOf(t, probe, keys.ForTopic(prefix, topic).Meta()) == cut; i++ {
				topic = fmt.Sprint("t", i)
			}
			cfg := testutil.Config(t)
			cfg.Prefix = prefix
			cfg.Concurrency = 16
			ctx := context.Background()
			e := setup(t, be, cfg)
			reachable := map[int]bool{}
			for b, n := range bucketNodes(t, e, topic, cfg.Concurrency) {
				reachable[b] = n != cut
			}
			var runs jobRuns
			cc := &cuttable{node: cut}
			a, err := redeq.New(cc.client(t, be.Addrs), cfg)
			require.NoError(t, err)
			t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
			startWith(t, a, newListener(topic, runs.handler(0)))
			require.NoError(t, e.c.Start(ctx)) // a mover, no listener
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: "warm"}))
			waitFor(t, 10*time.Second, "warm-up ran", func() bool { return runs.ranAll("", 0, map[string]bool{"warm": true}) })
			cc.cutNow()
			want := map[string]bool{}
			for i := 0; len(want) < 40; i++ {
				id := fmt.Sprint("j", i)
				if !reachable[bucketOf(id, cfg.Concurrency)] {
					continue
				}
				want[id] = true
				require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: id, Delay: 500 * time.Millisecond}))
			}
			start := time.Now()
			waitFor(t, 10*time.Second, "A ran every job of the reachable masters", func() bool { return runs.ranAll("", 0, want) })
			t.Logf("%s's master cut: A ran them all %v after the cut", role, time.Since(start))

			// Another client with a listener runs the jobs of the master
			// A cannot reach: their buckets are moved whoever owned them.
			b := e.another(t, nil)
			startWith(t, b, newListener(topic, runs.handler(0)))
			cutJobs := map[string]bool{}
			for i := 0; len(cutJobs) < 20; i++ {
				id := fmt.Sprint("c", i)
				if reachable[bucketOf(id, cfg.Concurrency)] {
					continue
				}
				cutJobs[id] = true
				require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: id, Delay: 500 * time.Millisecond}))
			}
			waitFor(t, 500*time.Millisecond+cfg.LockExpiry+40*cfg.ScanInterval, "the cut master's jobs ran", func() bool { return runs.ranAll("", 0, cutJobs) })
			for id, r := range runs.snapshot() {
				require.Len(t, r, 1, "job %s ran more than once", id)
			}
		})
	}
}

package pool_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/pool"
)

// TestAddWakesOnEarliest: Add wakes the bucket's mover exactly when the
// new job is due before every job the bucket held, and stores the due
// time asked. A job due with the earliest wakes nothing, even when its id
// sorts first: the mover wakes for that time anyway, and a burst of jobs
// due at one time must not publish once a job.
func TestAddWakesOnEarliest(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			prefix := testutil.Prefix(t)
			s := pool.NewStore(c, prefix)
			ps := c.Subscribe(ctx, keys.WakeChannel(prefix))
			defer ps.Close()
			_, err := ps.Receive(ctx) // subscribed
			require.NoError(t, err)

			base := time.Now().Add(time.Hour).Truncate(time.Millisecond)
			at := pool.Placement{Bucket: 0, Limit: 100}
			for i, off := range []time.Duration{10, 20, 5, 30, 1, 1, 5} {
				id := fmt.Sprint("j", i)
				if i >= 5 {
					id = fmt.Sprint("a", i) // sorts before the head's id
				}
				job := &pool.Job{Topic: "t", ID: id, Body: []byte("b"), RunAt: base.Add(off * time.Second)}
				due, err := s.Add(ctx, job, at)
				require.NoError(t, err)
				require.Equal(t, job.RunAt, due)
			}
			// A mark published from the bucket's node arrives after its wakes.
			pub := redis.Cmdable(c)
			if cc, ok := c.(*redis.ClusterClient); ok {
				pub, err = cc.MasterForKey(ctx, keys.ForBucket(prefix, "t", 0).Pool())
				require.NoError(t, err)
			}
			require.NoError(t, pub.Publish(ctx, keys.WakeChannel(prefix), "end").Err())
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			var got []string
			for {
				m, err := ps.ReceiveMessage(rctx)
				require.NoError(t, err)
				if m.Payload == "end" {
					break
				}
				got = append(got, m.Payload)
			}
			addr := keys.Address("t", 0)
			require.Equal(t, []string{addr, addr, addr}, got, "jobs due at +10s, +5s and +1s are each the earliest; the second +1s and +5s are not")
		})
	}
}

var errLost = errors.New("connection lost")

// TestAddManyOwnReplies: when the node of some jobs' bucket fails, AddMany
// reports those jobs only; the others are stored and reported so.
func TestAddManyOwnReplies(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			prefix := testutil.Prefix(t)
			okBucket, lostBucket := loseBucket(t, c, prefix, "t")
			s := pool.NewStore(c, prefix)
			var jobs []*pool.Job
			var at []pool.Placement
			for i := range 6 {
				jobs = append(jobs, &pool.Job{Topic: "t", ID: fmt.Sprint("j", i), Body: []byte("b"), Delay: time.Hour})
				at = append(at, pool.Placement{Bucket: []int{okBucket, lostBucket}[i%2], Limit: 100})
			}
			errs, err := s.AddMany(ctx, jobs, at)
			require.NoError(t, err, "some replies arrived")
			for i, job := range jobs {
				if i%2 == 1 {
					require.ErrorIs(t, errs[i], errLost, i)
					continue
				}
				require.NoError(t, errs[i], i)
				_, err := s.Get(ctx, "t", job.ID, okBucket)
				require.NoError(t, err)
			}
		})
	}
}

// loseBucket returns two buckets of topic (on different masters of a
// cluster) and makes the connection to the second one's fail with errLost:
// on a cluster its node fails its share of each pipeline unsent; elsewhere
// the replies of the scripts on its keys are lost after they ran.
func loseBucket(t *testing.T, c redis.UniversalClient, prefix, topic string) (ok, lost int) {
	lostKey := keys.ForBucket(prefix, topic, 1).Pool()
	isLost := func(cmds []redis.Cmder) bool {
		for _, cmd := range cmds {
			if args := cmd.Args(); len(args) > 3 && args[3] == lostKey {
				return true
			}
		}
		return false
	}
	cc, isCluster := c.(*redis.ClusterClient)
	if !isCluster {
		c.AddHook(testutil.WrapPipelines(func(_ context.Context, cmds []redis.Cmder, next func() error) error {
			err := next()
			for _, cmd := range cmds {
				if isLost([]redis.Cmder{cmd}) {
					cmd.SetErr(errLost)
					err = errLost
				}
			}
			return err
		}))
		return 0, 1
	}
	cc.OnNewNode(func(n *redis.Client) { // before the first command
		n.AddHook(testutil.WrapPipelines(func(_ context.Context, cmds []redis.Cmder, next func() error) error {
			if isLost(cmds) {
				for _, cmd := range cmds {
					cmd.SetErr(errLost)
				}
				return errLost
			}
			return next()
		}))
	})
	ctx := context.Background()
	lostNode, err := cc.MasterForKey(ctx, lostKey)
	require.NoError(t, err)
	for b := 2; b < 64; b++ {
		n, err := cc.MasterForKey(ctx, keys.ForBucket(prefix, topic, b).Pool())
		require.NoError(t, err)
		if n.Options().Addr != lostNode.Options().Addr {
			return b, 1
		}
	}
	t.Fatal("no bucket on another master")
	return 0, 0
}

// TestAddManyOneBucket: jobs of one bucket added together (one run of the
// script) each get their own answer, as if added one by one: an id already
// in the pool or earlier in the batch exists, the pool fills up at its
// limit, an existing id is still told apart from a full pool, and the
// mover is woken once when one of the jobs becomes the bucket's earliest.
func TestAddManyOneBucket(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			prefix := testutil.Prefix(t)
			s := pool.NewStore(c, prefix)
			ps := c.Subscribe(ctx, keys.WakeChannel(prefix))
			defer ps.Close()
			_, err := ps.Receive(ctx) // subscribed
			require.NoError(t, err)

			base := time.Now().Add(time.Hour).Truncate(time.Millisecond)
			job := func(id string, off time.Duration) *pool.Job {
				return &pool.Job{Topic: "t", ID: id, Body: []byte("b-" + id), RunAt: base.Add(off * time.Second)}
			}
			addMany := func(limit int, jobs ...*pool.Job) []error {
				at := make([]pool.Placement, len(jobs))
				for i := range at {
					at[i] = pool.Placement{Bucket: 0, Limit: limit}
				}
				errs, err := s.AddMany(ctx, jobs, at)
				require.NoError(t, err)
				return errs
			}
			require.Equal(t, []error{nil}, addMany(5, job("old", 10))) // wakes: the bucket's first

			batch := []*pool.Job{job("a", 20), job("old", 1), job("b", 30), job("a", 2), job("c", 40), job("d", 50), job("e", 3), job("old", 4)}
			errs := addMany(5, batch...)
			for i, want := range []error{nil, pool.ErrJobExists, nil, pool.ErrJobExists, nil, nil, pool.ErrPoolFull, pool.ErrJobExists} {
				if want == nil {
					require.NoError(t, errs[i], i)
					continue
				}
				require.ErrorIs(t, errs[i], want, i)
			}
			for _, id := range []string{"old", "a", "b", "c", "d"} {
				got, err := s.Get(ctx, "t", id, 0)
				require.NoError(t, err, id)
				require.Equal(t, "b-"+id, string(got.Body), id)
			}
			got, err := s.Get(ctx, "t", "a", 0)
			require.NoError(t, err)
			require.Equal(t, base.Add(20*time.Second), got.RunAt, "the first a, not the second")
			_, err = s.Get(ctx, "t", "e", 0)
			require.ErrorIs(t, err, pool.ErrJobNotFound)

			require.Equal(t, []error{nil, nil}, addMany(10, job("f", 70), job("g", 5)))                   // g wakes
			require.Equal(t, []error{nil, nil, nil}, addMany(10, job("h", 2), job("i", 1), job("j", 80))) // once

			pub := redis.Cmdable(c)
			if cc, ok := c.(*redis.ClusterClient); ok {
				pub, err = cc.MasterForKey(ctx, keys.ForBucket(prefix, "t", 0).Pool())
				require.NoError(t, err)
			}
			require.NoError(t, pub.Publish(ctx, keys.WakeChannel(prefix), "end").Err())
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			var wakes []string
			for {
				m, err := ps.ReceiveMessage(rctx)
				require.NoError(t, err)
				if m.Payload == "end" {
					break
				}
				wakes = append(wakes, m.Payload)
			}
			addr := keys.Address("t", 0)
			require.Equal(t, []string{addr, addr, addr}, wakes, "old, then g, then h and i together")
		})
	}
}

// TestAddRunBound: a run of more jobs than add.lua takes fails naming the
// bound, and writes nothing.
func TestAddRunBound(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			prefix := testutil.Prefix(t)
			k := keys.ForBucket(prefix, "t", 0)
			args := []any{100000, keys.WakeChannel(prefix), "w", 30000, 1}
			for i := range 257 {
				id := fmt.Sprint("j", i)
				args = append(args, id, id, "|0|0||\n", "b", 1000, "")
			}
			op := k.Op("bound")
			err := redis.NewScript(pool.AddSource).Run(ctx, c, []string{k.Pool(), k.Scheduled(), op}, args...).Err()
			require.ErrorContains(t, err, "257 jobs in one run, at most 256")
			n, err := c.Exists(ctx, k.Pool(), k.Scheduled(), op).Result()
			require.NoError(t, err)
			require.Zero(t, n, "nothing written")
		})
	}
}

// TestLoneAddRefusal: a server that refuses writes (maxmemory with
// noeviction, the policy docs/operations.md asks for; or
// min-replicas-to-write without its replicas) refuses a script's first
// write, not its reads. A run of many jobs answers a stored id and a
// full pool with reads only; a lone Add answers a full pool with reads
// only, and a stored id (found by HSETNX, a write) with ErrJobExists or
// the server's refusal; neither writes anything.
func TestLoneAddRefusal(t *testing.T) {
	t.Run("UnderMaxmemory", func(t *testing.T) {
		srv := testutil.StartServer(t, "--maxmemory-policy", "noeviction")
		loneRunRefusal(t, srv.Client(nil), "maxmemory", "1", "OOM")
	})
	t.Run("WithoutReplicas", func(t *testing.T) {
		srv := testutil.StartServer(t)
		loneRunRefusal(t, srv.Client(nil), "min-replicas-to-write", "1", "NOREPLICAS")
	})
}

// loneRunRefusal adds a job to a pool of one, sets the server's config
// param to value so that it refuses writes with refusal, and checks the
// answers of a run of many and of lone Adds of a stored id and to the
// full pool.
func loneRunRefusal(t *testing.T, c *redis.Client, param, value, refusal string) {
	ctx := context.Background()
	s := pool.NewStore(c, "p")
	job := func(id string) *pool.Job {
		return &pool.Job{Topic: "t", ID: id, Body: []byte(id), Delay: time.Hour}
	}
	_, err := s.Add(ctx, job("a"), pool.Placement{Limit: 1})
	require.NoError(t, err)
	require.NoError(t, c.ConfigSet(ctx, param, value).Err()) // writes refused, reads not

	errs, err := s.AddMany(ctx, []*pool.Job{job("a"), job("b")}, []pool.Placement{{Limit: 1}, {Limit: 1}})
	require.NoError(t, err)
	assert.ErrorIs(t, errs[0], pool.ErrJobExists, "in a run: the stored id")
	assert.ErrorIs(t, errs[1], pool.ErrPoolFull, "in a run: the full pool")

	before := testutil.Dump(t, c, "p")
	_, err = s.Add(ctx, job("a"), pool.Placement{Limit: 10})
	require.Error(t, err, "a lone Add of a stored id")
	if !errors.Is(err, pool.ErrJobExists) {
		assert.ErrorContains(t, err, refusal, "a lone Add of a stored id")
	}
	assert.Equal(t, before, testutil.Dump(t, c, "p"), "a lone Add of a stored id wrote")
	_, err = s.Add(ctx, job("b"), pool.Placement{Limit: 1})
	assert.ErrorIs(t, err, pool.ErrPoolFull, "a lone Add to a full pool")
	assert.Equal(t, before, testutil.Dump(t, c, "p"), "a lone Add to a full pool wrote")
}

// TestAddManyKeepsOrderAcrossNoScript: after a restart or a failover the
// server has no scripts, and each producer's first EVALSHA fails with
// NOSCRIPT until one of them loads add.lua again (go-redis's Script.Run
// does, with EVAL). RunPipelined runs the calls that failed with NOSCRIPT
// again after the pipeline: when add.lua is loaded by another producer
// while the server reads a pipeline, the runs after that moment go
// through and those before it run after them. The jobs of a bucket in a
// chunk go as one run, so AddMany answers as one by one: of two jobs
// with one id, 64 jobs apart, the first is added and the last exists.
// The pipeline here carries a run for another bucket too, so that it is
// cut between two EVALSHAs.
func TestAddManyKeepsOrderAcrossNoScript(t *testing.T) {
	srv := testutil.StartServer(t)
	side := srv.Client(nil)
	ctx := context.Background()
	var armed atomic.Bool
	c := srv.Client(&redis.Options{
		Dialer: testutil.Dialer(func(_ int, conn net.Conn) net.Conn {
			return testutil.SplitPipeline(conn, &armed, func() {
				// Another producer meets NOSCRIPT and loads the script.
				require.NoError(t, side.ScriptLoad(context.Background(), pool.AddSource).Err())
			})
		}),
	})
	require.NoError(t, c.Ping(ctx).Err())
	s := pool.NewStore(c, "p")
	jobs := []*pool.Job{{Topic: "t", ID: "x", Body: []byte("first"), Delay: time.Hour}}
	for i := range 63 {
		jobs = append(jobs, &pool.Job{Topic: "t", ID: fmt.Sprint("j", i), Body: []byte("j"), Delay: time.Hour})
	}
	at := make([]pool.Placement, len(jobs), 75)
	for i := range 10 {
		jobs = append(jobs, &pool.Job{Topic: "t", ID: fmt.Sprint("other", i), Body: []byte("o"), Delay: time.Hour})
		at = append(at, pool.Placement{Bucket: 1})
	}
	jobs = append(jobs, &pool.Job{Topic: "t", ID: "x", Body: []byte("second"), Delay: time.Hour})
	at = append(at, pool.Placement{})
	for i := range at {
		at[i].Limit = 1000
	}
	// The server restarted: no script cached.
	require.NoError(t, side.ScriptFlush(ctx).Err())
	armed.Store(true)
	errs, err := s.AddMany(ctx, jobs, at)
	require.NoError(t, err)
	require.False(t, armed.Load(), "the pipeline was sent in two parts")
	assert.NoError(t, errs[0], "the first x")
	assert.ErrorIs(t, errs[len(jobs)-1], pool.ErrJobExists, "the last x")
	for i, err := range errs[1 : len(jobs)-1] {
		assert.NoError(t, err, "job %d", i+1)
	}
	got, err := s.Get(ctx, "t", "x", 0)
	require.NoError(t, err)
	assert.Equal(t, "first", string(got.Body), "the copy stored")
}

// TestAddKeepsFewOpKeys: the op keys Adds leave for their reruns are as
// many as the runs under way at once on a bucket, not one per Add: after
// thousands of Adds from many goroutines to two buckets, a few remain.
func TestAddKeepsFewOpKeys(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			prefix := testutil.Prefix(t)
			s := pool.NewStore(c, prefix)
			const goroutines, each = 16, 150
			var wg sync.WaitGroup
			for g := range goroutines {
				wg.Go(func() {
					for i := range each {
						j := &pool.Job{Topic: "t", ID: fmt.Sprint("g", g, "-", i), Body: []byte("b"), Delay: time.Hour}
						// A ctx that can end sends the Add through the pipelines.
						actx, cancel := context.WithTimeout(ctx, time.Minute)
						_, err := s.Add(actx, j, pool.Placement{Bucket: i % 2, Limit: 1 << 20})
						cancel()
						if !assert.NoError(t, err) {
							return
						}
					}
				})
			}
			wg.Wait()
			ops := 0
			for _, key := range testutil.Keys(t, c, prefix) {
				if strings.Contains(key, ":op:") {
					ops++
				}
			}
			require.Positive(t, ops, "no op key: a rerun would find no reply")
			// Two buckets, at most two round trips of pipelines under way,
			// each with at most one run per bucket, and lone runs besides.
			require.LessOrEqual(t, ops, 2*goroutines, "op keys after %d Adds", goroutines*each)
			n, err := c.HLen(ctx, keys.ForBucket(prefix, "t", 0).Pool()).Result()
			require.NoError(t, err)
			require.Equal(t, int64(goroutines*each/2), n)
		})
	}
}

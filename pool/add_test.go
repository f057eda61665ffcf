package pool_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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
		c.AddHook(pipelineHook(func(cmds []redis.Cmder, next func() error) error {
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
		n.AddHook(pipelineHook(func(cmds []redis.Cmder, next func() error) error {
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

// pipelineHook runs fn around every pipeline of a client.
type pipelineHook func(cmds []redis.Cmder, next func() error) error

func (h pipelineHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h pipelineHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h pipelineHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return h(cmds, func() error { return next(ctx, cmds) })
	}
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
			args := []any{100000, keys.WakeChannel(prefix), "w", 30000}
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

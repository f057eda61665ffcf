package rdb_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redeq-go/redeq/internal/rdb"
	"github.com/redeq-go/redeq/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var incr = redis.NewScript(`return redis.call('INCR', KEYS[1]) * 0 + tonumber(ARGV[1])`)

// TestCommitterManyCallers: concurrent callers each get their own reply,
// and every call runs exactly once.
func TestCommitterManyCallers(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			key := testutil.Prefix(t) + ":{n}"
			cm := rdb.NewCommitter(c, incr)
			var wg sync.WaitGroup
			const callers, each = 32, 50
			for g := range callers {
				wg.Go(func() {
					for i := range each {
						want := int64(g*1000 + i)
						v, err := cm.Do(context.Background(), rdb.Call{Keys: []string{key}, Args: []any{want}})
						require.NoError(t, err)
						require.Equal(t, want, v, fmt.Sprint(g, i))
					}
				})
			}
			wg.Wait()
			n, err := c.Get(context.Background(), key).Int()
			require.NoError(t, err)
			require.Equal(t, callers*each, n)
			c.Del(context.Background(), key)
		})
	}
}

func TestCommitterCanceled(t *testing.T) {
	c := testutil.Backends(t)[0].New(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := rdb.NewCommitter(c, incr).Do(ctx, rdb.Call{Keys: []string{"k"}, Args: []any{1}})
	require.ErrorIs(t, err, context.Canceled)
}

var errLost = errors.New("connection lost")

// TestRunPipelinedOwnReplies: when the node holding some of a pipeline's
// keys fails, the commands on the other keys still return their replies.
func TestRunPipelinedOwnReplies(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ok, lost := loseReplies(t, c)
			var calls []rdb.Call
			for i := range 6 {
				key := []string{ok, lost}[i%2]
				calls = append(calls, rdb.Call{Keys: []string{key}, Args: []any{i}})
			}
			cmds := rdb.RunPipelined(context.Background(), c, incr, calls)
			require.Len(t, cmds, len(calls))
			require.NoError(t, rdb.NoReply(cmds), "some replies arrived")
			for i, cmd := range cmds {
				if i%2 == 1 {
					require.ErrorIs(t, cmd.Err(), errLost, i)
					continue
				}
				v, err := cmd.Result()
				require.NoError(t, err, i)
				require.Equal(t, int64(i), v)
			}
		})
	}
}

// TestRunPipelinedReloadsScript: a server that lost its scripts (restart,
// failover) still runs every call.
func TestRunPipelinedReloadsScript(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			flush := func(ctx context.Context, n *redis.Client) error { return n.ScriptFlush(ctx).Err() }
			if cc, isCluster := c.(*redis.ClusterClient); isCluster {
				require.NoError(t, cc.ForEachMaster(ctx, flush))
			} else {
				require.NoError(t, flush(ctx, c.(*redis.Client)))
			}
			key := testutil.Prefix(t) + ":{n}"
			cmds := rdb.RunPipelined(ctx, c, incr, []rdb.Call{{Keys: []string{key}, Args: []any{7}}, {Keys: []string{key}, Args: []any{8}}})
			for i, cmd := range cmds {
				v, err := cmd.Result()
				require.NoError(t, err)
				require.Equal(t, int64(7+i), v)
			}
			c.Del(ctx, key)
		})
	}
}

// TestCommitterOwnReply: callers that share a pipeline with calls on a
// failed node get their own replies, not that node's error.
func TestCommitterOwnReply(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ok, lost := loseReplies(t, c)
			g := holdRoundTrips(c, testutil.Prefix(t)+":{hold}")
			cm := rdb.NewCommitter(c, incr)
			ctx := context.Background()

			// Occupy every round trip, so that the next calls queue and
			// then go in one pipeline.
			var held sync.WaitGroup
			for range rdb.MaxInFlight {
				held.Go(func() {
					_, err := cm.Do(ctx, rdb.Call{Keys: []string{g.key}, Args: []any{0}})
					require.NoError(t, err)
				})
			}
			require.Eventually(t, func() bool { return int(g.held.Load())+cm.Queued() == rdb.MaxInFlight }, 5*time.Second, time.Millisecond)
			queued := cm.Queued()
			var wg sync.WaitGroup
			const callers = 8
			for i := range callers {
				key := []string{ok, lost}[i%2]
				wg.Go(func() {
					v, err := cm.Do(ctx, rdb.Call{Keys: []string{key}, Args: []any{i}})
					if key == lost {
						require.ErrorIs(t, err, errLost, i)
						return
					}
					require.NoError(t, err, i)
					require.Equal(t, int64(i), v)
				})
			}
			require.Eventually(t, func() bool { return cm.Queued() == queued+callers }, 5*time.Second, time.Millisecond)
			close(g.open)
			wg.Wait()
			held.Wait()
			require.NoError(t, cm.Wait(ctx))
		})
	}
}

// TestCommitterDeadline: a caller returns its ctx's error by its deadline
// while Redis does not answer, and the round trips it left end afterwards.
func TestCommitterDeadline(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			g := holdRoundTrips(c, testutil.Prefix(t)+":{hold}")
			cm := rdb.NewCommitter(c, incr)
			var wg sync.WaitGroup
			for i := range 16 {
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
					defer cancel()
					_, err := cm.Do(ctx, rdb.Call{Keys: []string{g.key}, Args: []any{i}})
					require.ErrorIs(t, err, context.DeadlineExceeded)
					require.False(t, g.late.Load(), "returned only once Redis answered")
				})
			}
			wg.Wait()
			close(g.open)
			ctx := context.Background()
			require.NoError(t, cm.Wait(ctx))
			v, err := cm.Do(ctx, rdb.Call{Keys: []string{g.key}, Args: []any{99}})
			require.NoError(t, err)
			require.Equal(t, int64(99), v)
			c.Del(ctx, g.key)
		})
	}
}

// TestCommitterOverlaps: a slow round trip does not hold up the callers
// that come after it.
func TestCommitterOverlaps(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			p := testutil.Prefix(t)
			g := holdRoundTrips(c, p+":{hold}")
			cm := rdb.NewCommitter(c, incr)
			ctx := context.Background()
			var slow sync.WaitGroup
			slow.Go(func() {
				v, err := cm.Do(ctx, rdb.Call{Keys: []string{g.key}, Args: []any{1}})
				require.NoError(t, err)
				require.Equal(t, int64(1), v)
			})
			require.Eventually(t, func() bool { return g.held.Load() == 1 }, 5*time.Second, time.Millisecond)
			key := p + ":{n}"
			var wg sync.WaitGroup
			for w := range 4 {
				wg.Go(func() {
					for i := range 10 {
						v, err := cm.Do(ctx, rdb.Call{Keys: []string{key}, Args: []any{w*100 + i}})
						require.NoError(t, err)
						require.Equal(t, int64(w*100+i), v)
					}
				})
			}
			wg.Wait()
			require.False(t, g.late.Load(), "the calls waited for the slow round trip")
			close(g.open)
			slow.Wait()
			require.NoError(t, cm.Wait(ctx))
			c.Del(ctx, key, g.key)
		})
	}
}

// hook runs fn around every command and pipeline of a client; next sends
// them on.
type hook func(ctx context.Context, cmds []redis.Cmder, next func() error) error

func (h hook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h(ctx, []redis.Cmder{cmd}, func() error { return next(ctx, cmd) })
	}
}

func (h hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return h(ctx, cmds, func() error { return next(ctx, cmds) })
	}
}

// scriptKey returns the first key of a script command, or "".
func scriptKey(cmd redis.Cmder) string {
	args := cmd.Args()
	if len(args) < 4 || (cmd.Name() != "evalsha" && cmd.Name() != "eval") {
		return ""
	}
	k, _ := args[3].(string)
	return k
}

// gate holds every round trip that carries key until open is closed (or
// for 5 s, setting late, so that a test that fails does not hang).
type gate struct {
	key  string
	open chan struct{}
	held atomic.Int32 // round trips held so far
	late atomic.Bool
}

func holdRoundTrips(c redis.UniversalClient, key string) *gate {
	g := &gate{key: key, open: make(chan struct{})}
	c.AddHook(hook(func(ctx context.Context, cmds []redis.Cmder, next func() error) error {
		for _, cmd := range cmds {
			if scriptKey(cmd) == key {
				g.held.Add(1)
				select {
				case <-g.open:
				case <-time.After(5 * time.Second):
					g.late.Store(true)
				}
				break
			}
		}
		return next()
	}))
	return g
}

// loseReplies returns two keys and makes the connection to the one holding
// lost fail with errLost. On a cluster the keys are on different masters,
// and the node of lost fails its whole share of each pipeline unsent;
// elsewhere the server runs the commands on lost but their replies are
// lost.
func loseReplies(t *testing.T, c redis.UniversalClient) (ok, lost string) {
	p := testutil.Prefix(t)
	lost = p + ":{lost}"
	cc, isCluster := c.(*redis.ClusterClient)
	if !isCluster {
		c.AddHook(hook(func(ctx context.Context, cmds []redis.Cmder, next func() error) error {
			err := next()
			for _, cmd := range cmds {
				if scriptKey(cmd) == lost {
					cmd.SetErr(errLost)
					err = errLost
				}
			}
			return err
		}))
		return p + ":{ok}", lost
	}
	// Before the first command: node clients are made then.
	cc.OnNewNode(func(n *redis.Client) {
		n.AddHook(hook(func(ctx context.Context, cmds []redis.Cmder, next func() error) error {
			for _, cmd := range cmds {
				if scriptKey(cmd) == lost {
					for _, cmd := range cmds {
						cmd.SetErr(errLost)
					}
					return errLost
				}
			}
			return next()
		}))
	})
	ctx := context.Background()
	lostNode, err := cc.MasterForKey(ctx, lost)
	require.NoError(t, err)
	for i := range 100 {
		ok = fmt.Sprintf("%s:{ok%d}", p, i)
		n, err := cc.MasterForKey(ctx, ok)
		require.NoError(t, err)
		if n.Options().Addr != lostNode.Options().Addr {
			return ok, lost
		}
	}
	t.Fatal("no key on another master")
	return "", ""
}

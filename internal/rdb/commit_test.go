package rdb_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
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
	c.AddHook(testutil.Wrap(func(ctx context.Context, cmds []redis.Cmder, next func() error) error {
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
		c.AddHook(testutil.Wrap(func(ctx context.Context, cmds []redis.Cmder, next func() error) error {
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
		n.AddHook(testutil.Wrap(func(ctx context.Context, cmds []redis.Cmder, next func() error) error {
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

// echo counts its runs and replies with its own call's argument.
var echo = redis.NewScript(`redis.call('INCR', KEYS[1]) return tonumber(ARGV[1])`)

// echoJoined is a joining script (one shared argument): it counts the
// calls it carries and replies with each call's own argument.
var echoJoined = redis.NewScript(`local out = {}
for i = 2, #ARGV do out[#out + 1] = tonumber(ARGV[i]) end
redis.call('INCRBY', KEYS[1], #ARGV - 1)
return out`)

// noLeak checks, once the test and its cleanups are done, that it left
// no goroutine behind.
func noLeak(t *testing.T) {
	opts := []goleak.Option{goleak.IgnoreCurrent(), goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")}
	t.Cleanup(func() { goleak.VerifyNone(t, opts...) })
}

func committerGoroutines() int {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "created by github.com/redeq-go/redeq/internal/rdb.") {
			n++
		}
	}
	return n
}

// TestCommitterHandsOverAroundLinger: a round trip's goroutine waits up
// to linger (1 ms) for the next round trip and hands batches over.
// Callers that call again right around the linger time (0 to 2 ms apart, so that a round trip's
// goroutine is waiting, giving up, or just gave up), with context.
// Background (run on the caller's goroutine), ctxs that cannot end, and
// ctxs that end before or while the call is on the wire: every caller
// that got a reply got its own; a caller whose ctx cannot end never gets
// a ctx error; the calls that ran are at least those that got a reply and
// at most those made; Wait then answers at once, and no goroutine of the
// Committer is left 20 ms later.
func TestCommitterHandsOverAroundLinger(t *testing.T) {
	noLeak(t)
	for _, be := range testutil.Backends(t) {
		for _, joined := range []bool{false, true} {
			t.Run(fmt.Sprint(be.Name, "/joined=", joined), func(t *testing.T) {
				c := be.New(t)
				key := testutil.Prefix(t) + ":{n}"
				cm := rdb.NewCommitter(c, echo)
				if joined {
					cm = rdb.NewJoiningCommitter(c, echoJoined, 1, nil)
				}
				callers, each := 24, 60
				if be.Mini != nil {
					each = 30
				}
				var replied, made atomic.Int64
				var wg sync.WaitGroup
				for g := range callers {
					wg.Go(func() {
						rng := rand.New(rand.NewPCG(uint64(g), 23))
						for i := range each {
							want := int64(g*100000 + i)
							kind := rng.IntN(5)
							var ctx context.Context
							cancel := context.CancelFunc(func() {})
							switch kind {
							case 0:
								ctx = context.Background()
							case 1:
								ctx, cancel = context.WithTimeout(context.Background(), 20*time.Second)
							case 2:
								ctx, cancel = context.WithTimeout(context.Background(), time.Duration(rng.IntN(1500))*time.Microsecond)
							case 3:
								var c2 context.CancelFunc
								ctx, c2 = context.WithCancel(context.Background())
								ctx, cancel = context.WithoutCancel(ctx), c2
							default:
								ctx, cancel = context.WithCancel(context.Background())
								d := time.Duration(rng.IntN(1000)) * time.Microsecond
								time.AfterFunc(d, cancel)
							}
							args := []any{want}
							if joined {
								args = []any{"shared", want}
							}
							made.Add(1)
							v, err := cm.Do(ctx, rdb.Call{Keys: []string{key}, Args: args})
							cancel()
							switch {
							case err == nil:
								replied.Add(1)
								if v != want {
									t.Errorf("caller %d call %d (ctx kind %d): got %v, want its own %d", g, i, kind, v, want)
								}
							case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
								if kind == 0 || kind == 1 || kind == 3 {
									t.Errorf("caller %d call %d: a ctx that cannot end, yet %v", g, i, err)
								}
							default:
								t.Errorf("caller %d call %d: %v", g, i, err)
							}
							// Call again right around the linger time.
							time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
						}
					})
				}
				wg.Wait()
				wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				require.NoError(t, cm.Wait(wctx))
				start := time.Now()
				for committerGoroutines() > 0 {
					require.Less(t, time.Since(start), 20*time.Millisecond, "the Committer's goroutines outlived its last call by 20 ms")
					time.Sleep(time.Millisecond)
				}
				ran, err := c.Get(context.Background(), key).Int64()
				require.NoError(t, err)
				t.Logf("%d calls made, %d replied, %d ran", made.Load(), replied.Load(), ran)
				require.GreaterOrEqual(t, ran, replied.Load(), "fewer calls ran than got a reply")
				require.LessOrEqual(t, ran, made.Load(), "more calls ran than were made: a call ran twice")
			})
		}
	}
}

// TestCommitterCtxEndsWhileHung: with every round trip hung (a
// hook holds them), callers whose ctx ends return its error within a few
// ms, whether their call is on the wire or queued; callers with context.
// Background get their own replies once the round trips go on; the
// queued calls of callers who gave up are never run.
func TestCommitterCtxEndsWhileHung(t *testing.T) {
	noLeak(t)
	be := testutil.Backends(t)[0]
	c := be.New(t)
	key := testutil.Prefix(t) + ":{n}"
	release := make(chan struct{})
	c.AddHook(testutil.Wrap(func(_ context.Context, cmds []redis.Cmder, next func() error) error {
		if len(cmds) > 1 || cmds[0].Name() == "evalsha" || cmds[0].Name() == "eval" {
			<-release // every script run, every pipeline
		}
		return next()
	}))
	cm := rdb.NewCommitter(c, echo)
	bg := make(chan error, 2)
	for i := range 2 {
		go func() {
			v, err := cm.Do(context.Background(), rdb.Call{Keys: []string{key}, Args: []any{int64(1000 + i)}})
			if err == nil && v != int64(1000+i) {
				err = fmt.Errorf("got %v, want %d", v, 1000+i)
			}
			bg <- err
		}()
	}
	time.Sleep(20 * time.Millisecond) // both round trips on the wire, held
	var wg sync.WaitGroup
	var worst atomic.Int64
	for i := range 32 {
		wg.Go(func() {
			d := time.Duration(10+i) * time.Millisecond
			ctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			start := time.Now()
			_, err := cm.Do(ctx, rdb.Call{Keys: []string{key}, Args: []any{int64(i)}})
			over := time.Since(start) - d
			if int64(over) > worst.Load() {
				worst.Store(int64(over))
			}
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("queued call %d: %v", i, err)
			}
			if over > 25*time.Millisecond {
				t.Errorf("queued call %d returned %v after its ctx ended", i, over)
			}
		})
	}
	wg.Wait()
	require.Equal(t, 32, cm.Queued(), "the calls queued behind the held round trips")
	close(release)
	for range 2 {
		require.NoError(t, <-bg)
	}
	wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, cm.Wait(wctx))
	ran, err := c.Get(context.Background(), key).Int64()
	require.NoError(t, err)
	require.EqualValues(t, 2, ran, "calls whose callers gave up while queued ran")
	t.Logf("worst return past the ctx's end: %v", time.Duration(worst.Load()))
}

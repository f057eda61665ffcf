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

// Review 23: the Committer that group-commits concurrent Adds, attacked
// where its round trips' goroutines wait up to linger (1 ms) for the next
// round trip and hand batches over (commit.go, start and loop).

// r23Echo counts its runs and replies with its own call's argument.
var r23Echo = redis.NewScript(`redis.call('INCR', KEYS[1]) return tonumber(ARGV[1])`)

// r23EchoJoined is a joining script (one shared argument): it counts the
// calls it carries and replies with each call's own argument.
var r23EchoJoined = redis.NewScript(`local out = {}
for i = 2, #ARGV do out[#out + 1] = tonumber(ARGV[i]) end
redis.call('INCRBY', KEYS[1], #ARGV - 1)
return out`)

// r23NoLeak checks, once the test and its cleanups are done, that it left
// no goroutine behind.
func r23NoLeak(t *testing.T) {
	opts := []goleak.Option{goleak.IgnoreCurrent(), goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial")}
	t.Cleanup(func() { goleak.VerifyNone(t, opts...) })
}

func r23CommitterGoroutines() int {
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

// TestReview23CommitterHandoffOwnReplies: callers that call again right
// around the linger time (0 to 2 ms apart, so that a round trip's
// goroutine is waiting, giving up, or just gave up), with context.
// Background (run on the caller's goroutine), ctxs that cannot end, and
// ctxs that end before or while the call is on the wire: every caller
// that got a reply got its own; a caller whose ctx cannot end never gets
// a ctx error; the calls that ran are at least those that got a reply and
// at most those made; Wait then answers at once, and no goroutine of the
// Committer is left 20 ms later.
func TestReview23CommitterHandoffOwnReplies(t *testing.T) {
	r23NoLeak(t)
	for _, be := range testutil.Backends(t) {
		for _, joined := range []bool{false, true} {
			t.Run(fmt.Sprint(be.Name, "/joined=", joined), func(t *testing.T) {
				c := be.New(t)
				key := testutil.Prefix(t) + ":{n}"
				cm := rdb.NewCommitter(c, r23Echo)
				if joined {
					cm = rdb.NewJoiningCommitter(c, r23EchoJoined, 1, nil)
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
				for r23CommitterGoroutines() > 0 {
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

// TestReview23CommitterCtxEndsWhileHung: with every round trip hung (a
// hook holds them), callers whose ctx ends return its error within a few
// ms, whether their call is on the wire or queued; callers with context.
// Background get their own replies once the round trips go on; the
// queued calls of callers who gave up are never run.
func TestReview23CommitterCtxEndsWhileHung(t *testing.T) {
	r23NoLeak(t)
	be := testutil.Backends(t)[0]
	c := be.New(t)
	key := testutil.Prefix(t) + ":{n}"
	release := make(chan struct{})
	c.AddHook(r23HoldHook{release})
	cm := rdb.NewCommitter(c, r23Echo)
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

// r23HoldHook holds every script run until release is closed.
type r23HoldHook struct{ release chan struct{} }

func (h r23HoldHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h r23HoldHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			<-h.release
		}
		return next(ctx, cmd)
	}
}
func (h r23HoldHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		<-h.release
		return next(ctx, cmds)
	}
}

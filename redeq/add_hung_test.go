package redeq_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	rand "math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// addSlack is how long past its ctx's end an Add may take to return. It
// is far below the 10 s ReadTimeout of these clients, so an Add that
// waited for go-redis to give up fails, while the scheduler of a loaded
// 2-core machine under -race (tens of ms) does not. How soon Add returns
// is measured by the bench, not asserted here.
const addSlack = 500 * time.Millisecond

// startAddProxy starts a testutil.Proxy in front of upstream whose
// CutReply, DelayReply and DelayRequest faults pick the runs of add.lua.
func startAddProxy(t *testing.T, upstream string) *testutil.Proxy {
	t.Helper()
	p := testutil.StartProxy(t, upstream)
	p.Match(isAddRun)
	return p
}

// isAddRun reports whether a request a client wrote is a run of add.lua:
// an EVALSHA naming an add run's op key.
func isAddRun(b []byte) bool {
	return bytes.Contains(bytes.ToLower(b), []byte("evalsha")) && bytes.Contains(b, []byte(":op:"))
}

// standaloneBackends returns the single-server backends (a proxy can stand in
// front of them): miniredis and the real server.
func standaloneBackends(t *testing.T) []testutil.Backend {
	var out []testutil.Backend
	for _, be := range testutil.Backends(t) {
		if be.Name != "cluster" {
			out = append(out, be)
		}
	}
	return out
}

func redisVia(t *testing.T, addr string, mod func(*redis.Options)) *redis.Client {
	o := &redis.Options{Addr: addr, ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second}
	if mod != nil {
		mod(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return c
}

func addClient(t *testing.T, rdb redis.UniversalClient, cfg config.Config) *redeq.Client {
	c, err := redeq.New(rdb, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
	return c
}

// addGoroutines lists the goroutines the library started for Add's
// calls (a Committer's round trips, Await's calls): those created by a
// function of internal/rdb.
func addGoroutines() []string {
	buf := make([]byte, 8<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "created by github.com/redeq-go/redeq/internal/rdb.") {
			out = append(out, g)
		}
	}
	return out
}

// addSettle is how soon after the last Add returned every goroutine of
// the library has ended: a round trip's goroutine lingers a millisecond
// for the next call; the rest is what a loaded CI machine under the race
// detector may take to schedule it (50 ms was not always enough).
const addSettle = 500 * time.Millisecond

// requireNoAddGoroutines fails unless every goroutine of the library
// has ended within d.
func requireNoAddGoroutines(t *testing.T, d time.Duration, what string) {
	t.Helper()
	start := time.Now()
	for {
		left := addGoroutines()
		if len(left) == 0 {
			t.Logf("%s: no goroutine of the library after %v", what, time.Since(start).Round(time.Millisecond))
			return
		}
		if time.Since(start) > d {
			require.Failf(t, "goroutines of the library left", "%s: %d goroutines still there %v after the last Add returned; the first:\n%s",
				what, len(left), d, addFrames(left[0]))
		}
		time.Sleep(time.Millisecond)
	}
}

// storedJobs reads every job of topic's n buckets under prefix straight
// from Redis, and fails when one is stored twice: a pool field and a ZSET
// member per job, each id once (plain or broadcast, not both).
type storedJob struct {
	body      string
	dueMs     int64
	broadcast bool
	headers   map[string]string
}

func storedJobs(t *testing.T, c *redeq.Client, rdb redis.UniversalClient, prefix, topic string, n int) map[string]storedJob {
	t.Helper()
	ctx := context.Background()
	out := map[string]storedJob{}
	for b := range n {
		k := keys.ForBucket(prefix, topic, b)
		fields, err := rdb.HKeys(ctx, k.Pool()).Result()
		require.NoError(t, err)
		members, err := rdb.ZRangeWithScores(ctx, k.Scheduled(), 0, -1).Result()
		require.NoError(t, err)
		seen := map[string]bool{}
		for _, m := range members {
			s := m.Member.(string)
			id := strings.TrimPrefix(s, keys.BroadcastMark)
			require.False(t, seen[id], "bucket %d: id %q has two ZSET members: stored twice", b, id)
			seen[id] = true
		}
		slices.Sort(fields)
		ids := slices.Sorted(func(yield func(string) bool) {
			for id := range seen {
				if !yield(id) {
					return
				}
			}
		})
		require.Equal(t, fields, ids, "bucket %d: pool and ZSET disagree", b)
		for _, m := range members {
			s := m.Member.(string)
			id := strings.TrimPrefix(s, keys.BroadcastMark)
			j, err := c.Get(ctx, topic, id)
			require.NoError(t, err, id)
			out[id] = storedJob{body: string(j.Body), dueMs: int64(m.Score), broadcast: s != id, headers: j.Headers}
		}
	}
	return out
}

// addFrames shortens a goroutine's stack to its header and the functions
// of the library and go-redis it is in.
func addFrames(g string) string {
	lines := strings.Split(g, "\n")
	out := []string{lines[0]}
	for _, l := range lines[1:] {
		if strings.HasPrefix(l, "\t") {
			continue
		}
		if i := strings.LastIndex(l, "("); i > 0 && !strings.HasPrefix(l, "created by") {
			l = l[:i]
		}
		out = append(out, "  "+l)
	}
	if len(out) > 14 {
		out = append(out[:6], append([]string{"  ..."}, out[len(out)-7:]...)...)
	}
	return strings.Join(out, "\n")
}

func scribble(b []byte) {
	for i := range b {
		b[i] = 'X'
	}
}

func isCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// TestAddReturnsAtCtxEndWhileRedisHangs: when the caller's ctx ends
// before Redis answers, Add returns ctx's error promptly, whether the
// server's replies are held on the wire, the client's commands are held
// (every backend, the cluster included), or the server is busy; a job
// whose Add gave up is stored with its body as given, or not at all.
func TestAddReturnsAtCtxEndWhileRedisHangs(t *testing.T) {
	t.Parallel()
	t.Run("server_hangs", testAddReturnsAtCtxEndWhileServerHangs)
	t.Run("commands_held", testAddReturnsAtCtxEndWhileCommandsHeld)
	t.Run("server_busy", testAddReturnsAtDeadlineWhileServerBusy)
}

// testAddReturnsAtCtxEndWhileServerHangs: with the server hung (its
// replies held by a proxy), Adds whose ctx ends return ctx's error within
// addSlack of its end, in every state Add can be in: the first Add of a
// topic (recording it), a lone Add on the wire, Adds queued behind two
// round trips on the wire, deadlines and cancels. Each caller then
// scribbles over its body buffer; once the server answers again, a job
// whose Add gave up is stored with its body as given, or not at all, and
// the Adds with context.Background that waited meanwhile are stored with
// theirs.
func testAddReturnsAtCtxEndWhileServerHangs(t *testing.T) {
	for _, be := range standaloneBackends(t) {
		t.Run(be.Name, func(t *testing.T) {
			p := startAddProxy(t, be.Addrs[0])
			cfg := testutil.Config(t)
			c := addClient(t, redisVia(t, p.Addr(), nil), cfg)
			admin := be.New(t)
			reader := addClient(t, admin, cfg)

			type gaveUp struct {
				id, body string
			}
			var mu sync.Mutex
			var gave []gaveUp
			var worst time.Duration
			// add runs one Add whose ctx ends after d (by deadline, or by
			// cancel when cancelAt), and checks it returns in time.
			add := func(what, topic, id string, d time.Duration, cancelAt bool) {
				t.Helper()
				body := []byte("body of " + id)
				j := &redeq.Job{Topic: topic, ID: id, Body: body, Delay: time.Hour}
				var ctx context.Context
				var cancel context.CancelFunc
				if cancelAt {
					ctx, cancel = context.WithCancel(context.Background())
					time.AfterFunc(d, cancel)
				} else {
					ctx, cancel = context.WithTimeout(context.Background(), d)
				}
				defer cancel()
				start := time.Now()
				err := c.Add(ctx, j)
				took := time.Since(start)
				// The ctx ended at start+d at the earliest.
				over := took - d
				if cancelAt {
					require.ErrorIs(t, err, context.Canceled, "%s: %s", what, id)
				} else {
					require.ErrorIs(t, err, context.DeadlineExceeded, "%s: %s", what, id)
				}
				require.LessOrEqual(t, over, addSlack, "%s: Add of %s returned %v after its ctx ended (ctx %v, took %v)", what, id, over, d, took)
				scribble(body) // the caller reuses its buffer
				mu.Lock()
				gave = append(gave, gaveUp{id, "body of " + id})
				worst = max(worst, over)
				mu.Unlock()
			}

			p.Stall.Store(true)
			// a) The first Add of a topic: recording the topic hangs.
			add("first Add of a topic", "t", "first", 40*time.Millisecond, false)
			add("first Add of a topic, canceled", "t", "first2", 40*time.Millisecond, true)
			p.Stall.Store(false)
			require.NoError(t, c.Add(context.Background(), &redeq.Job{Topic: "t", ID: "warm", Delay: time.Hour}))

			// b) A lone Add on the wire.
			p.Stall.Store(true)
			add("lone Add", "t", "lone", 40*time.Millisecond, false)
			add("lone Add, canceled", "t", "lone2", 40*time.Millisecond, true)

			// c) Adds with context.Background fill the round trips (and
			// queue); Adds with a ctx that ends queue behind them, or go on
			// the wire while one is free.
			bgDone := make(chan error, 4)
			bgBodies := map[string][]byte{}
			for i := range 4 {
				id := fmt.Sprint("bg", i)
				b := []byte("body of " + id)
				bgBodies[id] = b
				go func() {
					bgDone <- c.Add(context.Background(), &redeq.Job{Topic: "t", ID: id, Body: b, Delay: time.Hour})
				}()
			}
			time.Sleep(20 * time.Millisecond)
			var wg sync.WaitGroup
			for i := range 24 {
				wg.Go(func() {
					d := time.Duration(20+rand.IntN(40)) * time.Millisecond
					add("queued Add", "t", fmt.Sprint("q", i), d, i%3 == 0)
				})
			}
			wg.Wait()
			select {
			case err := <-bgDone:
				t.Fatalf("an Add with context.Background returned while the server was hung: %v", err)
			default:
			}
			p.Stall.Store(false)
			for range 4 {
				select {
				case err := <-bgDone:
					require.NoError(t, err, "an Add with context.Background, once the server answered")
				case <-time.After(15 * time.Second):
					t.Fatal("Adds with context.Background did not return once the server answered")
				}
			}
			t.Logf("worst return past the ctx's end: %v (%d Adds gave up)", worst, len(gave))
			time.Sleep(100 * time.Millisecond) // round trips whose callers gave up end
			ctx := context.Background()
			for id, b := range bgBodies {
				scribble(b)
				j, err := reader.Get(ctx, "t", id)
				require.NoError(t, err, id)
				require.Equal(t, "body of "+id, string(j.Body), id)
			}
			stored := 0
			for _, g := range gave {
				j, err := reader.Get(ctx, "t", g.id)
				if errors.Is(err, redeq.ErrJobNotFound) {
					continue
				}
				require.NoError(t, err, g.id)
				stored++
				require.Equal(t, g.body, string(j.Body), "%s: its Add returned ctx's error, then its caller reused the buffer", g.id)
			}
			t.Logf("%d of the %d jobs whose Add gave up were stored", stored, len(gave))
		})
	}
}

// TestAddOnDeadlineCuttingClientReturnsByDeadline: on a client with
// ContextTimeoutEnabled, whose calls go-redis ends at their ctx's
// deadline, Add and AddBatch with a deadline run on the caller's
// goroutine; with the server hung they still return ctx's error by the
// deadline (a cancel before it included: the call returns ctx.Canceled
// at the deadline at the latest), whatever they were doing (the first Add
// of a topic, a lone Add, a batch), and a job whose call gave up is stored
// with its body as given, or not at all, though its caller reused the
// buffer.
func TestAddOnDeadlineCuttingClientReturnsByDeadline(t *testing.T) {
	t.Parallel()
	for _, be := range standaloneBackends(t) {
		t.Run(be.Name, func(t *testing.T) {
			p := startAddProxy(t, be.Addrs[0])
			cfg := testutil.Config(t)
			c := addClient(t, redisVia(t, p.Addr(), func(o *redis.Options) { o.ContextTimeoutEnabled = true }), cfg)
			reader := addClient(t, be.New(t), cfg)
			gave := map[string]string{}
			// call runs f under a deadline d away, canceled at cancelAt
			// when that is earlier, and checks it returns ctx's error by the
			// deadline.
			call := func(what string, d, cancelAt time.Duration, f func(ctx context.Context) error) {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), d)
				defer cancel()
				want := context.DeadlineExceeded
				if cancelAt < d {
					time.AfterFunc(cancelAt, cancel)
					want = context.Canceled
				}
				start := time.Now()
				err := f(ctx)
				took := time.Since(start)
				require.ErrorIs(t, err, want, what)
				require.LessOrEqual(t, took-d, addSlack, "%s returned %v after its deadline", what, took-d)
			}
			add := func(what, topic, id string, d, cancelAt time.Duration) {
				t.Helper()
				body := []byte("body of " + id)
				call(what, d, cancelAt, func(ctx context.Context) error {
					return c.Add(ctx, &redeq.Job{Topic: topic, ID: id, Body: body, Delay: time.Hour})
				})
				scribble(body)
				gave[id] = "body of " + id
			}

			p.Stall.Store(true)
			add("first Add of a topic", "t", "first", 40*time.Millisecond, time.Hour)
			p.Stall.Store(false)
			require.NoError(t, c.Add(context.Background(), &redeq.Job{Topic: "t", ID: "warm", Delay: time.Hour}))
			p.Stall.Store(true)
			add("lone Add", "t", "lone", 40*time.Millisecond, time.Hour)
			add("lone Add, canceled before its deadline", "t", "lone2", 200*time.Millisecond, 20*time.Millisecond)
			bodies := [][]byte{[]byte("body of b0"), []byte("body of b1")}
			call("AddBatch", 40*time.Millisecond, time.Hour, func(ctx context.Context) error {
				return c.AddBatch(ctx, []*redeq.Job{
					{Topic: "t", ID: "b0", Body: bodies[0], Delay: time.Hour},
					{Topic: "t", ID: "b1", Body: bodies[1], Delay: time.Hour},
				})
			})
			for i, b := range bodies {
				scribble(b)
				gave[fmt.Sprint("b", i)] = fmt.Sprintf("body of b%d", i)
			}
			p.Stall.Store(false)

			// The client works again once the server answers.
			require.NoError(t, c.Add(context.Background(), &redeq.Job{Topic: "t", ID: "after", Delay: time.Hour}))
			ctx := context.Background()
			for id, body := range gave {
				j, err := reader.Get(ctx, "t", id)
				if errors.Is(err, redeq.ErrJobNotFound) {
					continue
				}
				require.NoError(t, err, id)
				require.Equal(t, body, string(j.Body), "%s: its Add returned ctx's error, then its caller reused the buffer", id)
			}
		})
	}
}

// addOutcome is one job's Add (or AddBatch entry) and its answer.
type addOutcome struct {
	topic     string
	id, body  string
	dueMs     int64
	broadcast bool
	headers   map[string]string
	kind      int // ctx kind, see addCtx
	batch     bool
	err       error
	unknown   bool // the call failed as a whole: stored or not
}

// addCtx returns a ctx of kind k: 0 Background, 1 WithoutCancel, 2 a
// deadline of 0..3 ms (ends mid-call now and then), 3 a deadline of 20 s,
// 4 canceled by another goroutine after 0..2 ms, 5 canceled already.
func addCtx(k int, rng *rand.Rand) (context.Context, context.CancelFunc) {
	switch k {
	case 0:
		return context.Background(), func() {}
	case 1:
		ctx, cancel := context.WithCancel(context.Background())
		return context.WithoutCancel(ctx), cancel
	case 2:
		return context.WithTimeout(context.Background(), time.Duration(rng.IntN(3000))*time.Microsecond)
	case 3:
		return context.WithTimeout(context.Background(), 20*time.Second)
	case 4:
		ctx, cancel := context.WithCancel(context.Background())
		d := time.Duration(rng.IntN(2000)) * time.Microsecond
		go func() {
			time.Sleep(d)
			cancel()
		}()
		return ctx, cancel
	default:
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		return ctx, cancel
	}
}

// TestConcurrentAddsEachGetTheirOwnResult: 64 goroutines add jobs of 300
// ids in 2 topics (so that ids collide) with every kind of ctx, and 8 more
// add batches of the same ids, over 4 buckets each. Each job has a body,
// due time (sub-ms RunAt), headers and broadcast flag of its own; each
// caller scribbles over its body once its call returned. Then, per id: at
// most one caller was told "added", and the stored job is that caller's,
// body, due time (rounded up to the ms), flag and headers; a caller told
// "exists" did not store its job; a job stored though nobody was told
// "added" is one whose call gave up; a ctx that cannot end never yields a
// ctx error; nothing is stored twice.
func TestConcurrentAddsEachGetTheirOwnResult(t *testing.T) {
	t.Parallel()
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			cfg := testutil.Config(t)
			cfg.Concurrency = 4
			cfg.MaxPool = 1 << 20
			e := setup(t, be, cfg)
			ctx := context.Background()
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "id0", Body: []byte("seed"), RunAt: time.UnixMilli(4e12)}))
			base := time.Now().Add(time.Hour)
			const ids, adders, each, batchers, batches = 300, 64, 25, 8, 4
			var mu sync.Mutex
			outcomes := []addOutcome{{topic: "t", id: "id0", body: "seed", dueMs: 4e12, kind: 0}}
			var seq atomic.Int64
			topics := []string{"t", "u"}
			mk := func(rng *rand.Rand, kind int) (*redeq.Job, *addOutcome) {
				n := seq.Add(1)
				topic := topics[rng.IntN(2)]
				id := fmt.Sprint("id", rng.IntN(ids))
				at := base.Add(time.Duration(rng.IntN(1e6)) * time.Millisecond).Add(time.Duration(rng.IntN(1e6)) * time.Nanosecond)
				o := &addOutcome{topic: topic, id: id, body: fmt.Sprintf("body %d of %s/%s", n, topic, id), kind: kind, broadcast: rng.IntN(4) == 0}
				o.dueMs = at.UnixMilli()
				if at.Nanosecond()%1e6 != 0 {
					o.dueMs++
				}
				j := &redeq.Job{Topic: topic, ID: id, Body: []byte(o.body), RunAt: at, Broadcast: o.broadcast}
				if rng.IntN(3) == 0 {
					o.headers = map[string]string{"n": fmt.Sprint(n)}
					j.Headers = map[string]string{"n": fmt.Sprint(n)}
				}
				return j, o
			}
			var wg sync.WaitGroup
			for g := range adders {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(g), 23))
					for range each {
						kind := rng.IntN(6)
						j, o := mk(rng, kind)
						cctx, cancel := addCtx(kind, rng)
						o.err = e.c.Add(cctx, j)
						cancel()
						scribble(j.Body)
						mu.Lock()
						outcomes = append(outcomes, *o)
						mu.Unlock()
					}
				})
			}
			for g := range batchers {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(g), 77))
					for range batches {
						kind := rng.IntN(6)
						var jobs []*redeq.Job
						var os []*addOutcome
						for range 10 {
							j, o := mk(rng, kind)
							o.batch = true
							jobs = append(jobs, j)
							os = append(os, o)
						}
						cctx, cancel := addCtx(kind, rng)
						err := e.c.AddBatch(cctx, jobs)
						cancel()
						var be *redeq.BatchError
						for i, o := range os {
							switch {
							case err == nil:
							case errors.As(err, &be):
								o.err = be.Errs[i]
							default:
								o.err, o.unknown = err, true
							}
							scribble(jobs[i].Body)
						}
						mu.Lock()
						for _, o := range os {
							outcomes = append(outcomes, *o)
						}
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			time.Sleep(50 * time.Millisecond) // round trips whose callers gave up end

			stored := map[string]storedJob{}
			for _, topic := range topics {
				for id, j := range storedJobs(t, e.c, e.rdb, cfg.Prefix, topic, cfg.Concurrency) {
					stored[topic+"/"+id] = j
				}
			}
			byID := map[string][]addOutcome{}
			counts := map[string]int{}
			for _, o := range outcomes {
				byID[o.topic+"/"+o.id] = append(byID[o.topic+"/"+o.id], o)
				switch {
				case o.err == nil:
					counts["added"]++
				case errors.Is(o.err, redeq.ErrJobExists):
					counts["exists"]++
				case isCtxErr(o.err):
					counts["ctx"]++
					require.Contains(t, []int{2, 4, 5}, o.kind, "%s (%q): a ctx that cannot end, yet %v", o.id, o.body, o.err)
				default:
					require.Failf(t, "unexpected error", "%s (%q, batch %v): %v", o.id, o.body, o.batch, o.err)
				}
			}
			t.Logf("outcomes: %v, %d ids stored", counts, len(stored))
			for id, os := range byID {
				got, have := stored[id]
				var winners []addOutcome
				for _, o := range os {
					if o.err == nil {
						winners = append(winners, o)
					}
				}
				require.LessOrEqual(t, len(winners), 1, "%s: %d callers were told their job was added: %+v", id, len(winners), winners)
				if len(winners) == 1 {
					w := winners[0]
					require.True(t, have, "%s: added (%q), not stored", id, w.body)
					require.Equal(t, w.body, got.body, "%s: the caller told \"added\" is not the one stored", id)
					require.Equal(t, w.dueMs, got.dueMs, "%s (%q): due time", id, w.body)
					require.Equal(t, w.broadcast, got.broadcast, "%s (%q): broadcast", id, w.body)
					if len(w.headers) == 0 {
						require.Empty(t, got.headers, id)
					} else {
						require.Equal(t, w.headers, got.headers, id)
					}
				}
				for _, o := range os {
					if errors.Is(o.err, redeq.ErrJobExists) {
						require.True(t, have, "%s (%q): told \"exists\", yet nothing is stored", id, o.body)
						require.NotEqual(t, o.body, got.body, "%s: told \"exists\", yet its own job is stored", id)
					}
				}
				if have && len(winners) == 0 {
					var owner *addOutcome
					for _, o := range os {
						if o.body == got.body {
							owner = &o
						}
					}
					require.NotNil(t, owner, "%s: stored %q, which no caller added", id, got.body)
					require.True(t, isCtxErr(owner.err) || owner.unknown, "%s: stored %q, whose caller was told %v", id, got.body, owner.err)
					require.Equal(t, owner.dueMs, got.dueMs, "%s (%q): due time", id, got.body)
				}
			}
			for id := range stored {
				require.Contains(t, byID, id, "%s stored, never added", id)
			}
		})
	}
}

// TestAddsWithTheirOwnTimeoutsPileUpNoGoroutine: a web handler's pattern,
// each Add with a context.WithTimeout of its own, canceled once it
// returned, from one goroutine in a tight loop, from 64 goroutines at once,
// and from 64 goroutines beside 8 that AddBatch: every Add succeeds and
// stores its job, the library's goroutines do not pile up meanwhile (a
// handful, not one per Add), and none is left 50 ms after the last Add
// returned.
func TestAddsWithTheirOwnTimeoutsPileUpNoGoroutine(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			cfg := testutil.Config(t)
			cfg.MaxPool = 1 << 20
			e := setup(t, be, cfg)
			loop := 1000 // a goroutine that runs a call waits 1 ms for the next: a thousand calls cross it often
			if be.Mini != nil {
				loop = 500 // miniredis runs Lua slowly under -race
			}
			var peak atomic.Int64
			stop := make(chan struct{})
			sampled := make(chan struct{})
			go func() {
				defer close(sampled)
				for {
					select {
					case <-stop:
						return
					case <-time.After(2 * time.Millisecond):
					}
					n := int64(len(addGoroutines()))
					if n > peak.Load() {
						peak.Store(n)
					}
				}
			}()
			add := func(id string) error {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				body := []byte("body of " + id)
				err := e.c.Add(ctx, &redeq.Job{Topic: "t", ID: id, Body: body, Delay: time.Hour})
				scribble(body)
				return err
			}
			start := time.Now()
			for i := range loop {
				require.NoError(t, add(fmt.Sprint("loop", i)))
			}
			t.Logf("tight loop: %d Adds, %v each", loop, time.Since(start)/time.Duration(loop))
			requireNoAddGoroutines(t, addSettle, "tight loop")
			loopPeak := peak.Swap(0)

			var wg sync.WaitGroup
			start = time.Now()
			per := loop / 64
			for g := range 64 {
				wg.Go(func() {
					for i := range per {
						if err := add(fmt.Sprint("fan", g, "-", i)); err != nil {
							t.Errorf("fan %d-%d: %v", g, i, err)
							return
						}
					}
				})
			}
			wg.Wait()
			t.Logf("64 goroutines: %d Adds, %v each", 64*per, time.Since(start)/time.Duration(64*per))
			requireNoAddGoroutines(t, addSettle, "64 goroutines")
			fanPeak := peak.Swap(0)

			for g := range 64 {
				wg.Go(func() {
					for i := range per {
						if err := add(fmt.Sprint("mix", g, "-", i)); err != nil {
							t.Errorf("mix %d-%d: %v", g, i, err)
							return
						}
					}
				})
			}
			for g := range 8 {
				wg.Go(func() {
					for b := range 4 {
						var jobs []*redeq.Job
						for i := range 32 {
							jobs = append(jobs, &redeq.Job{Topic: "t", ID: fmt.Sprint("batch", g, "-", b, "-", i), Body: []byte("batch body"), Delay: time.Hour})
						}
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						err := e.c.AddBatch(ctx, jobs)
						cancel()
						if err != nil {
							t.Errorf("batch %d-%d: %v", g, b, err)
						}
					}
				})
			}
			wg.Wait()
			requireNoAddGoroutines(t, addSettle, "64 goroutines beside AddBatch")
			close(stop)
			<-sampled
			mixPeak := peak.Load()
			t.Logf("library goroutines at most: %d in the loop, %d from 64 goroutines, %d beside AddBatch", loopPeak, fanPeak, mixPeak)
			require.LessOrEqual(t, loopPeak, int64(4), "one goroutine adding in a loop piled up the library's goroutines")
			require.LessOrEqual(t, fanPeak, int64(8), "64 goroutines adding piled up the library's goroutines")

			st := stats(t, e.c, "t")
			require.EqualValues(t, loop+2*64*per+8*4*32, st.Pool)
			require.EqualValues(t, st.Pool, st.Scheduled)
			for _, id := range []string{"loop0", fmt.Sprint("loop", loop-1), "fan63-0", fmt.Sprint("mix0-", per-1)} {
				j, err := e.c.Get(context.Background(), "t", id)
				require.NoError(t, err, id)
				require.Equal(t, "body of "+id, string(j.Body), id)
			}
		})
	}
}

// TestAddsLeaveNoGoroutine: no goroutine of the library is left shortly
// after the last Add returned: after a burst of Adds with ctxs that end,
// after Adds canceled mid-call on a slow server (each reply 30 ms late,
// each ctx 5 ms), and after Shutdown.
func TestAddsLeaveNoGoroutine(t *testing.T) {
	for _, be := range standaloneBackends(t) {
		t.Run(be.Name, func(t *testing.T) {
			p := startAddProxy(t, be.Addrs[0])
			cfg := testutil.Config(t)
			rdb := redisVia(t, p.Addr(), nil)
			c := addClient(t, rdb, cfg)
			require.NoError(t, c.Add(context.Background(), &redeq.Job{Topic: "t", ID: "warm", Delay: time.Hour}))

			// A burst.
			var wg sync.WaitGroup
			for g := range 64 {
				wg.Go(func() {
					for i := range 10 {
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						err := c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint("burst", g, "-", i), Delay: time.Hour})
						cancel()
						if err != nil {
							t.Errorf("burst: %v", err)
						}
					}
				})
			}
			wg.Wait()
			requireNoAddGoroutines(t, addSettle, "after a burst")

			// Canceled mid-call: every add reply 30 ms late.
			p.FaultDelay.Store(int64(30 * time.Millisecond))
			p.DelayReply.Store(1 << 30)
			for g := range 16 {
				wg.Go(func() {
					for i := range 5 {
						ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
						err := c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint("cut", g, "-", i), Delay: time.Hour})
						cancel()
						if !isCtxErr(err) {
							t.Errorf("an Add of 5 ms on a server 30 ms late: %v", err)
						}
					}
				})
			}
			wg.Wait()
			// The round trips on the wire end with their late replies.
			requireNoAddGoroutines(t, 30*time.Millisecond+100*time.Millisecond, "after Adds canceled mid-call")
			p.DelayReply.Store(0)

			// A topic not recorded yet, its recording canceled mid-call.
			p.Stall.Store(true)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
			require.ErrorIs(t, c.Add(ctx, &redeq.Job{Topic: "fresh", ID: "x"}), context.DeadlineExceeded)
			cancel()
			p.Stall.Store(false)
			requireNoAddGoroutines(t, 100*time.Millisecond, "after the recording of a topic was canceled")

			// Adds, then Shutdown.
			for i := range 20 {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				require.NoError(t, c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint("last", i), Delay: time.Hour}))
				cancel()
			}
			require.NoError(t, c.Shutdown(context.Background()))
			requireNoAddGoroutines(t, addSettle, "after Shutdown")
		})
	}
}

// TestShutdownAfterHungAddsLeavesNoGoroutine: Adds whose ctx ended while
// the server hangs (their round trips still on the wire), then the
// client's Shutdown, as a service stopping does, leave behind what
// docs/operations.md says of calls left behind:
//   - the Redis client closed as well: no goroutine of the library is left
//     100 ms later, although the server still does not answer;
//   - the Redis client left open, its reads with a timeout: they end
//     within it while the server still hangs (the caller gave up, so
//     go-redis makes no further attempt);
//   - reads without a timeout (ReadTimeout -1): they end once the server
//     answers.
func TestShutdownAfterHungAddsLeavesNoGoroutine(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	for _, be := range standaloneBackends(t) {
		t.Run(be.Name, func(t *testing.T) {
			for _, tc := range []struct {
				closeRedis  bool
				readTimeout time.Duration
			}{{true, 0}, {false, time.Second}, {false, -1}} {
				closeRedis := tc.closeRedis
				t.Run(fmt.Sprintf("close redis %v, ReadTimeout %v", closeRedis, tc.readTimeout), func(t *testing.T) {
					if tc.readTimeout < 0 && be.Mini != nil {
						t.Skip("once is enough")
					}
					p := startAddProxy(t, be.Addrs[0])
					cfg := testutil.Config(t)
					// Reads with a timeout (1 s, to keep the test short),
					// or without one.
					rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: tc.readTimeout})
					defer rdb.Close()
					c, err := redeq.New(rdb, cfg)
					require.NoError(t, err)
					require.NoError(t, c.Add(context.Background(), &redeq.Job{Topic: "t", ID: "warm", Delay: time.Hour}))
					p.Stall.Store(true)
					defer p.Stall.Store(false)
					for i := range 3 {
						ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
						require.ErrorIs(t, c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint("hung", i), Delay: time.Hour}), context.DeadlineExceeded)
						cancel()
					}
					require.NoError(t, c.Shutdown(context.Background()))
					switch {
					case closeRedis:
						require.NoError(t, rdb.Close())
						requireNoAddGoroutines(t, 100*time.Millisecond, "Shutdown and the Redis client closed while the server hangs")
					case tc.readTimeout >= 0:
						// One read of 1 s, not resent: the caller gave up.
						requireNoAddGoroutines(t, 3*time.Second, "Shutdown while the server hangs, reads with a timeout")
					default:
						time.Sleep(time.Second)
						require.NotEmpty(t, addGoroutines(), "a read without a timeout on a server that does not answer ended")
						p.Stall.Store(false)
						requireNoAddGoroutines(t, 2*time.Second, "the server answers again, reads without a timeout")
					}
				})
			}
		})
	}
}

// TestAddRerunAfterLostReplyStoresOnce: go-redis resends an add run whose
// reply was lost (the connection cut after the server ran it), late (past
// ReadTimeout), or whose request reached the server late (after the resend
// ran). Lone Adds with context.Background (run on the caller's goroutine),
// lone Adds with a ctx (run on a goroutine), and 16 Adds at once (one
// pipeline of joined runs, one of them with an id stored before): every
// caller is told "added" for its own job, the one of the stored id
// "exists", and each job is stored once, as given.
func TestAddRerunAfterLostReplyStoresOnce(t *testing.T) {
	testutil.FaultTier(t) // replies held past ReadTimeout by a proxy, seconds per case
	// Not parallel: its ReadTimeout of 150 ms makes go-redis give up under
	// the load of the chaos tests beside it (a CI run saw i/o timeout).
	for _, be := range standaloneBackends(t) {
		for _, fault := range []string{"cut", "late reply", "late request"} {
			t.Run(be.Name+"/"+fault, func(t *testing.T) {
				p := startAddProxy(t, be.Addrs[0])
				p.FaultDelay.Store(int64(400 * time.Millisecond))
				rt := 150 * time.Millisecond
				if be.Mini != nil {
					rt = 250 * time.Millisecond // miniredis runs Lua slowly under -race
				}
				rdb := redisVia(t, p.Addr(), func(o *redis.Options) {
					o.ReadTimeout, o.MaxRetries, o.MinRetryBackoff = rt, 4, -1
				})
				cfg := testutil.Config(t)
				cfg.Concurrency = 2
				c := addClient(t, rdb, cfg)
				admin := be.New(t)
				ctx := context.Background()
				require.NoError(t, c.Add(ctx, &redeq.Job{Topic: "t", ID: "seed", Body: []byte("seed"), Delay: time.Hour}))
				arm := func(n int64) {
					switch fault {
					case "cut":
						p.CutReply.Store(n)
					case "late reply":
						p.DelayReply.Store(n)
					default:
						p.DelayRequest.Store(n)
					}
				}
				want := map[string]string{"seed": "seed"}
				runs0, faults0 := p.Matched(), p.Faults()
				check := func(what, id string, err error) {
					t.Helper()
					require.NoError(t, err, "%s: %s, its own first add (%d faults, %d add requests so far)", what, id, p.Faults()-faults0, p.Matched()-runs0)
				}
				for i := range 3 {
					arm(1)
					id := fmt.Sprint("bg", i)
					body := []byte("body of " + id)
					check("lone Add, context.Background", id, c.Add(ctx, &redeq.Job{Topic: "t", ID: id, Body: body, Delay: time.Hour}))
					want[id] = string(body)
				}
				for i := range 3 {
					arm(1)
					id := fmt.Sprint("ctx", i)
					body := []byte("body of " + id)
					cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
					check("lone Add, ctx", id, c.Add(cctx, &redeq.Job{Topic: "t", ID: id, Body: body, Delay: time.Hour}))
					cancel()
					want[id] = string(body)
				}
				for round := range 3 {
					arm(2)
					var wg sync.WaitGroup
					errs := make([]error, 16)
					for i := range 16 {
						id := fmt.Sprint("many", round, "-", i)
						if i == 7 {
							id = "seed"
						}
						wg.Go(func() {
							cctx, cancel := addCtx(i%4&1*3, nil) // Background or a deadline of 20 s
							defer cancel()
							errs[i] = c.Add(cctx, &redeq.Job{Topic: "t", ID: id, Body: []byte("body of " + id), Delay: time.Hour})
						})
						if id != "seed" {
							want[id] = "body of " + id
						}
					}
					wg.Wait()
					for i, err := range errs {
						if i == 7 {
							require.ErrorIs(t, err, redeq.ErrJobExists, "seed, stored before")
							continue
						}
						check("16 at once", fmt.Sprint("many", round, "-", i), err)
					}
				}
				faults, runs := p.Faults()-faults0, p.Matched()-runs0
				t.Logf("%s: %d faults injected, %d add requests reached the proxy", fault, faults, runs)
				require.GreaterOrEqual(t, faults, int64(6), "the faults were not injected")
				testutil.Eventually(t, 10*time.Second, "every held request reached the server", func() bool { return p.Held() == 0 })
				require.NoError(t, admin.Ping(ctx).Err()) // a round trip: the server ran what reached it before
				got := storedJobs(t, c, admin, cfg.Prefix, "t", cfg.Concurrency)
				require.Len(t, got, len(want))
				for id, body := range want {
					require.Equal(t, body, got[id].body, id)
				}
			})
		}
	}
}

// TestAddKeepsBodyReusedAfterCtxEnd: callers whose ctx ends while their
// call waits or is on the wire scribble over their body at once, many
// times, while the round trips that carry them are still being written
// (the server slow: each add reply 5 ms late). No job is stored with a
// scribbled body, and -race finds no race on it.
func TestAddKeepsBodyReusedAfterCtxEnd(t *testing.T) {
	t.Parallel()
	for _, be := range standaloneBackends(t) {
		t.Run(be.Name, func(t *testing.T) {
			p := startAddProxy(t, be.Addrs[0])
			p.FaultDelay.Store(int64(5 * time.Millisecond))
			p.DelayReply.Store(1 << 30)
			cfg := testutil.Config(t)
			cfg.MaxPool = 1 << 20
			c := addClient(t, redisVia(t, p.Addr(), nil), cfg)
			require.NoError(t, c.Add(context.Background(), &redeq.Job{Topic: "t", ID: "warm", Delay: time.Hour}))
			var wg sync.WaitGroup
			var gave, added atomic.Int64
			for g := range 32 {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(g), 5))
					buf := make([]byte, 4096) // one buffer, reused for every job
					for i := range 20 {
						id := fmt.Sprint("j", g, "-", i)
						body := buf[:64+rng.IntN(4000)]
						fill := byte('a' + (g+i)%26)
						for k := range body {
							body[k] = fill
						}
						ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(30000))*time.Microsecond)
						j := &redeq.Job{Topic: "t", ID: id, Body: body, Delay: time.Hour}
						if rng.IntN(3) == 0 {
							j.Headers = map[string]string{"h": id}
						}
						err := c.Add(ctx, j)
						cancel()
						switch {
						case err == nil:
							added.Add(1)
						case isCtxErr(err):
							gave.Add(1)
						default:
							t.Errorf("%s: %v", id, err)
						}
						scribble(body)
					}
				})
			}
			wg.Wait()
			p.DelayReply.Store(0)
			time.Sleep(200 * time.Millisecond)
			t.Logf("%d added, %d gave up", added.Load(), gave.Load())
			got := storedJobs(t, c, be.New(t), cfg.Prefix, "t", cfg.Concurrency)
			for id, j := range got {
				if id == "warm" {
					continue
				}
				var g, i int
				_, err := fmt.Sscanf(id, "j%d-%d", &g, &i)
				require.NoError(t, err)
				fill := string(rune('a' + (g+i)%26))
				require.NotContains(t, j.body, "X", "%s: stored with its caller's scribbles", id)
				require.Equal(t, strings.Repeat(fill, len(j.body)), j.body, id)
			}
			require.GreaterOrEqual(t, int64(len(got)-1), added.Load())
		})
	}
}

// TestLateAddRunAfterAckDoesNotReadd: the add run that reaches the server
// late is the one go-redis gave up on (its request held 600 ms, past
// ReadTimeout), or its reply comes late: go-redis's resend runs first, the
// Add returns, a consumer runs the job and acks it, and only then does the
// held run reach the server. The job is not stored again (it would run
// twice), and each Add is told "added".
func TestLateAddRunAfterAckDoesNotReadd(t *testing.T) {
	testutil.FaultTier(t) // requests and replies held past ReadTimeout by a proxy, seconds per case
	// Not parallel: its ReadTimeout of 150 ms makes go-redis give up under
	// the load of the chaos tests beside it (a CI run saw i/o timeout).
	for _, be := range standaloneBackends(t) {
		for _, fault := range []string{"late reply", "late request"} {
			t.Run(be.Name+"/"+fault, func(t *testing.T) {
				p := startAddProxy(t, be.Addrs[0])
				p.FaultDelay.Store(int64(600 * time.Millisecond))
				rt := 150 * time.Millisecond
				if be.Mini != nil {
					rt = 250 * time.Millisecond
				}
				rdb := redisVia(t, p.Addr(), func(o *redis.Options) {
					o.ReadTimeout, o.MaxRetries, o.MinRetryBackoff = rt, 4, -1
				})
				cfg := testutil.Config(t)
				producer := addClient(t, rdb, cfg)
				consumer := addClient(t, be.New(t), cfg)
				var mu sync.Mutex
				runs := map[string]int{}
				require.NoError(t, consumer.Register(redeq.ListenerFunc("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
					mu.Lock()
					runs[job.ID]++
					mu.Unlock()
					ch.Ack()
					return nil
				})))
				ctx := context.Background()
				require.NoError(t, consumer.Start(ctx))
				require.NoError(t, producer.Add(ctx, &redeq.Job{Topic: "t", ID: "warm", Delay: time.Hour}))
				arm := func(n int64) {
					if fault == "late reply" {
						p.DelayReply.Store(n)
					} else {
						p.DelayRequest.Store(n)
					}
				}
				var ids []string
				for i := range 4 {
					arm(1)
					id := fmt.Sprint("lone", i)
					ids = append(ids, id)
					cctx, cancel := addCtx(i%2*3, nil)
					require.NoError(t, producer.Add(cctx, &redeq.Job{Topic: "t", ID: id, Body: []byte(id)}), "%s: its own first add", id)
					cancel()
				}
				for round := range 2 {
					arm(1)
					var wg sync.WaitGroup
					for i := range 8 {
						id := fmt.Sprint("many", round, "-", i)
						ids = append(ids, id)
						wg.Go(func() {
							cctx, cancel := addCtx(i%2*3, nil)
							defer cancel()
							if err := producer.Add(cctx, &redeq.Job{Topic: "t", ID: id, Body: []byte(id)}); err != nil {
								t.Errorf("%s: its own first add: %v", id, err)
							}
						})
					}
					wg.Wait()
				}
				require.GreaterOrEqual(t, p.Faults(), int64(6), "the faults were not injected")
				testutil.Eventually(t, 20*time.Second, "every job ran", func() bool {
					mu.Lock()
					defer mu.Unlock()
					for _, id := range ids {
						if runs[id] == 0 {
							return false
						}
					}
					return true
				})
				testutil.Eventually(t, 10*time.Second, "every held request reached the server", func() bool { return p.Held() == 0 })
				// A window, not a wait: a job a late run stored again would
				// run within it.
				time.Sleep(10 * cfg.ScanInterval)
				t.Logf("%s: %d faults, %d held requests written to the server late", fault, p.Faults(), p.LateWritten())
				mu.Lock()
				defer mu.Unlock()
				for _, id := range ids {
					require.Equal(t, 1, runs[id], "%s ran %d times: stored again by a late run", id, runs[id])
					_, err := producer.Get(ctx, "t", id)
					require.ErrorIs(t, err, redeq.ErrJobNotFound, "%s: acked, yet stored again by a late run", id)
				}
			})
		}
	}
}

// testAddReturnsAtCtxEndWhileCommandsHeld, on every backend, the cluster
// included: a hook holds every command of the producer's Redis client (a
// hung server or cluster node); Adds with a ctx that ends return its error
// within addSlack, the first of a topic included, and a job whose Add gave
// up is stored with its body as given (the caller scribbled over it), or
// not at all.
func testAddReturnsAtCtxEndWhileCommandsHeld(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			cfg := testutil.Config(t)
			rdb := be.New(t)
			h := &holdHook{}
			h.release = make(chan struct{})
			rdb.AddHook(h)
			c := addClient(t, rdb, cfg)
			reader := addClient(t, be.New(t), cfg)
			h.on.Store(true)
			var wg sync.WaitGroup
			bodies := map[string][]byte{}
			for i := range 16 {
				id := fmt.Sprint("j", i)
				bodies[id] = []byte("body of " + id)
			}
			run := func(topic string) {
				for i := range 16 {
					id := fmt.Sprint("j", i)
					body := []byte("body of " + id)
					wg.Go(func() {
						d := time.Duration(20+i*2) * time.Millisecond
						ctx, cancel := context.WithTimeout(context.Background(), d)
						defer cancel()
						start := time.Now()
						err := c.Add(ctx, &redeq.Job{Topic: topic, ID: id, Body: body, Delay: time.Hour})
						over := time.Since(start) - d
						if !errors.Is(err, context.DeadlineExceeded) {
							t.Errorf("%s/%s: %v", topic, id, err)
						}
						if over > addSlack {
							t.Errorf("%s/%s: returned %v after its ctx ended", topic, id, over)
						}
						scribble(body)
					})
				}
				wg.Wait()
			}
			run("fresh") // the topic is recorded by these Adds
			h.on.Store(false)
			close(h.release)
			require.NoError(t, c.Add(context.Background(), &redeq.Job{Topic: "t", ID: "warm", Delay: time.Hour}))
			h.mu.Lock()
			h.release = make(chan struct{})
			h.mu.Unlock()
			h.on.Store(true)
			run("t")
			h.on.Store(false)
			h.mu.Lock()
			close(h.release)
			h.mu.Unlock()
			time.Sleep(200 * time.Millisecond)
			for _, topic := range []string{"fresh", "t"} {
				for id, want := range bodies {
					j, err := reader.Get(context.Background(), topic, id)
					if errors.Is(err, redeq.ErrJobNotFound) || errors.Is(err, redeq.ErrUnknownTopic) {
						continue
					}
					require.NoError(t, err, id)
					require.Equal(t, string(want), string(j.Body), "%s/%s: stored with its caller's scribbles", topic, id)
				}
			}
		})
	}
}

// holdHook holds every command while on, until release is closed.
type holdHook struct {
	on      atomic.Bool
	mu      sync.Mutex
	release chan struct{}
}

func (h *holdHook) wait() {
	if !h.on.Load() {
		return
	}
	h.mu.Lock()
	r := h.release
	h.mu.Unlock()
	<-r
}

func (h *holdHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *holdHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.wait()
		return next(ctx, cmd)
	}
}

func (h *holdHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.wait()
		return next(ctx, cmds)
	}
}

// TestAddGivesUpAfterItsWindow: as Add's doc says, Add returns
// context.DeadlineExceeded when Redis has not answered 15 s after the job
// was sent, or, with a ctx that never ends, at the latest when a read
// go-redis began before then ends. The server hangs for good; the
// producer's client reads with a timeout of 16 s (a read begun at once
// ends at 16 s) or without one (ReadTimeout -1, as clients built for
// blocking commands are: Add then waits on another goroutine). Adds with
// context.Background and with a ctx that could end but does not each
// return context.DeadlineExceeded within 26 s, also on the client without
// a read timeout.
func TestAddGivesUpAfterItsWindow(t *testing.T) {
	// It runs for seconds: the fault tier.
	testutil.FaultTier(t)
	t.Parallel() // counts no goroutines: beside the other parallel tests
	var real []testutil.Backend
	for _, be := range testutil.RealBackends(t) {
		if be.Name == "redis" {
			real = append(real, be)
		}
	}
	if len(real) == 0 {
		t.Skip("no standalone redis-server")
	}
	be := real[0]
	p := startAddProxy(t, be.Addrs[0])
	cfg := testutil.Config(t)
	type result struct {
		what string
		err  error
		took time.Duration
	}
	results := make(chan result, 8)
	var clients []*redeq.Client
	for _, rt := range []time.Duration{16 * time.Second, -1} {
		c := addClient(t, redisVia(t, p.Addr(), func(o *redis.Options) { o.ReadTimeout = rt }), cfg)
		require.NoError(t, c.Add(context.Background(), &redeq.Job{Topic: "t", ID: fmt.Sprint("warm", rt), Delay: time.Hour}))
		clients = append(clients, c)
	}
	p.Stall.Store(true)
	defer p.Stall.Store(false)
	n := 0
	for k, rt := range []time.Duration{16 * time.Second, -1} {
		for _, ctxKind := range []string{"context.Background", "a ctx that does not end"} {
			n++
			what := fmt.Sprintf("ReadTimeout %v, %s", rt, ctxKind)
			id := fmt.Sprint("hung", n)
			go func() {
				ctx := context.Background()
				if ctxKind != "context.Background" {
					var cancel context.CancelFunc
					ctx, cancel = context.WithCancel(ctx)
					defer cancel()
				}
				start := time.Now()
				err := clients[k].Add(ctx, &redeq.Job{Topic: "t", ID: id, Delay: time.Hour})
				results <- result{what, err, time.Since(start)}
			}()
		}
	}
	deadline := time.After(26 * time.Second)
	var failures []string
	for got := 0; got < n; {
		select {
		case r := <-results:
			got++
			t.Logf("%s: %v after %v", r.what, r.err, r.took.Round(time.Millisecond))
			if !errors.Is(r.err, context.DeadlineExceeded) {
				failures = append(failures, fmt.Sprintf("%s: returned %v after %v, not context.DeadlineExceeded", r.what, r.err, r.took.Round(time.Millisecond)))
			}
		case <-deadline:
			failures = append(failures, fmt.Sprintf("%d of %d Adds had not returned 26 s after they were sent to a server that does not answer", n-got, n))
			got = n
		}
	}
	p.Stall.Store(false)
	require.Empty(t, failures)
}

// testAddReturnsAtDeadlineWhileServerBusy: Add and AddBatch return the
// caller's ctx error at its deadline although the server is busy for 2 s
// (DEBUG SLEEP) and the callers give 300 ms: the calls they make directly
// (the topic record of a client's first Add to a topic and of every
// RecordEvery; AddBatch's pipelines) do not wait for the server's reply
// past the caller's deadline.
func testAddReturnsAtDeadlineWhileServerBusy(t *testing.T) {
	srv := testutil.StartServer(t, "--enable-debug-command", "yes")
	rc := srv.Client(nil) // go-redis defaults
	admin := srv.Client(nil)
	ctx := context.Background()
	cfg := testutil.Config(t)
	c, err := redeq.New(rc, cfg)
	require.NoError(t, err)
	require.NoError(t, c.Add(ctx, &redeq.Job{Topic: "warm", ID: "0", Delay: time.Hour}))
	require.NoError(t, admin.Ping(ctx).Err())

	busy := func() {
		go admin.Do(context.Background(), "DEBUG", "SLEEP", "2")
		time.Sleep(100 * time.Millisecond)
	}
	type call struct {
		name string
		run  func(ctx context.Context) error
	}
	for _, tc := range []call{
		{"Add to a new topic", func(ctx context.Context) error {
			return c.Add(ctx, &redeq.Job{Topic: "fresh", ID: "1", Delay: time.Hour})
		}},
		{"AddBatch", func(ctx context.Context) error {
			return c.AddBatch(ctx, []*redeq.Job{{Topic: "warm", ID: "2", Delay: time.Hour}})
		}},
	} {
		busy()
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		start := time.Now()
		err := tc.run(cctx)
		took := time.Since(start)
		cancel()
		t.Logf("%s: %v after %v", tc.name, err, took.Round(time.Millisecond))
		assert.Less(t, took, 800*time.Millisecond, "%s: the caller's 300 ms deadline was not honoured", tc.name)
		require.NoError(t, admin.Ping(ctx).Err()) // answered once the server wakes
	}
}

package redeq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestQuarantineKeepsEveryTopicMoving: a process whose quarantined jobs
// run one at a time keeps making progress on every topic: no listener
// stalls while a quarantined job waits beside a slow handler, every
// quarantined job of several topics runs and every backlog drains, and
// quarantined jobs left waiting through a Shutdown, a pause and a delete
// still run.
func TestQuarantineKeepsEveryTopicMoving(t *testing.T) {
	t.Parallel() // every case runs beside the other fault tests, as each did alone
	t.Run("wait_beside_slow_handler", testQuarantineWaitLeavesOtherTopicsRunning)
	t.Run("two_topics_at_start", testQuarantinedJobsOfTwoTopicsBothRun)
	t.Run("many_topics_one_worker", testManyQuarantinedTopicsDrainWithOneWorker)
	t.Run("waiters_through_shutdown_pause_delete", testQuarantineWaitersRunAfterShutdownPauseAndDelete)
}

// testQuarantineWaitLeavesOtherTopicsRunning: one process listens to three
// topics: "slow" (one handler that overruns ConsumeTimeout and ignores its
// context, as handlers blocked in a call without a ctx do), "a" (a steady
// stream of healthy 5 ms jobs) and "q". A job of "q" recovered twice
// (quarantined) falls due and waits for the process to go idle, which the
// slow handler never lets it; topic "a", which has nothing to do with
// either, keeps running meanwhile.
func testQuarantineWaitLeavesOtherTopicsRunning(t *testing.T) {
	if !isolated(t) {
		return // it counts goroutines or takes the quarantine slot: a process of its own
	}
	_, be := privateServer(t)
	ctx := context.Background()
	cfg := testutil.Config(t)
	cfg.ConsumeTimeout = 500 * time.Millisecond
	e := setup(t, be, cfg)

	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before the Shutdowns (cleanups run last-in first-out)

	var cnt runCounter
	slow := newListener("slow", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		cnt.of("slow").Add(1)
		select { // ignores ctx: a call without a deadline
		case <-release:
		case <-time.After(40 * time.Second):
		}
		return nil
	})
	slow.workers = 1
	consumer := e.another(t, nil)
	startWith(t, consumer, slow, cnt.listener("a", 5*time.Millisecond), cnt.listener("q", 5*time.Millisecond))

	// A steady stream on "a".
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			_ = e.c.Add(ctx, &redeq.Job{Topic: "a", ID: fmt.Sprint("a", i)})
		}
	})
	defer func() { close(stop); wg.Wait() }()

	require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "slow", ID: "s"}))
	testutil.Eventually(t, 5*time.Second, "slow handler running", func() bool { return cnt.of("slow").Load() == 1 })
	time.Sleep(time.Second)
	before := cnt.of("a").Load()
	require.Greater(t, before, int64(10), "topic a runs while the slow handler runs")

	// A job recovered twice falls due on "q".
	require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "q", ID: "q1", Delay: 300 * time.Millisecond}))
	quarantine(t, e.rdb, e.cfg, "q", "q1", 2)
	time.Sleep(time.Second)
	from := cnt.of("a").Load()
	time.Sleep(8 * time.Second)
	got := cnt.of("a").Load() - from
	st := stats(t, e.c, "a")
	t.Logf("topic a: %d runs in the 8 s after q1 fell due (%d in the second before); a ready=%d; q1 state %s; q runs %d",
		got, before, st.Ready, state(t, e.c, "q", "q1"), cnt.of("q").Load())
	require.Greater(t, got, int64(100),
		"a quarantined job of topic q, waiting for a handler of topic slow that overran ConsumeTimeout, stopped topic a (%d ready) for 8 s", st.Ready)
}

// testQuarantinedJobsOfTwoTopicsBothRun: a process with two topics that
// each have a quarantined job at the head of a backlog when the process
// starts (a restart after two crashes): both dispatchers fetch at once and
// stop at their quarantined job; each quarantined job runs, one at a time,
// and both topics then drain their backlogs, although the first topic
// always has work.
func testQuarantinedJobsOfTwoTopicsBothRun(t *testing.T) {
	if !isolated(t) {
		return // it counts goroutines or takes the quarantine slot: a process of its own
	}
	_, be := privateServer(t)
	ctx := context.Background()
	cfg := testutil.Config(t)
	e := setup(t, be, cfg)
	require.NoError(t, e.c.Start(ctx)) // moves the jobs, consumes nothing

	var cnt runCounter
	for attempt := 0; attempt < 3; attempt++ { // the first start races; a few tries
		x, y := fmt.Sprint("x", attempt), fmt.Sprint("y", attempt)
		for _, topic := range []string{x, y} {
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: "q"}))
			quarantine(t, e.rdb, e.cfg, topic, "q", 2)
			jobs := make([]*redeq.Job, 300)
			for i := range jobs {
				jobs[i] = &redeq.Job{Topic: topic, ID: fmt.Sprint("j", i)}
			}
			require.NoError(t, e.c.AddBatch(ctx, jobs))
		}
		testutil.Eventually(t, 5*time.Second, "all due", func() bool {
			return stats(t, e.c, x).Ready == 301 && stats(t, e.c, y).Ready == 301
		})
		// Streams keep both topics busy.
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for _, topic := range []string{x, y} {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					case <-time.After(5 * time.Millisecond):
					}
					_ = e.c.Add(ctx, &redeq.Job{Topic: topic, ID: fmt.Sprint("s", i)})
				}
			})
		}
		c := e.another(t, nil)
		startWith(t, c, cnt.listener(x, 10*time.Millisecond), cnt.listener(y, 10*time.Millisecond))
		time.Sleep(6 * time.Second)
		nx, ny := cnt.of(x).Load(), cnt.of(y).Load()
		close(stop)
		wg.Wait()
		_ = c.Shutdown(ctx)
		t.Logf("attempt %d: runs in 6 s: %s %d, %s %d", attempt, x, nx, y, ny)
		if nx == 0 || ny == 0 {
			t.Fatalf("one listener of the process ran nothing for 6 s while the other topic stayed busy (%s %d runs, %s %d runs)", x, nx, y, ny)
		}
	}
}

// testManyQuarantinedTopicsDrainWithOneWorker: twelve topics, Workers 1,
// each with a quarantined job at the head of a backlog, and a stream of
// healthy jobs into every topic. Every quarantined job runs (one at a
// time) and every topic drains its backlog.
func testManyQuarantinedTopicsDrainWithOneWorker(t *testing.T) {
	if !isolated(t) {
		return // it takes the quarantine slot: a process of its own
	}
	_, be := privateServer(t)
	ctx := context.Background()
	cfg := testutil.Config(t)
	cfg.Workers = 1
	e := setup(t, be, cfg)
	require.NoError(t, e.c.Start(ctx))
	const topics = 12
	var cnt runCounter
	var ls []redeq.Listener
	for i := range topics {
		topic := fmt.Sprint("t", i)
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: "q"}))
		quarantine(t, e.rdb, e.cfg, topic, "q", 2)
		jobs := make([]*redeq.Job, 50)
		for j := range jobs {
			jobs[j] = &redeq.Job{Topic: topic, ID: fmt.Sprint("j", j)}
		}
		require.NoError(t, e.c.AddBatch(ctx, jobs))
		l := cnt.listener(topic, 5*time.Millisecond)
		l.workers = 1
		ls = append(ls, l)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			_ = e.c.Add(ctx, &redeq.Job{Topic: fmt.Sprint("t", i%topics), ID: fmt.Sprint("s", i)})
		}
	})
	defer func() { close(stop); wg.Wait() }()
	c := e.another(t, nil)
	startWith(t, c, ls...)
	deadline := time.Now().Add(20 * time.Second)
	for {
		var waiting []string
		for i := range topics {
			topic := fmt.Sprint("t", i)
			if s := state(t, e.c, topic, "q"); s != redeq.State("") {
				waiting = append(waiting, fmt.Sprintf("%s:q=%s runs=%d", topic, s, cnt.of(topic).Load()))
			} else if cnt.of(topic).Load() < 51 {
				waiting = append(waiting, fmt.Sprintf("%s runs=%d", topic, cnt.of(topic).Load()))
			}
		}
		if len(waiting) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s, topics not done: %v", waiting)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// testQuarantineWaitersRunAfterShutdownPauseAndDelete: topic "y" runs a
// 2 s quarantined job; meanwhile "x" has a quarantined job waiting (then
// deleted), "p" (paused) has one, and "w" has one; the consuming client is
// shut down while they wait and a new client of the process starts. After
// y's job, everything left runs: w's job, x's healthy jobs, and p's job
// once resumed.
func testQuarantineWaitersRunAfterShutdownPauseAndDelete(t *testing.T) {
	if !isolated(t) {
		return // it takes the quarantine slot: a process of its own
	}
	_, be := privateServer(t)
	ctx := context.Background()
	cfg := testutil.Config(t)
	e := setup(t, be, cfg)
	require.NoError(t, e.c.Start(ctx))
	var cnt runCounter
	mk := func() []redeq.Listener {
		var out []redeq.Listener
		for _, topic := range []string{"x", "p", "w"} {
			out = append(out, cnt.listener(topic, 5*time.Millisecond))
		}
		ly := newListener("y", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			cnt.of("y").Add(1)
			time.Sleep(2 * time.Second)
			ch.Ack()
			return nil
		})
		ly.workers = 2
		return append(out, ly)
	}
	add := func(topic, id string, rec int) {
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: id}))
		if rec > 0 {
			quarantine(t, e.rdb, e.cfg, topic, id, rec)
		}
	}
	add("y", "qy", 2)
	c1 := e.another(t, nil)
	startWith(t, c1, mk()...)
	testutil.Eventually(t, 5*time.Second, "qy running", func() bool { return cnt.of("y").Load() == 1 })
	require.NoError(t, e.c.Pause(ctx, "p"))
	// x and w are paused while their jobs are added and marked: the idle
	// listener of a topic may fetch a job due at once before the test
	// marks it quarantined (a CI run saw qx run and be acked in that gap).
	require.NoError(t, e.c.Pause(ctx, "x"))
	require.NoError(t, e.c.Pause(ctx, "w"))
	add("x", "qx", 2)
	add("x", "x1", 0)
	add("p", "qp", 2)
	add("w", "qw", 2)
	add("w", "w1", 0)
	require.NoError(t, e.c.Resume(ctx, "x"))
	require.NoError(t, e.c.Resume(ctx, "w"))
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, int64(0), cnt.of("w").Load(), "w ran beside y's quarantined job")
	_, err := e.c.Delete(ctx, "x", "qx")
	require.NoError(t, err)
	// Shut down while qw, qx and qp wait (qy's handler finishes in the grace).
	require.NoError(t, c1.Shutdown(ctx))
	c2 := e.another(t, nil)
	startWith(t, c2, mk()...)
	add("x", "x2", 0)
	testutil.Eventually(t, 15*time.Second, "w and x done", func() bool {
		return state(t, e.c, "w", "qw") == redeq.State("") && state(t, e.c, "w", "w1") == redeq.State("") &&
			state(t, e.c, "x", "x1") == redeq.State("") && state(t, e.c, "x", "x2") == redeq.State("")
	})
	require.NoError(t, e.c.Resume(ctx, "p"))
	testutil.Eventually(t, 10*time.Second, "p's quarantined job after resume", func() bool { return state(t, e.c, "p", "qp") == redeq.State("") })
}

// quarantineWatch records, across every client of the test process, how
// many quarantined jobs (Recoveries >= 2) run at once.
type quarantineWatch struct {
	now, most atomic.Int64
	mu        sync.Mutex
	log       []string
}

func (w *quarantineWatch) enter(job *redeq.Job) func() {
	if job.Recoveries < 2 {
		return func() {}
	}
	n := w.now.Add(1)
	for {
		m := w.most.Load()
		if n <= m || w.most.CompareAndSwap(m, n) {
			break
		}
	}
	w.mu.Lock()
	w.log = append(w.log, fmt.Sprintf("%s start %s/%s (%d running)", time.Now().Format("15:04:05.000"), job.Topic, job.ID, n))
	w.mu.Unlock()
	return func() {
		w.now.Add(-1)
		w.mu.Lock()
		w.log = append(w.log, fmt.Sprintf("%s end %s/%s", time.Now().Format("15:04:05.000"), job.Topic, job.ID))
		w.mu.Unlock()
	}
}

// TestGracefulShutdownHoldsProcessQuarantineUntilHandlerEnds: only one
// quarantined job at a time runs in a process, whatever the clients and
// topics in it, also while a client shuts down. A process embeds clients
// X (topic a) and Y (topic b). X runs the quarantined job qa (the poison
// suspect, a 3 s handler); Y's quarantined job qb waits for it. Then the
// process begins a graceful shutdown of X (SIGTERM: modules stop one by
// one), which waits for qa to finish: qb does not start before qa's
// handler returned, as it would be counted a third time and go dead had
// qa been the poison.
func TestGracefulShutdownHoldsProcessQuarantineUntilHandlerEnds(t *testing.T) {
	if !isolated(t) {
		return // it takes the quarantine slot: a process of its own
	}
	_, be := privateServer(t)
	ctx := context.Background()
	cfg := testutil.Config(t)
	e := setup(t, be, cfg)
	require.NoError(t, e.c.Start(ctx)) // moves, consumes nothing

	var w quarantineWatch
	started := make(chan string, 10)
	mk := func(topic string, hold time.Duration) *listener {
		l := newListener(topic, func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			done := w.enter(job)
			defer done()
			started <- job.ID
			time.Sleep(hold) // a handler finishing its work, as a graceful shutdown lets it
			ch.Ack()
			return nil
		})
		l.workers = 4
		return l
	}
	require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "a", ID: "qa"}))
	quarantine(t, e.rdb, e.cfg, "a", "qa", 2)
	x := e.another(t, nil)
	startWith(t, x, mk("a", 3*time.Second))
	select {
	case id := <-started:
		require.Equal(t, "qa", id)
	case <-time.After(5 * time.Second):
		t.Fatal("qa never ran")
	}
	require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "b", ID: "qb"}))
	quarantine(t, e.rdb, e.cfg, "b", "qb", 2)
	y := e.another(t, nil)
	startWith(t, y, mk("b", 100*time.Millisecond))
	time.Sleep(500 * time.Millisecond)
	require.Equal(t, int64(1), w.most.Load(), "qb ran beside qa before any shutdown")

	shut := make(chan error, 1)
	go func() { shut <- x.Shutdown(ctx) }()
	select {
	case id := <-started:
		t.Logf("%s started %v", id, w.now.Load())
	case <-time.After(5 * time.Second):
	}
	require.NoError(t, <-shut)
	testutil.Eventually(t, 5*time.Second, "qb done", func() bool { return state(t, e.c, "b", "qb") != redeq.StateInFlight && w.now.Load() == 0 })
	w.mu.Lock()
	t.Logf("quarantined runs:\n%v", w.log)
	w.mu.Unlock()
	require.Equal(t, int64(1), w.most.Load(),
		"during client X's graceful Shutdown, client Y of the same process ran quarantined qb while X's quarantined qa still ran")
}

// fetchReplyLost is a hook that loses the reply of the first fetch
// script of one ready list, after the script ran:
//   - "lost": the caller gets an error (a read timeout, a reset
//     connection after the server answered);
//   - "rerun": the script runs once unseen, then again (what go-redis does
//     on a read timeout: it resends the command, and the caller sees only
//     the second reply).
type fetchReplyLost struct {
	raw   *redis.Client
	ready string
	mode  string
	fired atomic.Bool
}

func (h *fetchReplyLost) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *fetchReplyLost) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *fetchReplyLost) isFetch(cmd redis.Cmder) bool {
	a := cmd.Args()
	if len(a) < 4 {
		return false
	}
	name := strings.ToLower(fmt.Sprint(a[0]))
	return (name == "evalsha" || name == "eval") && fmt.Sprint(a[3]) == h.ready
}

func (h *fetchReplyLost) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.fired.Load() || !h.isFetch(cmd) {
			return next(ctx, cmd)
		}
		switch h.mode {
		case "lost":
			if err := next(ctx, cmd); err != nil {
				return err
			}
			h.fired.Store(true)
			err := errors.New("read tcp: i/o timeout (simulated lost reply)")
			cmd.SetErr(err)
			return err
		default: // rerun
			if err := h.raw.Do(ctx, cmd.Args()...).Err(); err == nil {
				h.fired.Store(true)
			}
			return next(ctx, cmd)
		}
	}
}

// TestQuarantinedJobWaitsForUnheldDelivery: a job recovered Quarantine
// times or more runs alone: nothing else of its own listener is in flight
// with it, also a delivery the listener does not know it holds. A listener
// (2 buckets) starts with the healthy job h ready in one bucket and the
// quarantined job q in the other. The first fetch of h's bucket takes h,
// but its reply is lost, so h sits in this consumer's in-flight set while
// the runner holds nothing:
//   - "lost": the loss is seen; the bucket waits out its backoff before
//     the reconcile;
//   - "rerun": the loss is hidden; only the periodic sweep (every
//     ConsumerTimeout, 15 s by default) reconciles the bucket.
//
// q does not run before h is accounted for: were q the poison and killed
// the process, the reaper would count a recovery for h too, the very thing
// quarantine is for.
func TestQuarantinedJobWaitsForUnheldDelivery(t *testing.T) {
	if !isolated(t) {
		return // it takes the quarantine slot: a process of its own
	}
	for _, mode := range []string{"lost", "rerun"} {
		t.Run(mode, func(t *testing.T) {
			// Not parallel: both take the process-wide quarantine slot.
			srv, be := privateServer(t)
			ctx := context.Background()
			cfg := testutil.Config(t)
			cfg.Concurrency = 2
			cfg.ConsumerTimeout = 3 * time.Second
			cfg.HeartbeatInterval = 300 * time.Millisecond
			e := setup(t, be, cfg)
			hID, qID := "", ""
			for i := 0; hID == "" || qID == ""; i++ {
				id := fmt.Sprint("j", i)
				switch bucketOf(id, 2) {
				case 0:
					if hID == "" {
						hID = id
					}
				case 1:
					if qID == "" {
						qID = id
					}
				}
			}
			hb, qb := keys.ForBucket(cfg.Prefix, "t", 0), keys.ForBucket(cfg.Prefix, "t", 1)
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: hID}))
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: qID}))
			quarantine(t, e.rdb, e.cfg, "t", qID, 2)
			require.NoError(t, e.c.Start(ctx)) // moves, consumes nothing
			testutil.Eventually(t, 5*time.Second, "both ready", func() bool { return stats(t, e.c, "t").Ready == 2 })

			raw := srv.Client(nil)
			hook := &fetchReplyLost{raw: raw, ready: hb.Ready(), mode: mode}
			x := e.hooked(t, hook)
			var mu sync.Mutex
			var beside []string
			var qStart time.Time
			var overlap time.Duration
			l := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
				if job.ID == qID {
					others := func() []string {
						var out []string
						for _, k := range []string{hb.InFlight(x.ConsumerID()), qb.InFlight(x.ConsumerID())} {
							ms, _ := raw.ZRange(ctx, k, 0, -1).Result()
							for _, m := range ms {
								if !strings.HasSuffix(m, ":"+qID) {
									out = append(out, m)
								}
							}
						}
						return out
					}
					mu.Lock()
					qStart = time.Now()
					beside = others()
					mu.Unlock()
					// Run up to 5 s, measuring how long the other delivery
					// stays in flight beside this one.
					for time.Since(qStart) < 5*time.Second && len(others()) > 0 {
						time.Sleep(5 * time.Millisecond)
					}
					mu.Lock()
					overlap = time.Since(qStart)
					mu.Unlock()
				}
				ch.Ack()
				return nil
			})
			l.workers = 4
			startWith(t, x, l)
			testutil.Eventually(t, 10*time.Second, "q and h ran", func() bool {
				n := l.byID()
				return n[qID] == 1 && n[hID] == 1
			})
			var hStart time.Time
			for _, d := range l.deliveries() {
				if d.job.ID == hID {
					hStart = d.at
				}
			}
			mu.Lock()
			defer mu.Unlock()
			require.True(t, hook.fired.Load(), "the fetch reply was never lost")
			t.Logf("mode %s: when quarantined %s started, this consumer's in-flight sets also held %v, for %v; %s started %v after %s",
				mode, qID, beside, overlap.Round(time.Millisecond), hID, hStart.Sub(qStart).Round(time.Millisecond), qID)
			require.Empty(t, beside, "the quarantined job ran while another delivery of its listener was in flight (in this consumer's in-flight set)")
		})
	}
}

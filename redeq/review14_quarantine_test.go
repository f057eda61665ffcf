package redeq_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestReview14QuarantineWaitFreezesEveryTopic attacks promise 2 ("the
// process keeps making progress: no deadlock or permanent stall of any
// listener ... handlers that time out"). One process listens to three
// topics: "slow" (one handler that overruns ConsumeTimeout and ignores its
// context, as handlers blocked in a call without a ctx do), "a" (a steady
// stream of healthy 5 ms jobs) and "q". A job of "q" recovered twice
// (quarantined) falls due. The quarantined job claims the process
// (consumer/runner.go claimSolo after the fetch stopped at it) and waits
// until no listener of the process holds a delivery (idleAll); meanwhile
// mayFetch stops every other listener. The slow handler never lets the
// process go idle, so topic "a", which has nothing to do with either, stops
// for as long as the slow handler runs.
func TestReview14QuarantineWaitFreezesEveryTopic(t *testing.T) {
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
	waitFor(t, 5*time.Second, "slow handler running", func() bool { return cnt.of("slow").Load() == 1 })
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

// TestReview14QuarantineLoserStarves attacks promise 2 on a process with
// two topics that each have a quarantined job at the head of a backlog
// when the process starts (a restart after two crashes). Both dispatchers
// fetch at once; both stop at their quarantined job; one claims the
// process (claimSolo), the other sets alone without the claim. The winner
// runs its quarantined job, then its backlog, and releases the claim; the
// loser only claims again at a moment it sees the whole process idle
// (dispatch: r.alone && idleAll() && claimSolo), which never comes while
// the winner's topic has work: the loser's topic runs nothing at all.
func TestReview14QuarantineLoserStarves(t *testing.T) {
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
		waitFor(t, 5*time.Second, "all due", func() bool {
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

// TestReview14PoisonKillsBystanderOfAnotherClient attacks promise 2 ("a
// poison job ... healthy jobs in flight beside it, of the same topic or of
// any other topic the process listens to, are counted at most twice and
// never end in the dead set because of it") on a process that embeds two
// redeq clients (two modules of one binary, each with its own settings, as
// promise 1 allows): client X listens to "a", client Y to "b". The job
// "poison" of "a" kills the process; the healthy, slow job "b1" of "b" runs
// beside it. Quarantine looks only at the listeners of one client
// (consumer/runner.go idleAll iterates g.runners of one Group), so Y takes
// the quarantined b1 while X runs the quarantined poison, b1 is counted at
// every crash, and goes to the dead set as poison.
func TestReview14PoisonKillsBystanderOfAnotherClient(t *testing.T) {
	t.Parallel() // its own Redis and processes: it runs beside the other fault tests
	e := poisonBesideB1(t, "twoclients", 3)
	b1, err := e.c.Get(context.Background(), "b", "b1")
	require.NoError(t, err)
	t.Logf("b1: state %s, recoveries %d, reason %q", b1.State, b1.Recoveries, b1.Reason)
	require.NotEqualf(t, redeq.StateDead, b1.State,
		"a healthy job of another client of the same process, run beside the poison job, went dead as poison after %d recoveries: %q", b1.Recoveries, b1.Reason)
	require.LessOrEqual(t, b1.Recoveries, 2, "a bystander is counted at most twice")
}

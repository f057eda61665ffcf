package redeq_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/bucket"
	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestKilledOwnerHandsItsBucketsOver: the client that owns a bucket (and
// holds its lock) is a separate process, killed with SIGKILL. The other
// client takes the bucket over once the owner stops announcing itself,
// and moves its due jobs within seconds, while the dead owner's lock
// still lives.
func TestKilledOwnerHandsItsBucketsOver(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		ids := make(chan string, 1)
		owner := startChildKind(t, "mover", e.be, e.cfg.Prefix, "", func(line string) {
			if id, ok := strings.CutPrefix(line, "id "); ok {
				ids <- id
			}
		})
		var ownerID string
		select {
		case ownerID = <-ids:
		case <-time.After(10 * time.Second):
			t.Fatal("mover process did not start")
		}
		survivor := e.another(t, func(c *config.Config) { c.LockExpiry = 30 * time.Second })
		// A topic whose only bucket the child owns once both announce.
		topic := ""
		for i := 0; topic == ""; i++ {
			if name := fmt.Sprint("t", i); bucket.Owner([]string{ownerID, survivor.ConsumerID()}, keys.Address(name, 0)) == ownerID {
				topic = name
			}
		}
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: "later", Delay: time.Hour})) // records the topic
		l := newListener(topic, nil)
		startWith(t, survivor, l)
		lockKey := keys.ForBucket(e.cfg.Prefix, topic, 0).Lock()
		testutil.Eventually(t, 10*time.Second, "the child owns the bucket and holds its lock", func() bool {
			return e.rdb.Exists(ctx, lockKey).Val() == 1 && e.rdb.PTTL(ctx, lockKey).Val() > 20*time.Second
		})
		owner.kill()
		for i := range 10 {
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: fmt.Sprint(i), Delay: 100 * time.Millisecond}))
		}
		testutil.Eventually(t, 10*time.Second, "due jobs moved by the new owner", func() bool { return len(l.byID()) == 10 })
		require.Greater(t, e.rdb.PTTL(ctx, lockKey).Val(), time.Duration(0), "the dead owner's lock was still there")
	})
}

// TestLostNotificationsStrandNothing: fetchers do not poll, so a due job
// whose wake-up and ready notification never arrive must still run: the
// owner's idle scan finds it and repeats the ready notification while
// the ready list holds it. The owner is another client than the
// listener's, so only pub/sub can tell the listener.
func TestLostNotificationsStrandNothing(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		mover := e.another(t, nil)
		topic := ""
		for i := 0; topic == ""; i++ {
			if name := fmt.Sprint("t", i); bucket.Owner([]string{mover.ConsumerID(), e.c.ConsumerID()}, keys.Address(name, 0)) == mover.ConsumerID() {
				topic = name
			}
		}
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: "first"}))
		require.NoError(t, mover.Start(ctx))
		l := newListener(topic, nil)
		startWith(t, e.c, l)
		testutil.Eventually(t, 5*time.Second, "the first job", func() bool { return len(l.byID()) == 1 })
		testutil.Eventually(t, 5*time.Second, "settled", func() bool { return stats(t, e.c, topic).Pool == 0 })
		lockKey := keys.ForBucket(e.cfg.Prefix, topic, 0).Lock()
		testutil.Eventually(t, 5*time.Second, "the other client owns the bucket", func() bool {
			return e.rdb.Exists(ctx, lockKey).Val() == 1 &&
				e.rdb.ZCard(ctx, keys.Movers(e.cfg.Prefix)).Val() == 2
		})

		// Written without the scripts, so nothing is published: a job in
		// the ready list (a lost ready notification), then one in the
		// bucket (a lost wake-up).
		k := keys.ForBucket(e.cfg.Prefix, topic, 0)
		env := "1|0|0|0|||\n"
		require.NoError(t, e.rdb.HSet(ctx, k.Pool(), "notified", env).Err())
		require.NoError(t, e.rdb.HSet(ctx, k.State(), "notified", "r").Err())
		require.NoError(t, e.rdb.RPush(ctx, k.Ready(), "notified").Err())
		testutil.Eventually(t, 10*time.Second, "the job whose notification was lost ran", func() bool { return len(l.byID()) == 2 })
		require.NoError(t, e.rdb.HSet(ctx, k.Pool(), "woken", env).Err())
		require.NoError(t, e.rdb.ZAdd(ctx, k.Scheduled(), redisZ("woken")).Err())
		testutil.Eventually(t, 10*time.Second, "the job whose wake-up was lost ran", func() bool { return len(l.byID()) == 3 })
	})
}

// TestResubscribeLooksEverywhere: the subscription is killed on the
// server; jobs added while it reconnects still run.
func TestResubscribeLooksEverywhere(t *testing.T) {
	for _, be := range testutil.RealBackends(t) {
		if be.Name == "cluster" {
			continue // CLIENT KILL reaches one node; the single server shows the same
		}
		t.Run(be.Name, func(t *testing.T) {
			e := setup(t, be, testutil.Config(t))
			ctx := context.Background()
			l := newListener("t", nil)
			startWith(t, e.c, l)
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "first"}))
			testutil.Eventually(t, 5*time.Second, "the first job", func() bool { return len(l.byID()) == 1 })
			for i := range 3 {
				require.NoError(t, e.rdb.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err())
				require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint(i)}))
			}
			testutil.Eventually(t, 10*time.Second, "the jobs added meanwhile ran", func() bool { return len(l.byID()) == 4 })
		})
	}
}

// TestIdleTopicRetires: a topic with no jobs and no consumers leaves the
// topic set after RetireAfter; a topic holding a job stays. A producer
// that still knows the retired topic adds to it without recording it
// again (its cache is fresh): its wake-up (or, when the wake-up reached
// a loop not stopped yet, the next look at the retired topics) makes the
// movers record the topic again, and the job is moved.
func TestIdleTopicRetires(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		cfg := e.cfg
		cfg.RetireAfter = config.MinRetireAfter
		mover, err := redeq.New(e.be.New(t), cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = mover.Shutdown(context.Background()) })

		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "idle", ID: "x"}))
		_, err = e.c.Delete(ctx, "idle", "x")
		require.NoError(t, err)
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "busy", ID: "x", Delay: time.Hour}))
		require.NoError(t, mover.Start(ctx))

		topics := keys.Topics(e.cfg.Prefix)
		testutil.Eventually(t, 10*time.Second, "the idle topic retired", func() bool {
			return !e.rdb.SIsMember(ctx, topics, "idle").Val()
		})
		require.True(t, e.rdb.SIsMember(ctx, topics, "busy").Val(), "a topic holding a job retired")

		// e.c recorded "idle" moments ago: this Add does not record it.
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "idle", ID: "late"}))
		testutil.Eventually(t, 10*time.Second, "the late job moved", func() bool { return stats(t, e.c, "idle").Ready == 1 })
		testutil.Eventually(t, 10*time.Second, "the topic recorded again", func() bool { return e.rdb.SIsMember(ctx, topics, "idle").Val() })
	})
}

// TestReapersKilledThirdClientRecovers: two clients of the fleet look for
// silent consumers, and the others make no such calls. When both are
// killed, a consumer that died meanwhile holding a job is still recovered:
// the next client in line starts to look once the fleet has dropped them.
func TestReapersKilledThirdClientRecovers(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var children []*child
		var ids []string
		for range 2 {
			idc := make(chan string, 1)
			children = append(children, startChildKind(t, "mover", e.be, e.cfg.Prefix, "", func(line string) {
				if id, ok := strings.CutPrefix(line, "id "); ok {
					idc <- id
				}
			}))
			select {
			case id := <-idc:
				ids = append(ids, id)
			case <-time.After(10 * time.Second):
				t.Fatal("mover process did not start")
			}
		}
		// The third client, ranked after both children.
		looks := newScriptHook(t, "consumer/silent.lua")
		var calls atomic.Int64
		looks.set(func(ctx context.Context, cmd redis.Cmder, next func() error) error {
			calls.Add(1)
			return next()
		})
		var third *redeq.Client
		for third == nil {
			c := e.hooked(t, looks)
			if !bucket.Ranks(append(slices.Clone(ids), c.ConsumerID()), c.ConsumerID(), bucket.ReaperAddress, 2) {
				third = c
			}
		}
		require.NoError(t, third.Start(ctx))
		time.Sleep(3 * e.cfg.ScanInterval) // the third has seen the children announce
		calls.Store(0)
		time.Sleep(5 * e.cfg.ConsumerTimeout / 5) // five reaper intervals
		require.Zero(t, calls.Load(), "the third client looked for silent consumers while both children were live")

		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
		testutil.Eventually(t, 5*time.Second, "due", func() bool { return state(t, e.c, "t", "j") == redeq.StateReady })
		for _, ch := range children {
			ch.kill()
		}
		crash(t, e, "t", "crashed", 1)
		testutil.Eventually(t, 10*e.cfg.ConsumerTimeout, "recovered by the third client", func() bool {
			return state(t, e.c, "t", "j") == redeq.StateReady
		})
		require.Positive(t, calls.Load())
	})
}

// liveMovers returns the movers announced within window, by the server clock.
func liveMovers(t *testing.T, rdb redis.UniversalClient, prefix string, window time.Duration) []string {
	ctx := context.Background()
	now, err := rdb.Time(ctx).Result()
	require.NoError(t, err)
	ids, err := rdb.ZRangeByScore(ctx, keys.Movers(prefix), &redis.ZRangeBy{
		Min: fmt.Sprint(now.Add(-window).UnixMilli()), Max: "+inf"}).Result()
	require.NoError(t, err)
	return ids
}

// TestKilledAndStoppedClientsLeaveTheLiveSet: killed clients leave the
// live set within ~2.5 ScanIntervals and the movers ZSET does not keep
// them; a SIGSTOPped client is dropped and, after SIGCONT, rejoins.
func TestKilledAndStoppedClientsLeaveTheLiveSet(t *testing.T) {
	t.Parallel()
	for _, be := range testutil.RealBackends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			cfg := testutil.Config(t)
			rdb := be.New(t)
			keep, err := redeq.New(rdb, cfg)
			require.NoError(t, err)
			t.Cleanup(func() { _ = keep.Shutdown(context.Background()) })
			require.NoError(t, keep.Start(ctx))
			start := func() (*child, string) {
				ids := make(chan string, 1)
				c := startChildKind(t, "mover", be, cfg.Prefix, "x", func(line string) {
					if id, ok := strings.CutPrefix(line, "id "); ok {
						ids <- id
					}
				})
				select {
				case id := <-ids:
					return c, id
				case <-time.After(15 * time.Second):
					t.Fatal("child did not start")
				}
				return nil, ""
			}
			live := cfg.ScanInterval * 5 / 2
			// 8 clients that are killed one after another.
			for i := range 8 {
				c, id := start()
				testutil.Eventually(t, 5*time.Second, "child announced", func() bool { return contains(liveMovers(t, rdb, cfg.Prefix, live), id) })
				killed := c.kill()
				ok := false
				for time.Since(killed) < 2*live+cfg.ScanInterval {
					if !contains(liveMovers(t, rdb, cfg.Prefix, live), id) {
						ok = true
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
				require.Truef(t, ok, "killed client %d still live %v after its death", i, time.Since(killed))
			}
			time.Sleep(2 * time.Second) // several prunes
			all := rdb.ZCard(ctx, keys.Movers(cfg.Prefix)).Val()
			require.LessOrEqualf(t, all, int64(2), "movers ZSET holds %d entries with 1 live client after 8 were killed", all)

			// SIGSTOP, then SIGCONT.
			c, id := start()
			testutil.Eventually(t, 5*time.Second, "child announced", func() bool { return contains(liveMovers(t, rdb, cfg.Prefix, live), id) })
			require.NoError(t, c.cmd.Process.Signal(syscall.SIGSTOP))
			testutil.Eventually(t, 2*live+cfg.ScanInterval+500*time.Millisecond, "stopped client dropped", func() bool { return !contains(liveMovers(t, rdb, cfg.Prefix, live), id) })
			time.Sleep(2 * time.Second)
			require.NoError(t, c.cmd.Process.Signal(syscall.SIGCONT))
			cont := time.Now()
			testutil.Eventually(t, 2*time.Second, "continued client rejoined", func() bool { return contains(liveMovers(t, rdb, cfg.Prefix, live), id) })
			t.Logf("rejoined %v after SIGCONT", time.Since(cont))
			// and stays
			time.Sleep(1 * time.Second)
			require.True(t, contains(liveMovers(t, rdb, cfg.Prefix, live), id), "continued client dropped again")
		})
	}
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestJobsRecoveredWhenReapersAndHoldersDieAtOnce: ten consumer processes
// hold 40 jobs; the two that look for silent consumers (ranked first for
// {reaper}) and three others are SIGKILLed at once; a client joins late.
// Every job the five held runs again on the late client, unspent and
// counted once, within about ConsumerTimeout plus a few seconds; no job of
// the five live processes is handed out.
func TestJobsRecoveredWhenReapersAndHoldersDieAtOnce(t *testing.T) {
	t.Parallel() // its own Redis and processes: it runs beside the other fault tests
	_, be := privateServer(t)
	ctx := context.Background()
	cfg := testutil.Config(t)
	e := setup(t, be, cfg)

	const procs, workers = 10, 4
	children := make([]*faultChild, procs)
	ids := make([]string, procs)
	var wg sync.WaitGroup
	for i := range procs {
		children[i] = startFaultChild(t, "slow", be, cfg.Prefix, "t", childHoldForever)
	}
	for i := range procs {
		ids[i] = strings.TrimSpace(children[i].expect(t, "id ", 30*time.Second))
	}
	for i := range procs * workers {
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint("j", i)}))
	}
	holds := make([][]string, procs)
	var mu sync.Mutex
	for i := range procs {
		wg.Go(func() {
			for range workers {
				id := strings.TrimSpace(children[i].expect(t, "start ", 20*time.Second))
				mu.Lock()
				holds[i] = append(holds[i], id)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	time.Sleep(2 * cfg.ConsumerTimeout)

	var kill []int
	for i := range procs {
		if bucket.Ranks(ids, ids[i], bucket.ReaperAddress, 2) {
			kill = append(kill, i)
		}
	}
	require.Len(t, kill, 2)
	for i := 0; len(kill) < 5; i++ {
		if !bucket.Ranks(ids, ids[i], bucket.ReaperAddress, 2) {
			kill = append(kill, i)
		}
	}
	lost := map[string]bool{}
	for _, i := range kill {
		for _, id := range holds[i] {
			lost[id] = true
		}
	}
	for _, i := range kill {
		wg.Go(func() { children[i].kill() })
	}
	wg.Wait()
	killed := time.Now()

	l := newListener("t", nil)
	startWith(t, e.c, l) // joins late
	testutil.Eventually(t, 20*time.Second, "every lost job ran again", func() bool {
		got := l.byID()
		for id := range lost {
			if got[id] == 0 {
				return false
			}
		}
		return true
	})
	took := time.Since(killed)
	t.Logf("%d jobs of %d killed processes (both reapers among them) ran again %v after the kill", len(lost), len(kill), took)
	time.Sleep(time.Second)
	for _, d := range l.deliveries() {
		require.Truef(t, lost[d.job.ID], "job %s of a live process was handed to the late client", d.job.ID)
		require.Zero(t, d.job.Attempt, d.job.ID)
		require.Equal(t, 1, d.job.Recoveries, d.job.ID)
	}
	require.Equal(t, len(lost), l.count(), "each lost job ran once")
	require.LessOrEqual(t, took, cfg.ConsumerTimeout+3*time.Second)
}

// TestNewcomerGetsItsBucketsAtOnce: a client that joins the fleet is told
// to the others at once, so the buckets rendezvous hashing now gives it
// change hands long before the others' next announcement (a minute here):
// their owner releases each lock and the newcomer takes it; the buckets
// that stay with the first client keep its lock.
func TestNewcomerGetsItsBucketsAtOnce(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		slow := func(c *config.Config) {
			c.ScanInterval, c.LockExpiry, c.Concurrency = time.Minute, 3*time.Minute, 8
		}
		first := e.another(t, slow)
		require.NoError(t, first.Add(ctx, &redeq.Job{Topic: "t", ID: "later", Delay: time.Hour})) // records the topic
		require.NoError(t, first.Start(ctx))
		locks := make([]string, 8)
		for b := range locks {
			locks[b] = keys.ForBucket(e.cfg.Prefix, "t", b).Lock()
		}
		values := func() []string {
			out := make([]string, len(locks))
			for b, k := range locks {
				out[b] = e.rdb.Get(ctx, k).Val()
			}
			return out
		}
		testutil.Eventually(t, 20*time.Second, "the first client holds every lock", func() bool {
			return !slices.Contains(values(), "")
		})
		before := values()
		second := e.another(t, slow)
		require.NoError(t, second.Start(ctx))
		live := []string{first.ConsumerID(), second.ConsumerID()}
		var theirs []int
		for b := range locks {
			if bucket.Owner(live, keys.Address("t", b)) == second.ConsumerID() {
				theirs = append(theirs, b)
			}
		}
		require.NotEmpty(t, theirs, "rendezvous hashing gives the newcomer none of 8 buckets: pick other ids")
		testutil.Eventually(t, 20*time.Second, "the newcomer holds its buckets' locks", func() bool {
			now := values()
			for b := range locks {
				if slices.Contains(theirs, b) == (now[b] == before[b]) || now[b] == "" {
					return false
				}
			}
			return true
		})
	})
}

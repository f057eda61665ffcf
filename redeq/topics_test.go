package redeq_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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

// bucketCountSetup makes A, a client of be whose topics have 4 buckets
// (not started yet, shut down at the end of the test), and returns its
// settings, its Redis client and A.
func bucketCountSetup(t *testing.T, be testutil.Backend) (config.Config, redis.UniversalClient, *redeq.Client) {
	t.Helper()
	cfg := testutil.Config(t)
	cfg.Concurrency = 4
	rdb := be.New(t)
	a, err := redeq.New(rdb, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
	return cfg, rdb, a
}

// TestLostBucketCountRestoredUnchanged: a topic whose recorded bucket
// count is lost keeps its jobs moving, and the restoration never changes
// the count: a topic recorded with N buckets stays N, and a client
// configured with another count gets an error instead of rewriting it.
//
// A listens to the topic with 4 buckets. The topic's meta (its bucket
// count) is deleted, the topic stays in the topic set. A keeps running
// (so a listening client is there to restore it) for 20 ScanIntervals.
// Then B, configured with 2 buckets, starts a listener on the topic and
// adds to it: it gets ErrBucketMismatch, and the count stays 4.
func TestLostBucketCountRestoredUnchanged(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	for _, be := range testutil.RealBackends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			cfg, rdb, a := bucketCountSetup(t, be)
			topic := "meta"
			la := newListener(topic, nil)
			startWith(t, a, la)
			for i := range 8 {
				require.NoError(t, a.Add(ctx, &redeq.Job{Topic: topic, ID: fmt.Sprint("a", i)}))
			}
			testutil.Eventually(t, 10*time.Second, "A ran its jobs", func() bool { return len(la.byID()) == 8 })

			meta := keys.ForTopic(cfg.Prefix, topic).Meta()
			require.NoError(t, rdb.Del(ctx, meta).Err()) // the count is lost
			time.Sleep(20 * cfg.ScanInterval)
			got, _ := rdb.HGet(ctx, meta, "buckets").Result()
			t.Logf("bucket count 20 ScanIntervals after it was lost, with A listening: %q", got)

			cfg2 := cfg
			cfg2.Concurrency = 2
			cfg2.Logger = testutil.Logger(t)
			b, err := redeq.New(be.New(t), cfg2)
			require.NoError(t, err)
			t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
			lb := newListener(topic, nil)
			require.NoError(t, b.Register(lb))
			startErr := b.Start(ctx)
			addErr := b.Add(ctx, &redeq.Job{Topic: topic, ID: "b0"})
			after, _ := rdb.HGet(ctx, meta, "buckets").Result()
			t.Logf("B (2 buckets): Start err=%v, Add err=%v; recorded count now %q", startErr, addErr, after)
			require.Equalf(t, "4", after, "the topic recorded with 4 buckets is now recorded with %q", after)
			require.Truef(t, errors.Is(startErr, redeq.ErrBucketMismatch) || errors.Is(addErr, redeq.ErrBucketMismatch),
				"a client configured with 2 buckets for a 4-bucket topic got no ErrBucketMismatch (Start: %v, Add: %v)", startErr, addErr)
		})
	}
}

var _ = bucket.Owner

// TestLostBucketCountStrandsNoJobOnANewClient: a topic that has a listener
// keeps its jobs moving after its recorded bucket count is lost, also in
// the buckets of a client that started after the loss. A listens to the
// topic (4 buckets); producer P added to it before (so its cache says the
// topic is recorded). The count is lost. C, a client with no listener,
// starts: it reads the set, finds no count, yet it owns some of the
// topic's buckets. P adds due jobs to C's buckets: with A listening, they
// run within ~3 s.
func TestLostBucketCountStrandsNoJobOnANewClient(t *testing.T) {
	for _, be := range testutil.RealBackends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			cfg, rdb, a := bucketCountSetup(t, be)
			p, err := redeq.New(be.New(t), cfg)
			require.NoError(t, err)
			topic := "meta"
			la := newListener(topic, nil)
			startWith(t, a, la)
			require.NoError(t, p.Add(ctx, &redeq.Job{Topic: topic, ID: "first"}))
			testutil.Eventually(t, 10*time.Second, "A ran the first job", func() bool { return la.byID()["first"] == 1 })

			require.NoError(t, rdb.Del(ctx, keys.ForTopic(cfg.Prefix, topic).Meta()).Err())
			// C must own a bucket of the topic beside A (ids are random:
			// about one pair in 16 gives A all four), or no job is C's.
			var c *redeq.Client
			for c == nil {
				n, err := redeq.New(be.New(t), cfg)
				require.NoError(t, err)
				for b := range 4 {
					if bucket.Owner([]string{a.ConsumerID(), n.ConsumerID()}, keys.Address(topic, b)) == n.ConsumerID() {
						c = n
						break
					}
				}
			}
			t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
			require.NoError(t, c.Start(ctx))
			testutil.Eventually(t, 10*time.Second, "A and C announced", func() bool {
				return rdb.ZCard(ctx, keys.Movers(cfg.Prefix)).Val() == 2
			})
			time.Sleep(5 * cfg.ScanInterval)
			live := []string{a.ConsumerID(), c.ConsumerID()}
			var ids []string
			for i := 0; len(ids) < 4; i++ {
				require.Less(t, i, 100_000, "no job id falls in C's buckets")
				id := fmt.Sprint("j", i)
				if bucket.Owner(live, keys.Address(topic, bucket.Of(id, 4))) == c.ConsumerID() {
					ids = append(ids, id)
				}
			}
			start := time.Now()
			for _, id := range ids {
				require.NoError(t, p.Add(ctx, &redeq.Job{Topic: topic, ID: id}))
			}
			ok := false
			for time.Since(start) < 6*time.Second {
				n := 0
				for _, id := range ids {
					n += min(la.byID()[id], 1)
				}
				if n == len(ids) {
					ok = true
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			var sched, rdy int64
			for b := range 4 {
				sched += rdb.ZCard(ctx, keys.ForBucket(cfg.Prefix, topic, b).Scheduled()).Val()
				rdy += rdb.LLen(ctx, keys.ForBucket(cfg.Prefix, topic, b).Ready()).Val()
			}
			got, _ := rdb.HGet(ctx, keys.ForTopic(cfg.Prefix, topic).Meta(), "buckets").Result()
			require.Truef(t, ok, "%v after adding %d due jobs to buckets owned by C, with A listening: ran %v; stats scheduled=%d ready=%d; recorded count %q",
				time.Since(start).Round(time.Millisecond), len(ids), la.byID(), sched, rdy, got)
		})
	}
}

// TestTopicSetEntryDeletedRepeatedlyDelaysNoJob: while the topic's entry in
// the topic set is deleted every 150 ms for 8 s, topics retire after 1 s,
// and a producer that recorded the topic before keeps adding due jobs,
// each job runs within 3 s of being added (A listens).
func TestTopicSetEntryDeletedRepeatedlyDelaysNoJob(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	t.Parallel()
	for _, be := range testutil.RealBackends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			cfg := testutil.Config(t)
			cfg.Concurrency = 4
			cfg.RetireAfter = time.Second
			rdb := be.New(t)
			a, err := redeq.New(rdb, cfg)
			require.NoError(t, err)
			t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
			p, err := redeq.New(be.New(t), cfg)
			require.NoError(t, err)
			topic := "churn"
			la := newListener(topic, nil)
			startWith(t, a, la)
			added := map[string]time.Time{}
			stop := time.Now().Add(8 * time.Second)
			next := time.Now()
			for i := 0; time.Now().Before(stop); i++ {
				require.NoError(t, rdb.SRem(ctx, keys.Topics(cfg.Prefix), topic).Err())
				if i%2 == 0 {
					require.NoError(t, rdb.HDel(ctx, keys.ForTopic(cfg.Prefix, topic).Meta(), "buckets").Err())
				}
				if time.Now().After(next) {
					id := fmt.Sprint("j", i)
					require.NoError(t, p.Add(ctx, &redeq.Job{Topic: topic, ID: id}))
					added[id] = time.Now()
					next = time.Now().Add(time.Duration(i%7) * 200 * time.Millisecond)
				}
				time.Sleep(150 * time.Millisecond)
			}
			time.Sleep(3 * time.Second)
			seen := la.byID()
			var bad []string
			for id, at := range added {
				if seen[id] == 0 {
					bad = append(bad, fmt.Sprintf("%s (added %v ago)", id, time.Since(at).Round(time.Millisecond)))
				}
			}
			got, _ := rdb.HGet(ctx, keys.ForTopic(cfg.Prefix, topic).Meta(), "buckets").Result()
			require.Emptyf(t, bad, "%d of %d jobs never ran; recorded count %q", len(bad), len(added), got)
		})
	}
}

// TestLostTopicSetEntryStrandsNoJob: a failover that loses a topic's entry
// in the topic set strands none of its jobs, although nobody adds to the
// topic again.
//
// A producer adds a job due in 2 s; a running client listens to the
// topic. Then the topic's entry in the topic set is lost, as an
// asynchronous-replication failover of the set's master loses the last
// SADD (on a cluster the set and the job's bucket live on different
// masters, so the job survives while the record does not). The job is
// delivered within 15 s (150 ScanIntervals, well past every background
// period of the Fast config), without any Add-driven way back (a wake-up
// naming an unknown topic, a producer re-recording after RecordEvery).
func TestLostTopicSetEntryStrandsNoJob(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	eachReal(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		const topic = "orders"
		l := newListener(topic, nil)
		startWith(t, e.c, l)
		producer := e.another(t, nil) // never started: writes only
		require.NoError(t, producer.Add(ctx, &redeq.Job{Topic: topic, ID: "first"}))
		testutil.Eventually(t, 10*time.Second, "setup: the first job ran", func() bool { return l.byID()["first"] == 1 })

		require.NoError(t, producer.Add(ctx, &redeq.Job{Topic: topic, ID: "late", Delay: 2 * time.Second}))
		// The failover loses the topic's record (its SADD was the set's
		// last write); the job's bucket, on another master, keeps the job.
		require.NoError(t, e.rdb.SRem(ctx, keys.Topics(e.cfg.Prefix), topic).Err())

		deadline := time.Now().Add(15 * time.Second)
		for time.Now().Before(deadline) && l.byID()["late"] == 0 {
			time.Sleep(50 * time.Millisecond)
		}
		st := stats(t, e.c, topic)
		require.Equalf(t, 1, l.byID()["late"],
			"a job whose topic record a failover lost was not delivered 13 s after its due time (scheduled=%d ready=%d, topic in set: %v)",
			st.Scheduled, st.Ready, e.rdb.SIsMember(ctx, keys.Topics(e.cfg.Prefix), topic).Val())

		// The failover loses the topic's bucket count as well.
		require.NoError(t, producer.Add(ctx, &redeq.Job{Topic: topic, ID: "later", Delay: time.Second}))
		require.NoError(t, e.rdb.SRem(ctx, keys.Topics(e.cfg.Prefix), topic).Err())
		require.NoError(t, e.rdb.Del(ctx, keys.ForTopic(e.cfg.Prefix, topic).Meta()).Err())
		testutil.Eventually(t, 15*time.Second, "the job whose topic lost its record and bucket count ran", func() bool { return l.byID()["later"] == 1 })
		require.Equal(t, fmt.Sprint(e.cfg.Concurrency), e.rdb.HGet(ctx, keys.ForTopic(e.cfg.Prefix, topic).Meta(), "buckets").Val())
	})
}

// TestTopicsListsEveryWayATopicIsUsed: Topics lists a topic whatever first
// used it: AddBatch, Put, a listener started, a broadcast job, a
// schedule's tick.
func TestTopicsListsEveryWayATopicIsUsed(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		require.NoError(t, e.c.AddBatch(ctx, []*redeq.Job{{Topic: "by-batch", ID: "1", Delay: time.Hour}}))
		require.NoError(t, e.c.Put(ctx, &redeq.Job{Topic: "by-put", ID: "1", Delay: time.Hour}))
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "by-broadcast", ID: "1", Delay: time.Hour, Broadcast: true}))
		require.NoError(t, e.c.PutSchedule(ctx, redeq.Schedule{Name: "s", Topic: "by-schedule", Spec: "@every 1s"}))
		startWith(t, e.c, newListener("by-listener", nil))
		want := []string{"by-batch", "by-broadcast", "by-listener", "by-put", "by-schedule"}
		testutil.Eventually(t, 10*time.Second, "every topic listed", func() bool {
			ts, err := e.c.Topics(ctx)
			require.NoError(t, err)
			got := map[string]bool{}
			for _, ti := range ts {
				got[ti.Name] = true
			}
			for _, w := range want {
				if !got[w] {
					t.Logf("missing %s in %v", w, got)
					return false
				}
			}
			return true
		})
	})
}

// TestAddsRacingRetirementAreMoved: a producer that keeps adding to a
// topic at the pace it retires at (RetireAfter 1 s, no consumer) never has
// a job stranded: each one reaches the ready list when due, whether its
// Add landed before, during or after the topic's retirement.
func TestAddsRacingRetirementAreMoved(t *testing.T) {
	testutil.FaultTier(t)
	eachReal(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		const topic = "retiring"
		mod := func(c *config.Config) { c.RetireAfter = time.Second }
		m1, m2 := e.another(t, mod), e.another(t, mod)
		require.NoError(t, m1.Start(ctx))
		require.NoError(t, m2.Start(ctx))
		producer := e.another(t, mod) // not started: it only adds
		var retired int
		for i := range 15 {
			id := fmt.Sprint("j", i)
			require.NoError(t, producer.Add(ctx, &redeq.Job{Topic: topic, ID: id, Delay: time.Duration(rand.IntN(300)) * time.Millisecond}))
			testutil.Eventually(t, 2*time.Second+20*e.cfg.ScanInterval, "job "+id+" moved to ready", func() bool {
				j, err := e.c.Get(ctx, topic, id)
				require.NoError(t, err)
				return j.State == redeq.StateReady
			})
			_, err := e.c.Delete(ctx, topic, id)
			require.NoError(t, err)
			// The topic retires 1 s to 1.25 s (RetireAfter, and a check
			// every RetireAfter/8) after this Delete: the next Add lands
			// before, during or after its retirement. A longer pause
			// only repeats "after".
			time.Sleep(time.Duration(700+rand.IntN(1000)) * time.Millisecond)
			ts, err := e.c.Topics(ctx)
			require.NoError(t, err)
			if len(ts) == 0 {
				retired++
			}
		}
		t.Logf("the topic was retired at %d of 15 adds", retired)
		require.Positive(t, retired, "the topic never retired: the race was not run")
	})
}

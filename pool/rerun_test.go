package pool_test

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/rdb"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/pool"
)

// Reruns: go-redis sends a command again after a read timeout or a lost
// connection, up to MaxRetries times. Add and Delete keep their reply
// under an op key, so that a rerun answers what the first run did: a call
// runs under a deadline of rdb.RerunWindow, and its op key outlives the
// window by the client's slack (rdb.Slack: every round trip of a fresh
// connection's handshake, reads and writes, and its dial).

// standaloneAddr is the address of the standalone server among the real
// backends; a test that waits out client timeouts needs one server only.
func standaloneAddr(t *testing.T) string {
	for _, be := range testutil.RealBackends(t) {
		if be.Name == "redis" {
			return be.Addrs[0]
		}
	}
	t.Skip("no standalone server")
	return ""
}

// TestRerunAnswersTheFirstRun: a rerun that go-redis writes late (after
// lost replies, a slow handshake of the connection it dials, a stalled
// write) still finds its op record, so Add and Delete answer what their
// first run did, never "exists" or "not found" for their own work, and
// never store a job twice; a call whose replies are all lost gives up at
// the rerun window. Each case waits out client timeouts for 20 to 47 s:
// the test is in the fault tier.
func TestRerunAnswersTheFirstRun(t *testing.T) {
	testutil.FaultTier(t)
	t.Parallel() // waits out timeouts: run beside the others
	// With ReadTimeout 10 s and every reply lost, the second attempt (10 s)
	// is a rerun after the job was deleted (5 s) and answers from the op key;
	// no third attempt (20 s) starts. Add reports the deadline (the job may or
	// may not be stored: Get tells), never "exists" for its own job, and never
	// stores it twice. (go-redis does not cut a read short at the ctx deadline
	// unless ContextTimeoutEnabled: Add returns when the second attempt's read
	// times out, at 20 s.)
	t.Run("AddGivesUpAtTheWindowAndNeverStoresTwice", func(t *testing.T) {
		t.Parallel() // waits out timeouts: run beside the others
		addr := standaloneAddr(t)
		mark := []byte(redis.NewScript(pool.AddSource).Hash())
		prefix := testutil.Prefix(t)
		plain := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { plain.Close() })
		ctx := context.Background()
		type outcome struct {
			err    error
			lost   int32
			sent   int32 // attempts of the script written
			stored bool
		}
		try := func(id string, deleteMeanwhile bool) outcome {
			var lose atomic.Int32
			lose.Store(3)
			c := redis.NewClient(&redis.Options{
				Addr:        addr,
				ReadTimeout: 10 * time.Second,
				Dialer: testutil.Dialer(func(_ int, conn net.Conn) net.Conn {
					return testutil.LoseReplies(conn, mark, &lose)
				}),
			})
			defer c.Close()
			if deleteMeanwhile {
				// The job is delivered and acked (deleted) between the
				// first attempt (0 s) and the second (10 s).
				time.AfterFunc(5*time.Second, func() {
					_, err := pool.NewStore(plain, prefix).Delete(ctx, "t", id, 0)
					if err != nil {
						t.Errorf("delete %s: %v", id, err)
					}
				})
			}
			_, err := pool.NewStore(c, prefix).Add(ctx, &pool.Job{Topic: "t", ID: id, Body: []byte("b"), Delay: time.Hour}, pool.Placement{Limit: 10})
			stored := plain.HExists(ctx, keys.ForBucket(prefix, "t", 0).Pool(), id).Val()
			return outcome{err: err, lost: 3 - max(lose.Load(), 0), sent: 3 - lose.Load(), stored: stored}
		}
		var wg sync.WaitGroup
		var kept, deleted outcome
		start := time.Now()
		wg.Go(func() { kept = try("kept", false) })
		wg.Go(func() { deleted = try("deleted", true) })
		wg.Wait()
		t.Logf("after %v: job left alone: %+v (%v); job deleted meanwhile: %+v (%v)", time.Since(start).Round(time.Second), kept, kept.err, deleted, deleted.err)
		require.Equal(t, kept.sent, kept.lost, "every reply lost")
		require.Equal(t, deleted.sent, deleted.lost, "every reply lost")
		require.True(t, kept.stored)
		for _, o := range []outcome{kept, deleted} {
			if o.err != nil {
				assert.NotErrorIs(t, o.err, pool.ErrJobExists, "Add stored its job and must not say it exists")
				assert.ErrorIs(t, o.err, context.DeadlineExceeded, "Add gave up at the rerun window")
			}
		}
		assert.False(t, deleted.stored, "the rerun of an Add whose job was deleted meanwhile added it again: it runs twice")
		// A third attempt would have started at 20 s, past the window.
		assert.LessOrEqual(t, kept.sent, int32(2), "attempts sent")
		assert.Equal(t, int32(2), deleted.sent, "attempts sent: a rerun after the delete, none after the window")
	})

	// The window bounds when go-redis starts an attempt, not when it writes
	// the command: an attempt on a fresh connection first runs its handshake,
	// whose reads go-redis bounds by ReadTimeout, not by ctx. ReadTimeout 12 s;
	// the first run's reply is lost, the attempt at 12 s dials a connection
	// whose HELLO reply comes 11 s late, and the EVALSHA is written at 23 s,
	// past window and margin (20 s): the rerun finds its op record, answers
	// added, and does not store again a job deleted at 17 s.
	t.Run("AddRerunWrittenLateByTheHandshake", func(t *testing.T) {
		t.Parallel() // waits out timeouts: run beside the others
		addr := standaloneAddr(t)
		mark := []byte(redis.NewScript(pool.AddSource).Hash())
		prefix := testutil.Prefix(t)
		plain := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { plain.Close() })
		ctx := context.Background()

		type outcome struct {
			err    error
			sent   int32
			lastAt time.Duration
			stored bool
		}
		try := func(id string, deleteMeanwhile bool) outcome {
			var lose atomic.Int32
			lose.Store(1)
			var sent testutil.WriteCount
			c := redis.NewClient(&redis.Options{
				Addr:        addr,
				ReadTimeout: 12 * time.Second,
				Dialer: testutil.Dialer(func(n int, conn net.Conn) net.Conn {
					conn = testutil.CountWrites(conn, mark, &sent)
					if n == 1 {
						return testutil.LoseReplies(conn, mark, &lose)
					}
					return testutil.LateReads(conn, 11*time.Second, 1) // the handshake's first reply
				}),
			})
			defer c.Close()
			if deleteMeanwhile {
				// The job is delivered and acked (deleted) at 17 s.
				time.AfterFunc(17*time.Second, func() {
					if _, err := pool.NewStore(plain, prefix).Delete(ctx, "t", id, 0); err != nil {
						t.Errorf("delete %s: %v", id, err)
					}
				})
			}
			start := time.Now()
			_, err := pool.NewStore(c, prefix).Add(ctx, &pool.Job{Topic: "t", ID: id, Body: []byte("b"), Delay: time.Hour}, pool.Placement{Limit: 10})
			o := outcome{err: err, sent: sent.N()}
			if l := sent.Last(); !l.IsZero() {
				o.lastAt = l.Sub(start)
			}
			o.stored = plain.HExists(ctx, keys.ForBucket(prefix, "t", 0).Pool(), id).Val()
			return o
		}
		var wg sync.WaitGroup
		var kept, deleted outcome
		wg.Go(func() { kept = try("kept", false) })
		wg.Go(func() { deleted = try("deleted", true) })
		wg.Wait()
		t.Logf("job left alone: %+v (%v); job deleted meanwhile: %+v (%v)", kept, kept.err, deleted, deleted.err)
		require.True(t, kept.stored)
		for _, o := range []outcome{kept, deleted} {
			assert.NoError(t, o.err, "Add stored its job and must say so")
			assert.Greater(t, o.lastAt, rdb.RerunWindow+rdb.RerunMargin, "the scenario: a rerun written past window and margin")
		}
		assert.False(t, deleted.stored, "the rerun of an Add whose job was deleted meanwhile added it again: it runs twice")
	})

	// The same for Delete: its rerun, written at 23 s, finds the op record and
	// answers the job it deleted, with the state it was in, not
	// ErrJobNotFound.
	t.Run("DeleteRerunWrittenLateByTheHandshake", func(t *testing.T) {
		t.Parallel() // waits out timeouts: run beside the others
		addr := standaloneAddr(t)
		mark := []byte(redis.NewScript(pool.DeleteSource).Hash())
		prefix := testutil.Prefix(t)
		plain := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { plain.Close() })
		ctx := context.Background()
		_, err := pool.NewStore(plain, prefix).Add(ctx, &pool.Job{Topic: "t", ID: "d", Body: []byte("b"), Delay: time.Hour}, pool.Placement{Limit: 10})
		require.NoError(t, err)

		var lose atomic.Int32
		lose.Store(1)
		var sent testutil.WriteCount
		c := redis.NewClient(&redis.Options{
			Addr:        addr,
			ReadTimeout: 12 * time.Second,
			Dialer: testutil.Dialer(func(n int, conn net.Conn) net.Conn {
				conn = testutil.CountWrites(conn, mark, &sent)
				if n == 1 {
					return testutil.LoseReplies(conn, mark, &lose)
				}
				return testutil.LateReads(conn, 11*time.Second, 1) // the handshake's first reply
			}),
		})
		defer c.Close()
		require.NoError(t, c.Ping(ctx).Err()) // the first connection, handshake done
		start := time.Now()
		job, err := pool.NewStore(c, prefix).Delete(ctx, "t", "d", 0)
		lastAt := sent.Last().Sub(start)
		stored := plain.HExists(ctx, keys.ForBucket(prefix, "t", 0).Pool(), "d").Val()
		t.Logf("after %v: %v; script writes %d, last at %v; stored %v", time.Since(start).Round(time.Second), err, sent.N(), lastAt.Round(time.Millisecond), stored)
		require.False(t, stored, "the first run deleted the job")
		assert.NoError(t, err, "Delete deleted the job and must say so")
		if job != nil {
			assert.Equal(t, pool.StateScheduled, job.State, "and where it was, as the first run found it")
		}
		assert.Greater(t, lastAt, rdb.RerunWindow+rdb.RerunMargin, "the scenario: a rerun written past window and margin")
	})

	// go-redis's handshake is several round trips, each read under its own
	// ReadTimeout: HELLO, CLIENT MAINT_NOTIFICATIONS, CLIENT SETINFO (and
	// SELECT with DB). With ReadTimeout 14 s: the first run's reply is lost
	// (read timeout at 14 s, inside the 15 s window), the rerun dials a
	// connection whose two handshake replies each come 13.5 s late, and its
	// EVALSHA is written at about 41 s. With DB 1 and ReadTimeout 12 s: three
	// replies 11.5 s late, written at about 47 s. The op key, whose slack
	// counts every round trip of the handshake, still lives, and Add answers
	// added.
	t.Run("AddRerunAfterAHandshakeOfSeveralRoundTrips", func(t *testing.T) {
		t.Parallel()
		addr := standaloneAddr(t)
		mark := []byte(redis.NewScript(pool.AddSource).Hash())
		prefix := testutil.Prefix(t)
		ctx := context.Background()

		for _, tc := range []struct {
			name  string
			read  time.Duration
			db    int
			trips int32
		}{
			{"defaults, ReadTimeout 14s", 14 * time.Second, 0, 2}, // HELLO, CLIENT SETINFO
			{"DB 1, ReadTimeout 12s", 12 * time.Second, 1, 3},     // HELLO, SELECT, CLIENT SETINFO
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				plain := redis.NewClient(&redis.Options{Addr: addr, DB: tc.db})
				defer plain.Close()
				var lose atomic.Int32
				lose.Store(1)
				var sent testutil.WriteCount
				c := redis.NewClient(&redis.Options{
					Addr:        addr,
					ReadTimeout: tc.read,
					DB:          tc.db,
					Dialer: testutil.Dialer(func(n int, conn net.Conn) net.Conn {
						conn = testutil.CountWrites(conn, mark, &sent)
						if n == 1 {
							return testutil.LoseReplies(conn, mark, &lose)
						}
						return testutil.LateReads(conn, tc.read-500*time.Millisecond, tc.trips)
					}),
				})
				defer c.Close()
				ttl := pool.OpTTL(c)
				start := time.Now()
				_, err := pool.NewStore(c, prefix).Add(ctx, &pool.Job{Topic: "t", ID: tc.name, Body: []byte("b"), Delay: time.Hour}, pool.Placement{Limit: 10})
				lastAt := sent.Last().Sub(start)
				stored := plain.HExists(ctx, keys.ForBucket(prefix, "t", 0).Pool(), tc.name).Val()
				t.Logf("%s: op TTL %v; Add after %v: %v; script writes %d, last at %v; stored %v",
					tc.name, ttl, time.Since(start).Round(time.Second), err, sent.N(), lastAt.Round(time.Millisecond), stored)
				assert.True(t, stored)
				assert.Equal(t, int32(2), sent.N(), "the scenario: a first run and one rerun")
				// The slack counted one ReadTimeout before: the op key lived
				// window + ReadTimeout + DialTimeout + margin.
				before := rdb.RerunWindow + tc.read + 5*time.Second + rdb.RerunMargin
				assert.Greater(t, lastAt, before, "the scenario: the rerun written after the op key of a one-read slack expired")
				assert.Less(t, lastAt, ttl, "the rerun written while its op key lives")
				assert.NoError(t, err, "Add stored its job and must say so")
			})
		}
	})

	// The slack counts the client's WriteTimeout, which go-redis lets a caller
	// set apart (here 60 s, ReadTimeout left at its default). The first run's
	// reply is lost with its connection (EOF); the rerun, started at once
	// inside the window, dials a connection whose first write (HELLO) stalls
	// 33 s, within WriteTimeout. Its EVALSHA is written at 33 s, past the 30 s
	// an op key without WriteTimeout in its slack lives, and Add answers
	// added.
	t.Run("AddRerunAfterAStalledHandshakeWrite", func(t *testing.T) {
		t.Parallel()
		addr := standaloneAddr(t)
		mark := []byte(redis.NewScript(pool.AddSource).Hash())
		prefix := testutil.Prefix(t)
		plain := redis.NewClient(&redis.Options{Addr: addr})
		t.Cleanup(func() { plain.Close() })
		ctx := context.Background()

		var sent testutil.WriteCount
		c := redis.NewClient(&redis.Options{
			Addr:         addr,
			WriteTimeout: 60 * time.Second,
			Dialer: testutil.Dialer(func(n int, conn net.Conn) net.Conn {
				conn = testutil.CountWrites(conn, mark, &sent)
				if n == 1 {
					return testutil.EOFAfterReply(conn, mark)
				}
				return testutil.LateFirstWrite(conn, 33*time.Second)
			}),
		})
		t.Cleanup(func() { c.Close() })
		ttl := pool.OpTTL(c)
		start := time.Now()
		_, err := pool.NewStore(c, prefix).Add(ctx, &pool.Job{Topic: "t", ID: "j", Body: []byte("b"), Delay: time.Hour}, pool.Placement{Limit: 10})
		lastAt := sent.Last().Sub(start)
		stored := plain.HExists(ctx, keys.ForBucket(prefix, "t", 0).Pool(), "j").Val()
		t.Logf("op TTL %v; Add after %v: %v; script writes %d, last at %v; stored %v",
			ttl, time.Since(start).Round(time.Second), err, sent.N(), lastAt.Round(time.Millisecond), stored)
		assert.True(t, stored)
		assert.Equal(t, int32(2), sent.N(), "the scenario: a first run and one rerun")
		// Without WriteTimeout in the slack the op key lived 30 s.
		assert.Greater(t, lastAt, 30*time.Second, "the scenario: the rerun written after a 30 s op key expired")
		assert.Less(t, lastAt, ttl, "the rerun written while its op key lives")
		assert.NoError(t, err, "Add stored its job and must say so")
	})
}

// TestAddOpRecord: add.lua keeps a run's reply under its op key so that a
// rerun answers the same: for every op TTL it takes (1 ms to a day) on
// every backend, a refused longer TTL or a bad pool limit writes nothing,
// and a rerun answers even from a server that went over maxmemory since.
func TestAddOpRecord(t *testing.T) {
	// A TTL up to a day is kept on every backend; a longer one (on miniredis
	// one past 9223372036854 ms would wrap, the record gone at once) is
	// refused before anything is written.
	t.Run("TTLKeptOnEveryBackend", func(t *testing.T) {
		for _, be := range testutil.Backends(t) {
			t.Run(be.Name, func(t *testing.T) {
				c := be.New(t)
				ctx := context.Background()
				prefix := testutil.Prefix(t)
				k := keys.ForBucket(prefix, "t", 0)
				for i, ttl := range []string{"1000", "86400000", "86400001", "9223372036855", "10000000000000", "9007199254740991"} {
					for _, n := range []int{1, 2} {
						op := fmt.Sprint("ttl", i, "-", n)
						var jobs [][3]any
						for j := range n {
							jobs = append(jobs, [3]any{fmt.Sprint(op, "-", j), "1000", ""})
						}
						if i >= 2 { // past a day
							before := testutil.Dump(t, c, prefix)
							_, err := addDirect(ctx, c, k, op, ttl, jobs...)
							require.ErrorContains(t, err, "op TTL", "ttl %s", ttl)
							require.Equal(t, before, testutil.Dump(t, c, prefix), "ttl %s: refused after writing", ttl)
							continue
						}
						v, err := addDirect(ctx, c, k, op, ttl, jobs...)
						require.NoError(t, err, "ttl %s", ttl)
						again, err := addDirect(ctx, c, k, op, ttl, jobs...)
						require.NoError(t, err)
						assert.Equal(t, v, again, "ttl %s, %d jobs: the rerun of an added run", ttl, n)
					}
				}
			})
		}
	})

	// A pool limit that is no number fails a run of many jobs and a run of one
	// before either writes: a lone run leaves no op record whose rerun would
	// answer "added" for a job never stored.
	t.Run("BadLimitWritesNothing", func(t *testing.T) {
		for _, be := range testutil.Backends(t) {
			t.Run(be.Name, func(t *testing.T) {
				c := be.New(t)
				ctx := context.Background()
				prefix := testutil.Prefix(t)
				k := keys.ForBucket(prefix, "t", 0)
				sc := redis.NewScript(pool.AddSource)
				for i, limit := range []string{"abc", ""} {
					for _, n := range []int{2, 1} {
						op := fmt.Sprint("lim", i, "-", n)
						args := []any{limit, "ch", "w", 30000, 1}
						for j := range n {
							id := fmt.Sprint(op, "-", j)
							args = append(args, id, id, "|0|0||\n", "b", "1000", "")
						}
						run := func() ([]any, error) {
							return sc.Run(ctx, c, []string{k.Pool(), k.Scheduled(), k.Op(op)}, args...).Slice()
						}
						before := testutil.Dump(t, c, prefix)
						_, err := run()
						require.Error(t, err, "limit %q, %d jobs", limit, n)
						assert.Equal(t, before, testutil.Dump(t, c, prefix), "limit %q, %d jobs: refused (%v) after writing", limit, n, err)
						v, err := run() // the rerun
						if err == nil {
							stored := c.HExists(ctx, k.Pool(), fmt.Sprint(op, "-0")).Val()
							assert.True(t, stored, "limit %q, %d jobs: the rerun of a refused call answers %v (added), and no job is stored", limit, n, v)
						}
					}
				}
			})
		}
	})

	// A rerun finds its record with reads only, so it answers even when the
	// server has since gone over maxmemory (the first run's own jobs may be
	// what pushed it over), for a run of many jobs and a run of one alike.
	t.Run("RerunAnswersUnderMaxmemory", func(t *testing.T) {
		srv := testutil.StartServer(t, "--maxmemory-policy", "noeviction")
		c := srv.Client(nil)
		ctx := context.Background()
		k := keys.ForBucket("p", "t", 0)
		for _, n := range []int{2, 1} {
			require.NoError(t, c.ConfigSet(ctx, "maxmemory", "0").Err())
			op := fmt.Sprint("run", n)
			var jobs [][3]any
			for j := range n {
				jobs = append(jobs, [3]any{fmt.Sprint(op, "-", j), "60000", ""})
			}
			v, err := addDirect(ctx, c, k, op, 30000, jobs...)
			require.NoError(t, err)
			require.Greater(t, v[0].(int64), int64(0), "%d jobs: added", n)
			require.NoError(t, c.ConfigSet(ctx, "maxmemory", "1").Err())
			again, err := addDirect(ctx, c, k, op, 30000, jobs...)
			if assert.NoError(t, err, "%d jobs: the rerun", n) {
				assert.Equal(t, v, again, "%d jobs: the rerun", n)
			}
		}
	})
}

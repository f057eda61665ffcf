package pool_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/pool"
)

// The tests in this file hold Add and AddMany to what their callers are
// promised, on every backend: a job added is stored exactly once, with its
// own body and due time; an existing id and a full pool are told apart
// and write nothing; a run of many jobs (joined calls of concurrent Adds,
// or an AddMany) answers each job as if the jobs were added one by one; a
// rerun of a run returns the first run's reply and adds nothing again.

// stored is what a bucket holds of a job: its envelope's body, its ZSET
// member and its score.
type stored struct {
	body   string
	member string
	score  float64
}

// bucketContents reads a bucket's pool and ZSET, and checks that they hold
// the same jobs: no pool entry without its ZSET member, and no member
// without its pool entry.
func bucketContents(t *testing.T, c redis.UniversalClient, prefix, topic string, b int) map[string]stored {
	t.Helper()
	ctx := context.Background()
	k := keys.ForBucket(prefix, topic, b)
	envs, err := c.HGetAll(ctx, k.Pool()).Result()
	require.NoError(t, err)
	zs, err := c.ZRangeWithScores(ctx, k.Scheduled(), 0, -1).Result()
	require.NoError(t, err)
	out := map[string]stored{}
	for id, env := range envs {
		job, err := pool.JobOf(topic, id, []byte(env))
		require.NoError(t, err, "envelope of %q", id)
		out[id] = stored{body: string(job.Body)}
	}
	for _, z := range zs {
		m := z.Member.(string)
		id := strings.TrimPrefix(m, keys.BroadcastMark)
		s, ok := out[id]
		require.True(t, ok, "bucket %d: ZSET member %q has no pool entry", b, m)
		require.Empty(t, s.member, "bucket %d: job %q has two ZSET members", b, id)
		s.member, s.score = m, z.Score
		out[id] = s
	}
	for id, s := range out {
		require.NotEmpty(t, s.member, "bucket %d: job %q is in the pool but not in the ZSET", b, id)
	}
	return out
}

// model adds jobs one by one to a bucket holding have (at most limit jobs)
// and returns each job's expected outcome: nil, ErrJobExists or ErrPoolFull.
func model(have map[string]*pool.Job, limit int, jobs []*pool.Job) []error {
	out := make([]error, len(jobs))
	for i, j := range jobs {
		switch {
		case have[j.ID] != nil:
			out[i] = pool.ErrJobExists
		case len(have) >= limit:
			out[i] = pool.ErrPoolFull
		default:
			have[j.ID] = j
		}
	}
	return out
}

func requireOutcome(t *testing.T, want, got error, msgAndArgs ...any) {
	t.Helper()
	if want == nil {
		require.NoError(t, got, msgAndArgs...)
		return
	}
	require.ErrorIs(t, got, want, msgAndArgs...)
	other := map[error]error{pool.ErrJobExists: pool.ErrPoolFull, pool.ErrPoolFull: pool.ErrJobExists}[want]
	require.NotErrorIs(t, got, other, msgAndArgs...)
}

// requireBucket checks that a bucket holds exactly the jobs of want, each
// with its own body, member and due time (RunAt, whole ms).
func requireBucket(t *testing.T, c redis.UniversalClient, prefix, topic string, b int, want map[string]*pool.Job) {
	t.Helper()
	got := bucketContents(t, c, prefix, topic, b)
	require.Len(t, got, len(want), "bucket %d: jobs stored", b)
	for id, j := range want {
		s, ok := got[id]
		require.True(t, ok, "bucket %d: job %q missing", b, id)
		require.Equal(t, string(j.Body), s.body, "bucket %d: body of %q", b, id)
		require.Equal(t, pool.Member(id, j.Broadcast), s.member, "bucket %d: member of %q", b, id)
		require.Equal(t, float64(pool.UnixMs(j.RunAt)), s.score, "bucket %d: due time of %q", b, id)
	}
}

// flushScripts empties every master's script cache, so the next runs meet
// NOSCRIPT and are run again by source.
func flushScripts(t *testing.T, c redis.UniversalClient) {
	ctx := context.Background()
	switch cc := c.(type) {
	case *redis.ClusterClient:
		require.NoError(t, cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			return n.ScriptFlush(ctx).Err()
		}))
	default:
		require.NoError(t, c.ScriptFlush(ctx).Err())
	}
}

// TestAddManyRunsAsOneByOne: AddMany over a few buckets (on a cluster,
// over its masters), in runs of up to 64 jobs each, with ids repeated at
// random places of a run and across runs, ids already stored, broadcast
// and plain jobs mixed, and pools that fill up in the middle of a run:
// each job's answer and each bucket's contents are those of adding the
// jobs one by one.
func TestAddManyRunsAsOneByOne(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			rounds := 12
			if !be.Real() {
				rounds = 4
			}
			for round := range rounds {
				prefix := testutil.Prefix(t)
				s := pool.NewStore(c, prefix)
				rng := rand.New(rand.NewPCG(uint64(round), 7))
				const buckets = 6
				base := time.Now().Add(time.Hour).Truncate(time.Millisecond)
				limits := make([]int, buckets)
				have := make([]map[string]*pool.Job, buckets)
				seq := 0
				mk := func(b int) *pool.Job {
					seq++
					// Few ids per bucket, so that they repeat.
					id := fmt.Sprintf("b%d-%d", b, rng.IntN(40))
					return &pool.Job{
						Topic: "t", ID: id, Body: []byte(fmt.Sprintf("body %d of %s", seq, id)),
						RunAt:     base.Add(time.Duration(rng.IntN(100000)) * time.Millisecond),
						Broadcast: rng.IntN(4) == 0,
					}
				}
				// Some jobs stored first, one by one.
				for b := range buckets {
					limits[b] = 10 + rng.IntN(30)
					have[b] = map[string]*pool.Job{}
					for range rng.IntN(8) {
						j := mk(b)
						want := model(have[b], limits[b], []*pool.Job{j})[0]
						_, err := s.Add(ctx, j, pool.Placement{Bucket: b, Limit: limits[b]})
						requireOutcome(t, want, err, "round %d: first add of %s", round, j.ID)
					}
				}
				if be.Real() && round%3 == 2 {
					flushScripts(t, c)
				}
				// Then many, most of one bucket (runs of 64 and a rest).
				var jobs []*pool.Job
				var at []pool.Placement
				for range 150 + rng.IntN(200) {
					b := rng.IntN(buckets)
					if rng.IntN(3) > 0 {
						b = 0
					}
					jobs = append(jobs, mk(b))
					at = append(at, pool.Placement{Bucket: b, Limit: limits[b]})
				}
				want := make([]error, len(jobs))
				for i, j := range jobs {
					want[i] = model(have[at[i].Bucket], limits[at[i].Bucket], []*pool.Job{j})[0]
				}
				errs, err := s.AddMany(ctx, jobs, at)
				require.NoError(t, err)
				for i := range jobs {
					requireOutcome(t, want[i], errs[i], "round %d: job %d (%s, bucket %d)", round, i, jobs[i].ID, at[i].Bucket)
				}
				for b := range buckets {
					requireBucket(t, c, prefix, "t", b, have[b])
				}
			}
		})
	}
}

// TestAddRerunOfRun: go-redis sends a run again when its reply is late or
// lost. Here every run of add.lua is sent twice, and between the two the
// jobs the first run added are deleted (as if they ran and were acked):
// each caller gets the first run's answer (its own job added, never
// "exists"), and the rerun adds nothing again. Runs of one job (Add) and
// of many (AddMany, with repeated ids, stored ids and a pool that fills
// up) alike.
func TestAddRerunOfRun(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			prefix := testutil.Prefix(t)
			admin := be.New(t)
			c := be.New(t)
			h := testutil.HookScript(testutil.LoadScript(t, "add.lua"))
			c.AddHook(h)
			s := pool.NewStore(c, prefix)
			plain := pool.NewStore(admin, prefix)
			const limit = 8
			at := pool.Placement{Bucket: 0, Limit: limit}
			base := time.Now().Add(time.Hour).Truncate(time.Millisecond)
			job := func(id string, n int) *pool.Job {
				return &pool.Job{Topic: "t", ID: id, Body: []byte(id + "-" + strconv.Itoa(n)), RunAt: base.Add(time.Duration(n) * time.Second)}
			}
			_, err := plain.Add(ctx, job("old", 0), at)
			require.NoError(t, err)

			var reruns atomic.Int32
			var ackIDs []string // the jobs to delete between run and rerun
			h.Set(func(ctx context.Context, cmds []redis.Cmder, next func() error) error {
				if err := next(); err != nil {
					return err
				}
				for _, id := range ackIDs {
					_, err := plain.Delete(ctx, "t", id, 0)
					if err != nil && !errors.Is(err, pool.ErrJobNotFound) {
						return err
					}
				}
				reruns.Add(1)
				return next()
			})

			// A run of one.
			ackIDs = []string{"one"}
			_, err = s.Add(ctx, job("one", 1), at)
			require.NoError(t, err, "a rerun reported its own job as existing")
			// A run that added nothing wrote nothing: its rerun is a run
			// like any other, and its caller's answer must match the store.
			ackIDs = []string{"old"}
			_, err = s.Add(ctx, job("old", 2), at)
			got, gerr := plain.Get(ctx, "t", "old", 0)
			if err == nil {
				require.NoError(t, gerr, "told added, not stored")
				require.Equal(t, "old-2", string(got.Body))
				_, err = plain.Delete(ctx, "t", "old", 0)
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, pool.ErrJobExists)
				require.ErrorIs(t, gerr, pool.ErrJobNotFound)
			}

			// A run of many: "a" and "b" added, then acked before the rerun.
			_, err = plain.Add(ctx, job("old", 0), at)
			require.NoError(t, err)
			batch := []*pool.Job{job("a", 3), job("old", 4), job("b", 5), job("a", 6), job("c", 7), job("d", 8), job("e", 9), job("f", 10), job("g", 11), job("h", 12), job("b", 13)}
			ackIDs = []string{"a", "b"}
			ats := make([]pool.Placement, len(batch))
			for i := range ats {
				ats[i] = at
			}
			errs, err := s.AddMany(ctx, batch, ats)
			require.NoError(t, err)
			// old was there; a..g fill the pool's 8 places with old.
			want := []error{nil, pool.ErrJobExists, nil, pool.ErrJobExists, nil, nil, nil, nil, nil, pool.ErrPoolFull, pool.ErrJobExists}
			for i := range batch {
				requireOutcome(t, want[i], errs[i], "job %d (%s)", i, batch[i].ID)
			}
			require.GreaterOrEqual(t, reruns.Load(), int32(3))
			h.Set(nil)
			requireBucket(t, admin, prefix, "t", 0, map[string]*pool.Job{
				"old": job("old", 0), "c": batch[4], "d": batch[5], "e": batch[6], "f": batch[7], "g": batch[8],
			})
		})
	}
}

// TestConcurrentAddsOwnReplies: many callers add jobs with overlapping ids
// to a few buckets at once, so that their calls are joined into runs of
// many jobs. Each id is stored once, with the body of the one caller told
// nil; a caller told ErrJobExists has its id stored; one told ErrPoolFull
// finds the pool full; no pool holds more than its limit.
func TestConcurrentAddsOwnReplies(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			h := testutil.HookScript(testutil.LoadScript(t, "add.lua"))
			var joined atomic.Int32 // runs of more than one job seen
			h.Set(func(ctx context.Context, cmds []redis.Cmder, next func() error) error {
				for _, cmd := range cmds {
					if len(cmd.Args()) > 3+3+4+1+6 { // evalsha sha numkeys, 3 keys, 4 shared, the run number, >1 job
						joined.Add(1)
					}
				}
				return next()
			})
			c.AddHook(h)
			deadline := time.Now().Add(30 * time.Second)
			for round := 0; ; round++ {
				prefix := testutil.Prefix(t)
				s := pool.NewStore(c, prefix)
				const callers, perCaller, buckets, ids, limit = 24, 30, 3, 50, 40
				type outcome struct {
					job *pool.Job
					b   int
					err error
				}
				results := make([][]outcome, callers)
				var wg sync.WaitGroup
				for g := range callers {
					wg.Go(func() {
						rng := rand.New(rand.NewPCG(uint64(round), uint64(g)))
						for k := range perCaller {
							b := rng.IntN(buckets)
							j := &pool.Job{Topic: "t", ID: fmt.Sprint("id", rng.IntN(ids)), Body: []byte(fmt.Sprintf("g%d-%d", g, k)),
								Delay: time.Hour, Broadcast: rng.IntN(5) == 0}
							ctx := context.Background()
							var cancel context.CancelFunc = func() {}
							if rng.IntN(3) > 0 { // a ctx that can end queues its call
								ctx, cancel = context.WithTimeout(ctx, time.Minute)
							}
							_, err := s.Add(ctx, j, pool.Placement{Bucket: b, Limit: limit})
							cancel()
							results[g] = append(results[g], outcome{j, b, err})
						}
					})
				}
				wg.Wait()
				for b := range buckets {
					got := bucketContents(t, c, prefix, "t", b)
					require.LessOrEqual(t, len(got), limit, "bucket %d over its limit", b)
					winners := map[string]*pool.Job{}
					for _, rs := range results {
						for _, r := range rs {
							if r.b != b {
								continue
							}
							switch {
							case r.err == nil:
								require.Nil(t, winners[r.job.ID], "bucket %d: two callers told %q was added", b, r.job.ID)
								winners[r.job.ID] = r.job
							case errors.Is(r.err, pool.ErrJobExists):
								require.NotErrorIs(t, r.err, pool.ErrPoolFull)
								_, ok := got[r.job.ID]
								require.True(t, ok, "bucket %d: %q told existing but not stored", b, r.job.ID)
							case errors.Is(r.err, pool.ErrPoolFull):
								require.Len(t, got, limit, "bucket %d: told full but not full", b)
							default:
								t.Fatalf("bucket %d: %q: unexpected error %v", b, r.job.ID, r.err)
							}
						}
					}
					require.Len(t, got, len(winners), "bucket %d: jobs stored and callers told added", b)
					for id, j := range winners {
						require.Equal(t, string(j.Body), got[id].body, "bucket %d: %q stored with another caller's body", b, id)
						require.Equal(t, pool.Member(id, j.Broadcast), got[id].member, "bucket %d: member of %q", b, id)
					}
				}
				if joined.Load() > 0 {
					t.Logf("%d joined runs in %d rounds", joined.Load(), round+1)
					return
				}
				if time.Now().After(deadline) {
					t.Fatal("no run of many jobs happened: concurrent Adds to one bucket were never joined")
				}
			}
		})
	}
}

// serverMicros returns the Redis clock, in µs, of the node holding key.
func serverMicros(t *testing.T, c redis.UniversalClient, key string) int64 {
	ctx := context.Background()
	var n redis.Cmdable = c
	if cc, ok := c.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, key)
		require.NoError(t, err)
		n = node
	}
	tm, err := n.Time(ctx).Result()
	require.NoError(t, err)
	return tm.UnixMicro()
}

// TestAddNeverDueEarly: a job is due no earlier than its delay after the
// Redis clock's now, rounded up to the ms, or at its RunAt rounded up; the
// due time Add returns is the one stored. Alone and in runs of many.
func TestAddNeverDueEarly(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			prefix := testutil.Prefix(t)
			s := pool.NewStore(c, prefix)
			at := pool.Placement{Bucket: 0, Limit: 1000}
			poolKey := keys.ForBucket(prefix, "t", 0).Pool()
			delays := []time.Duration{0, 1, time.Microsecond, 999 * time.Microsecond, time.Millisecond, time.Millisecond + 1,
				1500 * time.Microsecond, time.Second + 1, time.Hour, math.MaxInt64}
			now := time.Now()
			runAts := []time.Time{now.Add(-time.Hour).Add(300 * time.Microsecond), now.Add(500 * time.Microsecond),
				time.UnixMilli(-1), time.UnixMilli(-2), time.Unix(0, 1), time.Unix(0, 0), pool.MaxDue, now.Add(time.Hour + 1),
				// 1ns past a whole ms (and past a whole µs): due the next ms.
				now.Add(time.Hour).Truncate(time.Millisecond).Add(1), now.Add(time.Hour).Truncate(time.Millisecond).Add(999)}
			score := func(id string) float64 {
				v, err := c.ZScore(ctx, keys.ForBucket(prefix, "t", 0).Scheduled(), id).Result()
				require.NoError(t, err, id)
				return v
			}
			for _, many := range []bool{false, true} {
				var jobs []*pool.Job
				for i, d := range delays {
					jobs = append(jobs, &pool.Job{Topic: "t", ID: fmt.Sprintf("d%d-%v", i, many), Delay: d})
				}
				for i, r := range runAts {
					jobs = append(jobs, &pool.Job{Topic: "t", ID: fmt.Sprintf("r%d-%v", i, many), RunAt: r, Delay: time.Hour})
				}
				before := serverMicros(t, c, poolKey)
				dues := make([]time.Time, len(jobs))
				if many {
					ats := make([]pool.Placement, len(jobs))
					for i := range ats {
						ats[i] = at
					}
					errs, err := s.AddMany(ctx, jobs, ats)
					require.NoError(t, err)
					for i, err := range errs {
						require.NoError(t, err, jobs[i].ID)
						got, err := s.Get(ctx, "t", jobs[i].ID, 0)
						require.NoError(t, err)
						dues[i] = got.RunAt
					}
				} else {
					for i, j := range jobs {
						due, err := s.Add(ctx, j, at)
						require.NoError(t, err, j.ID)
						dues[i] = due
					}
				}
				for i, j := range jobs {
					sc := score(j.ID)
					require.Equal(t, float64(dues[i].UnixMilli()), sc, "%s: due time returned and stored", j.ID)
					if j.RunAt.IsZero() {
						require.GreaterOrEqual(t, int64(sc)*1000, before+j.Delay.Microseconds(), "%s: delay %v due early", j.ID, j.Delay)
						if j.Delay%time.Microsecond != 0 {
							require.Greater(t, int64(sc)*1000, before+j.Delay.Microseconds(), "%s: delay %v due early", j.ID, j.Delay)
						}
						continue
					}
					want := float64(pool.UnixMs(j.RunAt))
					require.Equal(t, want, sc, "%s: RunAt %v", j.ID, j.RunAt)
					require.GreaterOrEqual(t, sc, 0.0, "%s: RunAt %v", j.ID, j.RunAt)
					if !j.RunAt.Before(time.Unix(0, 0)) {
						require.False(t, time.UnixMilli(int64(sc)).Before(j.RunAt), "%s: due before its RunAt", j.ID)
					}
				}
			}
		})
	}
}

// TestPutRerunAndReplace: Put stores one job per id, replacing a waiting
// one (its member too, broadcast or not), refuses a full pool and writes
// nothing then; a rerun of a Put returns the first run's answer and does
// not store again a job that ran and was acked in between.
func TestPutRerunAndReplace(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			prefix := testutil.Prefix(t)
			admin := be.New(t)
			c := be.New(t)
			h := testutil.HookScript(testutil.LoadScript(t, "put.lua"))
			c.AddHook(h)
			s := pool.NewStore(c, prefix)
			plain := pool.NewStore(admin, prefix)
			at := pool.Placement{Bucket: 0, Limit: 3}
			base := time.Now().Add(time.Hour).Truncate(time.Millisecond)
			job := func(id string, n int, bc bool) *pool.Job {
				return &pool.Job{Topic: "t", ID: id, Body: []byte(id + "-" + strconv.Itoa(n)), RunAt: base.Add(time.Duration(n) * time.Second), Broadcast: bc}
			}
			want := map[string]*pool.Job{}
			put := func(j *pool.Job) (bool, error) {
				r, err := s.Put(ctx, j, at)
				if err == nil {
					want[j.ID] = j
				}
				return r, err
			}
			r, err := put(job("a", 1, false))
			require.NoError(t, err)
			require.False(t, r)
			r, err = put(job("a", 2, true)) // plain to broadcast
			require.NoError(t, err)
			require.True(t, r)
			r, err = put(job("a", 3, false)) // and back
			require.NoError(t, err)
			require.True(t, r)
			for _, id := range []string{"b", "c"} {
				_, err = put(job(id, 4, false))
				require.NoError(t, err)
			}
			dump := testutil.Dump(t, admin, prefix)
			_, err = put(job("d", 5, false))
			require.ErrorIs(t, err, pool.ErrPoolFull)
			require.Equal(t, dump, testutil.Dump(t, admin, prefix), "a Put refused wrote something")
			r, err = put(job("c", 6, true)) // a full pool still takes a replacement
			require.NoError(t, err)
			require.True(t, r)
			requireBucket(t, admin, prefix, "t", 0, want)

			// Reruns, with the job acked in between.
			h.Set(func(ctx context.Context, cmds []redis.Cmder, next func() error) error {
				if err := next(); err != nil {
					return err
				}
				if _, err := plain.Delete(ctx, "t", "e", 0); err != nil && !errors.Is(err, pool.ErrJobNotFound) {
					return err
				}
				return next()
			})
			_, err = plain.Delete(ctx, "t", "b", 0)
			require.NoError(t, err)
			delete(want, "b")
			r, err = s.Put(ctx, job("e", 7, false), at)
			require.NoError(t, err, "a rerun's answer")
			require.False(t, r, "a rerun reported its own job as replaced")
			h.Set(nil)
			requireBucket(t, admin, prefix, "t", 0, want) // e ran and was acked: not stored again
		})
	}
}

// TestAddCallerCtxEnds: a caller whose ctx ends while its call is on the
// wire in a run of many jobs returns ctx's error at once, the other
// callers of that run get their own answers, and a job whose Add returned
// is not changed afterwards by its caller reusing the job's body buffer
// (Add has returned: the job must be stored as it was given, or not at
// all).
func TestAddCallerCtxEnds(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			admin := be.New(t)
			c := be.New(t)
			h := testutil.HookScript(testutil.LoadScript(t, "add.lua"))
			c.AddHook(h)
			type held struct {
				ids     []string
				release chan struct{}
			}
			entered := make(chan held, 100)
			h.Set(func(ctx context.Context, cmds []redis.Cmder, next func() error) error {
				var ids []string
				for _, cmd := range cmds {
					args := cmd.Args()
					// evalsha sha 3 pool bucket op, 4 shared, the run number, then 6 per job
					for i := 3 + 3 + 4 + 1; i < len(args); i += 6 {
						ids = append(ids, fmt.Sprint(args[i]))
					}
				}
				r := make(chan struct{})
				entered <- held{ids, r}
				<-r
				return next()
			})
			deadline := time.Now().Add(30 * time.Second)
			for attempt := 0; ; attempt++ {
				prefix := testutil.Prefix(t)
				s := pool.NewStore(c, prefix)
				plain := pool.NewStore(admin, prefix)
				at := pool.Placement{Bucket: 0, Limit: 1000}
				_, err := plain.Add(context.Background(), &pool.Job{Topic: "t", ID: "seed", Delay: time.Hour}, at)
				require.NoError(t, err)
				type res struct {
					id  string
					err error
				}
				done := make(chan res, 100)
				add := func(ctx context.Context, j *pool.Job) {
					go func() {
						_, err := s.Add(ctx, j, at)
						done <- res{j.ID, err}
					}()
				}
				// Two runs on the wire, held: later calls queue.
				add(context.Background(), &pool.Job{Topic: "t", ID: "w1", Body: []byte("w1"), Delay: time.Hour})
				add(context.Background(), &pool.Job{Topic: "t", ID: "w2", Body: []byte("w2"), Delay: time.Hour})
				var holds []held
				holds = append(holds, <-entered, <-entered)
				cancels := map[string]context.CancelFunc{}
				bodies := map[string][]byte{}
				for _, id := range []string{"q1", "q2", "q3", "seed"} {
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					cancels[id] = cancel
					bodies[id] = []byte("body of " + id)
					add(ctx, &pool.Job{Topic: "t", ID: id, Body: bodies[id], Delay: time.Hour})
				}
				// One held run ends; the next run carries what queued.
				close(holds[0].release)
				var q1run held
				for q1run.release == nil {
					select {
					case hd := <-entered:
						if !slices.Contains(hd.ids, "q1") {
							close(hd.release) // q1 may queue behind it
							continue
						}
						holds = append(holds, hd)
						q1run = hd
					case <-time.After(20 * time.Second):
						t.Fatal("q1 never sent")
					}
				}
				cancels["q1"]()
				got := map[string]error{}
				for got["q1"] == nil {
					select {
					case r := <-done:
						require.NotContains(t, got, r.id)
						got[r.id] = r.err
						if r.id == "q1" {
							require.ErrorIs(t, r.err, context.Canceled)
						}
					case <-time.After(10 * time.Second):
						t.Fatal("a caller whose ctx ended did not return")
					}
				}
				copy(bodies["q1"], "XXXXXXXXXX") // its caller reuses the buffer
				for _, hd := range holds[1:] {
					close(hd.release)
				}
				for len(got) < 6 {
					select {
					case r := <-done:
						got[r.id] = r.err
					case hd := <-entered:
						close(hd.release)
					case <-time.After(20 * time.Second):
						t.Fatalf("callers did not return: %v", got)
					}
				}
				for _, id := range []string{"w1", "w2", "q2", "q3"} {
					require.NoError(t, got[id], id)
				}
				require.ErrorIs(t, got["seed"], pool.ErrJobExists)
				j, err := plain.Get(context.Background(), "t", "q1", 0)
				if !errors.Is(err, pool.ErrJobNotFound) {
					require.NoError(t, err)
					require.Equal(t, "body of q1", string(j.Body), "q1 (sent in a run of %v): its Add returned ctx's error, then its caller reused the buffer", q1run.ids)
				}
				if len(q1run.ids) > 1 {
					return // q1 was sent in a run of many: the case at stake
				}
				if time.Now().After(deadline) {
					t.Fatalf("q1 was never sent in a run of many (%d attempts)", attempt+1)
				}
			}
		})
	}
}

// TestAddRefusedWritesNothing: an Add refused because its id exists or
// its pool is full, alone or in a run of refused jobs, writes nothing:
// not the job, not its due time, not a reply key.
func TestAddRefusedWritesNothing(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			prefix := testutil.Prefix(t)
			s := pool.NewStore(c, prefix)
			at := pool.Placement{Bucket: 0, Limit: 2}
			for _, id := range []string{"a", "b"} {
				_, err := s.Add(ctx, &pool.Job{Topic: "t", ID: id, Body: []byte(id), Delay: time.Hour}, at)
				require.NoError(t, err)
			}
			before := testutil.Dump(t, c, prefix)
			_, err := s.Add(ctx, &pool.Job{Topic: "t", ID: "a", Body: []byte("other"), Delay: time.Minute}, at)
			require.ErrorIs(t, err, pool.ErrJobExists)
			_, err = s.Add(ctx, &pool.Job{Topic: "t", ID: "c", Delay: time.Minute}, at)
			require.ErrorIs(t, err, pool.ErrPoolFull)
			jobs := []*pool.Job{{Topic: "t", ID: "b", Body: []byte("x"), RunAt: time.Now()}, {Topic: "t", ID: "d"}, {Topic: "t", ID: "a", Broadcast: true}, {Topic: "t", ID: "d"}}
			errs, err := s.AddMany(ctx, jobs, []pool.Placement{at, at, at, at})
			require.NoError(t, err)
			for i, want := range []error{pool.ErrJobExists, pool.ErrPoolFull, pool.ErrJobExists, pool.ErrPoolFull} {
				requireOutcome(t, want, errs[i], i)
			}
			require.Equal(t, before, testutil.Dump(t, c, prefix), "a refused add wrote something")
		})
	}
}

// TestAddPutDeleteRace: Adds, Puts (plain and broadcast) and Deletes of a
// few ids from many goroutines leave every bucket consistent: each job in
// the pool has exactly one ZSET member, of its own kind, and no member is
// left without its job.
func TestAddPutDeleteRace(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			prefix := testutil.Prefix(t)
			s := pool.NewStore(c, prefix)
			at := pool.Placement{Bucket: 0, Limit: 5}
			var wg sync.WaitGroup
			for g := range 12 {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(g), 3))
					for range 60 {
						ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
						j := &pool.Job{Topic: "t", ID: fmt.Sprint("id", rng.IntN(8)), Body: []byte(fmt.Sprint(g)),
							Delay: time.Duration(rng.IntN(1000)) * time.Hour, Broadcast: rng.IntN(2) == 0}
						var err error
						switch rng.IntN(3) {
						case 0:
							_, err = s.Add(ctx, j, at)
						case 1:
							_, err = s.Put(ctx, j, at)
						case 2:
							_, err = s.Delete(ctx, "t", j.ID, 0)
						}
						cancel()
						if err != nil && !errors.Is(err, pool.ErrJobExists) && !errors.Is(err, pool.ErrPoolFull) && !errors.Is(err, pool.ErrJobNotFound) {
							t.Errorf("%s: %v", j.ID, err)
						}
					}
				})
			}
			wg.Wait()
			got := bucketContents(t, c, prefix, "t", 0)
			require.LessOrEqual(t, len(got), 5)
			for id, st := range got {
				j, err := s.Get(context.Background(), "t", id, 0)
				require.NoError(t, err)
				require.Equal(t, pool.Member(id, j.Broadcast), st.member, "%s: member of the other kind", id)
			}
		})
	}
}

// evalshaCalls returns how many EVALSHA the node holding key has run.
func evalshaCalls(t *testing.T, c redis.UniversalClient, key string) int64 {
	ctx := context.Background()
	var n redis.Cmdable = c
	if cc, ok := c.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(ctx, key)
		require.NoError(t, err)
		n = node
	}
	info, err := n.Info(ctx, "commandstats").Result()
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(line, "cmdstat_evalsha:calls="); ok {
			v, err := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
			require.NoError(t, err)
			return v
		}
	}
	return 0
}

// TestAddRerunBySlowServer: a real rerun, sent by go-redis itself. The
// server is kept busy by a long script, so that an add's reply is late:
// go-redis gives up on the connection after its read timeout and sends
// the run again on another, and the server then runs both. Every caller
// must get its own job added, never "exists", and each job is stored once.
func TestAddRerunBySlowServer(t *testing.T) {
	for _, be := range testutil.RealBackends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			admin := be.New(t)
			var c redis.UniversalClient
			switch be.Name {
			case "cluster":
				cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: be.Addrs, ReadTimeout: 100 * time.Millisecond, MaxRetries: 3, MinRetryBackoff: -1})
				t.Cleanup(func() { cc.Close() })
				c = cc
			default:
				rc := redis.NewClient(&redis.Options{Addr: be.Addrs[0], ReadTimeout: 100 * time.Millisecond, MaxRetries: 3, MinRetryBackoff: -1})
				t.Cleanup(func() { rc.Close() })
				c = rc
			}
			var sent atomic.Int64 // add.lua commands as the client sends them, retries not counted
			add := testutil.LoadScript(t, "add.lua")
			h := testutil.HookScript(add)
			h.Set(func(ctx context.Context, cmds []redis.Cmder, next func() error) error {
				for _, cmd := range cmds {
					if add.RunBy(cmd) {
						sent.Add(1)
					}
				}
				return next()
			})
			c.AddHook(h)
			busy := redis.NewScript(`local t = redis.call('TIME')
local start = tonumber(t[1]) * 1000000 + tonumber(t[2])
while true do
  t = redis.call('TIME')
  if tonumber(t[1]) * 1000000 + tonumber(t[2]) - start > tonumber(ARGV[1]) then return 1 end
end`)
			deadline := time.Now().Add(60 * time.Second)
			for attempt := 0; ; attempt++ {
				prefix := testutil.Prefix(t)
				s := pool.NewStore(c, prefix)
				poolKey := keys.ForBucket(prefix, "t", 0).Pool()
				_, err := s.Add(ctx, &pool.Job{Topic: "t", ID: "warm", Delay: time.Hour}, pool.Placement{Limit: 100})
				require.NoError(t, err)
				calls0, sent0 := evalshaCalls(t, admin, poolKey), sent.Load()
				busyDone := make(chan error, 1)
				go func() {
					busyDone <- busy.Run(ctx, admin, []string{poolKey}, 400_000).Err()
				}()
				var jobs []*pool.Job
				var at []pool.Placement
				for i := range 10 {
					jobs = append(jobs, &pool.Job{Topic: "t", ID: fmt.Sprint("j", i), Body: []byte(fmt.Sprint("b", i)), Delay: time.Hour})
					at = append(at, pool.Placement{Limit: 100})
				}
				errs, err := s.AddMany(ctx, jobs, at)
				single := &pool.Job{Topic: "t", ID: "one", Body: []byte("one"), Delay: time.Hour}
				_, serr := s.Add(ctx, single, pool.Placement{Limit: 100})
				require.NoError(t, <-busyDone)
				calls, sends := evalshaCalls(t, admin, poolKey)-calls0, sent.Load()-sent0
				if err != nil || serr != nil {
					t.Logf("attempt %d: late beyond the retries (%v, %v): the jobs may or may not be stored", attempt, err, serr)
				} else {
					for i, e := range errs {
						require.NoError(t, e, "job %d: a rerun reported its own job as existing (%d runs sent, %d run)", i, sends, calls)
					}
				}
				want := map[string]*pool.Job{"warm": {Topic: "t", ID: "warm", Delay: time.Hour}}
				for _, j := range append(jobs, single) {
					if _, gerr := s.Get(ctx, "t", j.ID, 0); gerr == nil {
						want[j.ID] = j
					}
				}
				got := bucketContents(t, admin, prefix, "t", 0)
				require.Len(t, got, len(want))
				if err == nil && serr == nil && calls > sends {
					t.Logf("attempt %d: %d runs sent, %d run by the server", attempt, sends, calls)
					return
				}
				if time.Now().After(deadline) {
					t.Skipf("go-redis never sent a run again (%d attempts)", attempt+1)
				}
			}
		})
	}
}

// TestScriptsFailBeforeWriting: add.lua and put.lua, given a due time
// that is no usable number, fail before they write anything (the script
// rule: Redis does not undo a script's writes when it then errors). Go
// never sends such arguments; the scripts must hold on their own.
func TestScriptsFailBeforeWriting(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			prefix := testutil.Prefix(t)
			read := func(file string) *redis.Script {
				src, err := os.ReadFile(file)
				require.NoError(t, err)
				return redis.NewScript(string(src))
			}
			add, put := read("add.lua"), read("put.lua")
			s := pool.NewStore(c, prefix)
			_, err := s.Add(ctx, &pool.Job{Topic: "t", ID: "old", Body: []byte("old"), Delay: time.Hour}, pool.Placement{Limit: 10})
			require.NoError(t, err)
			k := keys.ForBucket(prefix, "t", 0)
			before := testutil.Dump(t, c, prefix)
			for _, bad := range []string{"nan", "-nan", "abc"} {
				// One job, then two: delay bad, or due time bad.
				one := []any{"new", "new", "|0|0||||\n", "body"}
				for _, due := range [][2]any{{bad, ""}, {0, bad}} {
					args := []any{10, "ch", "msg", 30000, 1}
					args = append(append(args, one...), due[0], due[1])
					err := add.Run(ctx, c, []string{k.Pool(), k.Scheduled(), k.Op("x1")}, args...).Err()
					require.Equal(t, before, testutil.Dump(t, c, prefix), "add.lua, one job, wrote before it failed (%v): %v", due, err)
					require.Error(t, err, "add.lua, one job, %v", due)
					args = append(args, "new2", "new2", "|0|0||||\n", "body", 0, "")
					err = add.Run(ctx, c, []string{k.Pool(), k.Scheduled(), k.Op("x2")}, args...).Err()
					require.Equal(t, before, testutil.Dump(t, c, prefix), "add.lua, two jobs, wrote before it failed (%v): %v", due, err)
					require.Error(t, err, "add.lua, two jobs, %v", due)
				}
				// put.lua replacing "old", with a bad delay or due time.
				for _, due := range [][2]any{{bad, ""}, {0, bad}} {
					err := put.Run(ctx, c, []string{k.Pool(), k.Scheduled(), k.State(), k.UnAck(), k.Dead(), k.Reasons(), k.Op("x3")},
						"old", "old", keys.BroadcastMark, "|0|0||||\n", "new body", due[0], due[1], 10, "ch", "msg", 30000).Err()
					require.Equal(t, before, testutil.Dump(t, c, prefix), "put.lua wrote before it failed (%v): %v", due, err)
					require.Error(t, err, "put.lua, %v", due)
				}
			}
		})
	}
}

package pool_test

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/pool"
)

// The tests in this file run add.lua with arguments no Go caller
// sends, and the joined runs Go does send, against the promises of Add.

// addDirect runs add.lua as no Go caller would: jobs are {id, delay, due}.
func addDirect(ctx context.Context, c redis.UniversalClient, k keys.Bucket, op string, ttl any, jobs ...[3]any) ([]any, error) {
	args := []any{1000, "ch", "w", ttl, 1}
	for _, j := range jobs {
		args = append(args, j[0], j[0], "|0|0||\n", "b", j[1], j[2])
	}
	return redis.NewScript(pool.AddSource).Run(ctx, c, []string{k.Pool(), k.Scheduled(), k.Op(op)}, args...).Slice()
}

// TestAddScriptDueStrings: absolute due times and delays sent to add.lua
// as strings Go never sends (fractions, negatives, exponents, hex, spaces,
// numbers past int64). Each is refused before anything is written, or
// stored as whole ms no earlier than asked (and not before the epoch, so
// that its reply cannot read as -1 "exists" or -2 "full"); the reply, the
// op record and a rerun agree with the score stored; and every backend
// does the same with each string.
func TestAddScriptDueStrings(t *testing.T) {
	abs := []string{"1.5", "-1", "-2", "-1.5", "1e3", "0x10", " 5", "+7", "1e19", "1e300", "-1e300",
		"99999999999999999999", "9007199254740993", "0005", "0", "253402300799999", "253402300800000"}
	delays := []string{"0.5", "1e300", "-5", " 3", "1e3"}
	outcomes := map[string]map[string]string{} // backend -> input -> outcome
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			prefix := testutil.Prefix(t)
			k := keys.ForBucket(prefix, "t", 0)
			got := map[string]string{}
			outcomes[be.Name] = got
			try := func(name, delay, due string, asked float64) {
				before := testutil.Dump(t, c, prefix)
				id := fmt.Sprintf("%q/%q", delay, due)
				v, err := addDirect(ctx, c, k, id, 30000, [3]any{id, delay, due})
				if err != nil {
					require.Equal(t, before, testutil.Dump(t, c, prefix), "%s: refused (%v) after writing", name, err)
					got[name] = "refused"
					return
				}
				require.Len(t, v, 1)
				reply, ok := v[0].(int64)
				require.True(t, ok, "%s: reply %T", name, v[0])
				score, err := c.ZScore(ctx, k.Scheduled(), id).Result()
				require.NoError(t, err, "%s: told added (%d), not in the ZSET", name, reply)
				require.Equal(t, math.Trunc(score), score, "%s: stored due time %v is no whole ms", name, score)
				require.GreaterOrEqual(t, score, asked, "%s: due at %v, before the time asked", name, score)
				require.GreaterOrEqual(t, score, 0.0, "%s: due at %v, before the epoch", name, score)
				require.Equal(t, score, float64(reply), "%s: reply %d, stored %v", name, reply, score)
				rec, err := c.Get(ctx, k.Op(id)).Result()
				require.NoError(t, err, "%s: no op record", name)
				n, err := strconv.ParseFloat(strings.TrimPrefix(rec, "1|"), 64)
				require.NoError(t, err, "%s: op record %q", name, rec)
				require.Equal(t, score, n, "%s: op record %q, stored %v", name, rec, score)
				again, err := addDirect(ctx, c, k, id, 30000, [3]any{id, delay, due})
				require.NoError(t, err)
				require.Equal(t, v, again, "%s: rerun", name)
				got[name] = "stored at " + strconv.FormatFloat(score, 'f', -1, 64)
			}
			for _, s := range abs {
				asked, err := strconv.ParseFloat(s, 64)
				if err != nil {
					asked = math.Inf(-1) // hex, spaces: no bound known here
				}
				try("due "+strconv.Quote(s), "0", s, asked)
			}
			for _, d := range delays {
				ms, err := strconv.ParseFloat(d, 64)
				if err != nil {
					ms = math.Inf(-1)
				}
				now := float64(serverMicros(t, c, k.Pool())) / 1000
				try("delay "+strconv.Quote(d), d, "", now+ms)
				if got["delay "+strconv.Quote(d)] != "refused" {
					got["delay "+strconv.Quote(d)] = "stored" // its score depends on the clock
				}
			}
		})
	}
	for name, got := range outcomes {
		if name != "miniredis" {
			require.Equal(t, outcomes["miniredis"], got, "%s and miniredis differ", name)
		}
	}
}

// TestAddScriptBadTTLWritesNothing: add.lua given an op TTL that SET
// refuses (zero, negative, a fraction, no number) fails before it writes:
// not after its jobs, which would leave them stored without the op record,
// so that a rerun of the run reports its own jobs as existing.
func TestAddScriptBadTTLWritesNothing(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			prefix := testutil.Prefix(t)
			k := keys.ForBucket(prefix, "t", 0)
			for i, ttl := range []any{"0", "-5", "1.5", "abc", "", "99999999999999999999"} {
				for _, n := range []int{1, 2} {
					op := fmt.Sprint("run", i, "-", n)
					var jobs [][3]any
					for j := range n {
						jobs = append(jobs, [3]any{fmt.Sprint(op, "-", j), "1000", ""})
					}
					before := testutil.Dump(t, c, prefix)
					_, err := addDirect(ctx, c, k, op, ttl, jobs...)
					require.Error(t, err, "ttl %q", ttl)
					require.Equal(t, before, testutil.Dump(t, c, prefix), "ttl %q, %d jobs: failed (%v) after writing", ttl, n, err)
					// The rerun go-redis would send, here with a good TTL.
					v, err := addDirect(ctx, c, k, op, 30000, jobs...)
					require.NoError(t, err)
					for j, r := range v {
						require.Greater(t, r.(int64), int64(0), "ttl %q: job %d of the rerun after a failed run: %v", ttl, j, r)
					}
				}
			}
		})
	}
}

// TestAddScriptRunOf256: the largest run add.lua takes, 256 jobs with
// absolute and relative due times, ids repeated and ids stored: each job
// answered as if added one by one, the op record decodes to the reply, a
// rerun returns it and writes nothing, and the mover is woken.
func TestAddScriptRunOf256(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			prefix := testutil.Prefix(t)
			k := keys.ForBucket(prefix, "t", 0)
			base := time.Now().Add(time.Hour).UnixMilli()
			_, err := addDirect(ctx, c, k, "seed", 30000, [3]any{"j7", "0", strconv.FormatInt(base, 10)})
			require.NoError(t, err)
			var jobs [][3]any
			want := make([]int64, 256)
			seen := map[string]bool{"j7": true}
			for i := range 256 {
				id := fmt.Sprint("j", i%200)
				due := base - int64(i)
				job := [3]any{id, "0", strconv.FormatInt(due, 10)}
				if i%3 == 0 {
					job = [3]any{id, strconv.Itoa(3600_000 + i), ""}
					due = 0 // relative: checked against the score
				}
				jobs = append(jobs, job)
				if seen[id] {
					want[i] = -1
				} else {
					seen[id] = true
					want[i] = due
				}
			}
			ps := c.Subscribe(ctx, keys.WakeChannel(prefix))
			defer ps.Close()
			args := []any{1000, keys.WakeChannel(prefix), "w", 30000, 1}
			for _, j := range jobs {
				args = append(args, j[0], j[0], "|0|0||\n", "b", j[1], j[2])
			}
			_, err = ps.Receive(ctx)
			require.NoError(t, err)
			run := func() []any {
				v, err := redis.NewScript(pool.AddSource).Run(ctx, c, []string{k.Pool(), k.Scheduled(), k.Op("big")}, args...).Slice()
				require.NoError(t, err)
				return v
			}
			v := run()
			require.Len(t, v, 256)
			for i, r := range v {
				id := jobs[i][0].(string)
				switch {
				case want[i] == -1:
					require.Equal(t, int64(-1), r, "job %d (%s)", i, id)
				default:
					score, err := c.ZScore(ctx, k.Scheduled(), id).Result()
					require.NoError(t, err, "job %d (%s)", i, id)
					require.Equal(t, float64(r.(int64)), score, "job %d (%s)", i, id)
					if want[i] != 0 {
						require.Equal(t, want[i], r, "job %d (%s)", i, id)
					}
				}
			}
			rec, err := c.Get(ctx, k.Op("big")).Result()
			require.NoError(t, err)
			var dec []any
			require.True(t, strings.HasPrefix(rec, "1|"), "op record %q: the run number first", rec)
			for _, f := range splitComma(strings.TrimPrefix(rec, "1|")) {
				n, err := strconv.ParseInt(f, 10, 64)
				require.NoError(t, err, "op record field %q", f)
				dec = append(dec, n)
			}
			require.Equal(t, v, dec, "op record")
			before := testutil.Dump(t, c, prefix)
			require.Equal(t, v, run(), "rerun")
			require.Equal(t, before, testutil.Dump(t, c, prefix), "the rerun wrote")
			m, err := ps.ReceiveMessage(ctx)
			require.NoError(t, err)
			require.Equal(t, "w", m.Payload)
		})
	}
}

func splitComma(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return out
}

// TestAddJoinedWakes: runs of many jobs, whose earliest added job is
// before the bucket's head, wake the mover even when the run also holds
// jobs tied with the head, a second copy of an id (refused) and a job
// refused for a full pool; a run whose jobs tie the head or come later
// publishes nothing.
func TestAddJoinedWakes(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			prefix := testutil.Prefix(t)
			s := pool.NewStore(c, prefix)
			ps := c.Subscribe(ctx, keys.WakeChannel(prefix))
			defer ps.Close()
			_, err := ps.Receive(ctx)
			require.NoError(t, err)
			base := time.Now().Add(time.Hour).Truncate(time.Millisecond)
			job := func(id string, off time.Duration) *pool.Job {
				return &pool.Job{Topic: "t", ID: id, Body: []byte(id), RunAt: base.Add(off * time.Millisecond)}
			}
			addMany := func(limit int, want []error, jobs ...*pool.Job) {
				at := make([]pool.Placement, len(jobs))
				for i := range at {
					at[i] = pool.Placement{Limit: limit}
				}
				errs, err := s.AddMany(ctx, jobs, at)
				require.NoError(t, err)
				for i := range jobs {
					requireOutcome(t, want[i], errs[i], "job %d (%s)", i, jobs[i].ID)
				}
			}
			ex, full := pool.ErrJobExists, pool.ErrPoolFull
			wakes := func() int {
				pub := redis.Cmdable(c)
				if cc, ok := c.(*redis.ClusterClient); ok {
					pub, err = cc.MasterForKey(ctx, keys.ForBucket(prefix, "t", 0).Pool())
					require.NoError(t, err)
				}
				require.NoError(t, pub.Publish(ctx, keys.WakeChannel(prefix), "end").Err())
				n := 0
				for {
					m, err := ps.ReceiveMessage(ctx)
					require.NoError(t, err)
					if m.Payload == "end" {
						return n
					}
					n++
				}
			}
			addMany(100, []error{nil, nil}, job("h", 1000), job("x", 2000))
			require.Equal(t, 1, wakes(), "an empty bucket")
			// Ties with the head, later jobs, an id repeated: no wake.
			addMany(100, []error{nil, nil, ex, nil}, job("t1", 1000), job("t2", 3000), job("t1", 500), job("t3", 1000))
			require.Equal(t, 0, wakes(), "ties and later jobs")
			// The earliest job added is one ms before the head, last in
			// the run, after ties, a refused copy and an existing id.
			addMany(100, []error{nil, ex, ex, nil}, job("a1", 1000), job("h", 1), job("a1", 2), job("a2", 999))
			require.Equal(t, 1, wakes(), "a job 1ms before the head")
			// A full pool refuses the earliest; the one added ties: no wake
			// needed. Then one that fits, and is earliest, wakes.
			addMany(8, []error{nil, full}, job("f1", 999), job("f2", 1))
			require.Equal(t, 0, wakes(), "the earliest refused")
			addMany(100, []error{ex, nil}, job("f1", 0), job("f3", 998))
			require.Equal(t, 1, wakes(), "earliest after an existing id")
		})
	}
}

// TestAddManyLimitChangeKeepsOrder: AddMany given two jobs of one id for
// one bucket, with another Limit between them (a topic's limit changed
// while its jobs were being placed): the first job is added and the second
// exists, as one by one, even though calls of different limits cannot
// share a run.
func TestAddManyLimitChangeKeepsOrder(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			prefix := testutil.Prefix(t)
			s := pool.NewStore(c, prefix)
			job := func(id, body string) *pool.Job {
				return &pool.Job{Topic: "t", ID: id, Body: []byte(body), Delay: time.Hour}
			}
			jobs := []*pool.Job{job("y", "y"), job("x", "first"), job("x", "second")}
			at := []pool.Placement{{Limit: 10}, {Limit: 5}, {Limit: 10}}
			errs, err := s.AddMany(ctx, jobs, at)
			require.NoError(t, err)
			require.NoError(t, errs[0])
			require.NoError(t, errs[1], "the first x")
			require.ErrorIs(t, errs[2], pool.ErrJobExists, "the second x")
			got, err := s.Get(ctx, "t", "x", 0)
			require.NoError(t, err)
			require.Equal(t, "first", string(got.Body))
		})
	}
}

// TestAddScriptRefusedRunWritesNothing: a run whose last job has a due
// time add.lua refuses, or whose arguments are not 4 + 6 per job, fails
// whole: the good jobs before the bad one are not written either, and no
// op record is left for a rerun to find.
func TestAddScriptRefusedRunWritesNothing(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			prefix := testutil.Prefix(t)
			k := keys.ForBucket(prefix, "t", 0)
			_, err := addDirect(ctx, c, k, "seed", 30000, [3]any{"seed", "1000", ""})
			require.NoError(t, err)
			before := testutil.Dump(t, c, prefix)
			good := [3]any{"good", "0", strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)}
			for i, bad := range [][3]any{{"bad", "0", "1.5"}, {"bad", "0", "-1"}, {"bad", "0", "1e19"}, {"bad", "0", "253402300800000"},
				{"bad", "0.5", ""}, {"bad", "-5", ""}, {"bad", "1e300", ""}, {"bad", "", ""}, {"bad", "0", "nan"}} {
				op := fmt.Sprint("bad", i)
				_, err := addDirect(ctx, c, k, op, 30000, good, good, bad)
				require.Error(t, err, "%v", bad)
				require.Equal(t, before, testutil.Dump(t, c, prefix), "%v: the run failed (%v) after writing", bad, err)
			}
			sc := redis.NewScript(pool.AddSource)
			for _, n := range []int{0, 1, 5, 7, 9, 11, 15} {
				args := []any{1000, "ch", "w", 30000, 1}
				for j := range n {
					args = append(args, fmt.Sprint("a", j))
				}
				err := sc.Run(ctx, c, []string{k.Pool(), k.Scheduled(), k.Op(fmt.Sprint("n", n))}, args...).Err()
				require.ErrorContains(t, err, "arguments, want 5 + 6 per job", "%d job arguments", n)
				require.Equal(t, before, testutil.Dump(t, c, prefix), "%d job arguments: wrote", n)
			}
		})
	}
}

// putDirect runs put.lua as no Go caller would.
func putDirect(ctx context.Context, c redis.UniversalClient, k keys.Bucket, op, id, delay, due, ttl string) ([]any, error) {
	return redis.NewScript(pool.PutSource).Run(ctx, c,
		[]string{k.Pool(), k.Scheduled(), k.State(), k.UnAck(), k.Dead(), k.Reasons(), k.Op(op)},
		id, id, keys.BroadcastMark, "|0|0||\n", "b", delay, due, 1000, "ch", "w", ttl).Slice()
}

// TestPutScriptRefusesWhatItCannotKeep: put.lua, the upsert, takes due
// times, delays and an op TTL as add.lua does: whole ms in plain digits,
// the due time at most MaxDueMs. Anything else (a fraction would be due
// early, a number past int64 due at once, an exponent read differently
// by each backend, a TTL SET refuses after the writes) fails the call
// before it writes: a job it would have replaced stays as it was.
func TestPutScriptRefusesWhatItCannotKeep(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			prefix := testutil.Prefix(t)
			k := keys.ForBucket(prefix, "t", 0)
			v, err := putDirect(ctx, c, k, "first", "j", "", "5000", "30000")
			require.NoError(t, err)
			require.Equal(t, int64(5000), v[1])
			bad := [][3]string{ // delay, due, ttl
				{"", "1.5", "30000"}, {"", "-1", "30000"}, {"", "1e3", "30000"}, {"", "0x10", "30000"},
				{"", " 5", "30000"}, {"", "1e19", "30000"}, {"", "99999999999999999999", "30000"},
				{"", "253402300800000", "30000"}, {"0.5", "", "30000"}, {"-5", "", "30000"}, {"1e300", "", "30000"},
				{"", "6000", "0"}, {"", "6000", "-5"}, {"", "6000", "1.5"}, {"", "6000", "abc"}, {"", "6000", ""},
			}
			for i, b := range bad {
				for _, id := range []string{"j", fmt.Sprint("new", i)} { // replacing, and adding
					before := testutil.Dump(t, c, prefix)
					_, err := putDirect(ctx, c, k, fmt.Sprint("op", i, id), id, b[0], b[1], b[2])
					require.Error(t, err, "delay %q, due %q, ttl %q", b[0], b[1], b[2])
					require.Equal(t, before, testutil.Dump(t, c, prefix), "delay %q, due %q, ttl %q: failed (%v) after writing", b[0], b[1], b[2], err)
				}
			}
			v, err = putDirect(ctx, c, k, "last", "j", "", "253402300799999", "30000")
			require.NoError(t, err)
			require.Equal(t, []any{int64(0), int64(pool.MaxDueMs), int64(1)}, v, "the latest due time replaces the job")
		})
	}
}

// TestAddLoneRunOpRecord: a run of one job (a lone Add) keeps its op
// record only when it added its job. A rerun of an added run returns the
// first reply and writes nothing, even after the job was deleted; a run
// that found its id stored, or the pool full, leaves nothing behind, and
// a rerun of it is a fresh run.
func TestAddLoneRunOpRecord(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			prefix := testutil.Prefix(t)
			k := keys.ForBucket(prefix, "t", 0)
			sc := redis.NewScript(pool.AddSource)
			run := func(op string, limit int, id string) ([]any, error) {
				return sc.Run(ctx, c, []string{k.Pool(), k.Scheduled(), k.Op(op)},
					limit, "ch", "w", 30000, 1, id, id, "|0|0||\n", "b", "60000", "").Slice()
			}
			v, err := run("a", 2, "a")
			require.NoError(t, err)
			due := v[0].(int64)
			require.Equal(t, "1|"+strconv.FormatInt(due, 10), c.Get(ctx, k.Op("a")).Val(), "the op record holds the run number and the reply")
			after := testutil.Dump(t, c, prefix)
			again, err := run("a", 2, "a")
			require.NoError(t, err)
			require.Equal(t, v, again, "rerun of an added run")
			require.Equal(t, after, testutil.Dump(t, c, prefix), "a rerun wrote")

			// Its id stored: -1, and no record.
			v, err = run("dup", 2, "a")
			require.NoError(t, err)
			require.Equal(t, []any{int64(-1)}, v)
			require.Equal(t, after, testutil.Dump(t, c, prefix), "a run that added nothing left something")

			// A rerun of it once the job is gone is a fresh run.
			require.NoError(t, c.HDel(ctx, k.Pool(), "a").Err())
			require.NoError(t, c.ZRem(ctx, k.Scheduled(), "a").Err())
			v, err = run("dup", 2, "a")
			require.NoError(t, err)
			require.Greater(t, v[0].(int64), int64(0), "fresh run after the job was deleted")
			// The first run's record still answers its rerun, and adds nothing again.
			again, err = run("a", 2, "a")
			require.NoError(t, err)
			require.Equal(t, []any{due}, again)
			require.Equal(t, int64(1), c.HLen(ctx, k.Pool()).Val())

			// The pool full: -2 (and -1 for a stored id), and no record.
			_, err = run("b", 2, "b")
			require.NoError(t, err)
			before := testutil.Dump(t, c, prefix)
			for op, want := range map[string]int64{"full": -2, "full-dup": -1} {
				id := "c"
				if op == "full-dup" {
					id = "b"
				}
				v, err = run(op, 2, id)
				require.NoError(t, err)
				require.Equal(t, []any{want}, v, op)
				require.Equal(t, before, testutil.Dump(t, c, prefix), "%s: a refused run left something", op)
			}
		})
	}
}

// TestAddScriptStaleCopyWritesNothing: a lane's op record holds its latest
// run's number. A copy of an older run on the lane (sent long ago, its
// caller answered or failed since, delivered late) fails and writes
// nothing, even when its jobs are gone; a rerun of the latest run returns
// its reply; a newer run runs. Numbers compare as whole numbers, not as
// text ("10" is after "9").
func TestAddScriptStaleCopyWritesNothing(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			prefix := testutil.Prefix(t)
			k := keys.ForBucket(prefix, "t", 0)
			sc := redis.NewScript(pool.AddSource)
			run := func(seq string, ids ...string) ([]any, error) {
				args := []any{1000, "ch", "w", 30000, seq}
				for _, id := range ids {
					args = append(args, id, id, "|0|0||\n", "b", "60000", "")
				}
				return sc.Run(ctx, c, []string{k.Pool(), k.Scheduled(), k.Op("lane")}, args...).Slice()
			}
			for _, ids := range [][]string{{"a"}, {"a", "b"}} {
				require.NoError(t, c.Del(ctx, k.Op("lane")).Err())
				v9, err := run("9", ids...)
				require.NoError(t, err)
				v10, err := run("10", "x-"+ids[len(ids)-1])
				require.NoError(t, err)
				// The jobs of run 9 ran and were acked.
				for _, id := range ids {
					require.NoError(t, c.HDel(ctx, k.Pool(), id).Err())
					require.NoError(t, c.ZRem(ctx, k.Scheduled(), id).Err())
				}
				before := testutil.Dump(t, c, prefix)
				_, err = run("9", ids...)
				require.ErrorContains(t, err, "stale copy", "%v: a copy of run 9 after run 10", ids)
				_, err = run("09", ids...)
				require.ErrorContains(t, err, "stale copy", "%v: run 09 is run 9", ids)
				require.Equal(t, before, testutil.Dump(t, c, prefix), "%v: a stale copy wrote", ids)
				again, err := run("10", "x-"+ids[len(ids)-1])
				require.NoError(t, err)
				require.Equal(t, v10, again, "%v: the rerun of the latest run", ids)
				require.Equal(t, before, testutil.Dump(t, c, prefix), "%v: the rerun wrote", ids)
				v11, err := run("11", ids...)
				require.NoError(t, err)
				require.Len(t, v11, len(v9))
				for i, r := range v11 {
					require.Greater(t, r.(int64), int64(0), "%v: job %d of a newer run", ids, i)
				}
				require.NoError(t, c.Del(ctx, k.Pool(), k.Scheduled()).Err())
			}
			before := testutil.Dump(t, c, prefix)
			for _, bad := range []string{"x1", "", "-1", "1.5", "123456789012345678901"} {
				_, err := run(bad, "a")
				require.ErrorContains(t, err, "is no whole number", "run number %q", bad)
				require.Equal(t, before, testutil.Dump(t, c, prefix), "run number %q: refused after writing", bad)
			}
		})
	}
}

// TestAddLoneRerunAfterADelayKeepsTheFirstReply: a run of one job due
// after a delay finds, when go-redis runs it again later, a due time of
// its own other than the first run's; every rerun still returns the first
// run's due time and leaves the job, its score and the lane's record as
// the first run wrote them, however often it comes.
func TestAddLoneRerunAfterADelayKeepsTheFirstReply(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			prefix := testutil.Prefix(t)
			k := keys.ForBucket(prefix, "t", 0)
			first, err := addDirect(ctx, c, k, "lane", 30000, [3]any{"a", "60000", ""})
			require.NoError(t, err)
			after := testutil.Dump(t, c, prefix)
			for i := range 3 {
				time.Sleep(5 * time.Millisecond) // the server's clock moves on
				again, err := addDirect(ctx, c, k, "lane", 30000, [3]any{"a", "60000", ""})
				require.NoError(t, err)
				require.Equal(t, first, again, "rerun %d: not the first run's reply", i+1)
				require.Equal(t, after, testutil.Dump(t, c, prefix), "rerun %d changed what the first run wrote", i+1)
			}
		})
	}
}

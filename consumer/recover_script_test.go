package consumer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
)

// recover.lua, for a silent consumer, counts a recovery on each job it held
// and sends it to the ready list, or to the dead set with its reason once it
// was recovered too often (a poison job); on rollback it puts each job back
// in its bucket due now with nothing counted. A member whose state names
// another delivery (a stale token: the same consumer fetched the job again)
// is only removed, and deliveries fetched after the silent look are left;
// a consumer that fetched within the quiet time is left alone, and so is
// one whose lease on the bucket exists (an expired or absent lease is no
// lease; a rollback ignores it). A rerun finds the members gone and
// writes nothing more.
func TestRecoverScript(t *testing.T) {
	type ks func(k keys.Bucket, stamp string) []testutil.Entry
	cases := []struct {
		name         string
		mode         string
		quiet        int64
		seed         func(k keys.Bucket) []testutil.Entry
		reply, rerun []int64
		stamped      string // the ZSET the job is stamped into, if any
		want         ks
		lease        string // the consumer's lease on the bucket: "", "fresh" or "expired"
	}{
		{"RecoverCountsAndReadies", "recover", 0, func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=1|5|2|0|x"), testutil.ZSet(k.InFlight("c"), "7:j=1"),
				testutil.Hash(k.State(), "j=7@c"), testutil.List(k.Ready(), "z")}
		}, []int64{1, 0, 0, 0}, []int64{0, 0, 0, 0}, "", func(k keys.Bucket, _ string) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=1|5|2|1|x"), testutil.Hash(k.State(), "j=r"),
				testutil.List(k.Ready(), "z", "j")}
		}, ""},
		{"RecoverClearsAnOlderDueTimeOfItsJob", "recover", 0, func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=1|5|2|0|x"), testutil.ZSet(k.InFlight("c"), "7:j=1"),
				testutil.Hash(k.State(), "j=7@c"), testutil.Hash(k.Due(), "j=3", "z=4")}
		}, []int64{1, 0, 0, 0}, []int64{0, 0, 0, 0}, "", func(k keys.Bucket, _ string) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=1|5|2|1|x"), testutil.Hash(k.State(), "j=r"),
				testutil.List(k.Ready(), "j"), testutil.Hash(k.Due(), "z=4")}
		}, ""},
		{"RecoverFreesTheDeadConsumersSlots", "recover", 0, func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=1|5|2|0|x"), testutil.ZSet(k.InFlight("c"), "7:j=1"),
				testutil.Hash(k.State(), "j=7@c"), testutil.ZSet(k.LimitRunning(), "7@c\nj=1", "3@d\nz=1"),
				testutil.Hash(k.LimitKeyOf(), "7@c\nj=hot"), testutil.ZSet(k.LimitKeyRunning("hot"), "7@c\nj=1")}
		}, []int64{1, 0, 0, 0}, []int64{0, 0, 0, 0}, "", func(k keys.Bucket, _ string) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=1|5|2|1|x"), testutil.Hash(k.State(), "j=r"),
				testutil.List(k.Ready(), "j"), testutil.ZSet(k.LimitRunning(), "3@d\nz=1")}
		}, ""},
		{"RollbackFreesTheSlots", "rollback", 0, func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=1|5|2|0|x"), testutil.ZSet(k.InFlight("c"), "7:j=1"),
				testutil.Hash(k.State(), "j=7@c"), testutil.ZSet(k.LimitRunning(), "7@c\nj=1")}
		}, []int64{1, 0, 0, 0}, []int64{0, 0, 0, 0}, "bucket", func(k keys.Bucket, stamp string) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=1|5|2|0|x"), testutil.ZSet(k.Scheduled(), "j="+stamp)}
		}, ""},
		{"PoisonJobGoesDead", "recover", 0, func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=1|5|2|3|x"), testutil.ZSet(k.InFlight("c"), "7:j=1"),
				testutil.Hash(k.State(), "j=7@c")}
		}, []int64{1, 0, 1, 0}, []int64{0, 0, 0, 0}, "dead", func(k keys.Bucket, stamp string) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=1|5|2|4|x"), testutil.ZSet(k.Dead(), "j="+stamp),
				testutil.Hash(k.Reasons(), "j=recovered 4 times: its consumers kept dying (poison job)")}
		}, ""},
		{"StaleTokenIsOnlyRemoved", "recover", 0, func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=1|5|2|0|x"), testutil.ZSet(k.InFlight("c"), "6:j=1", "7:j=2000"),
				testutil.Hash(k.State(), "j=7@c")}
		}, []int64{1, 1, 0, 0}, []int64{0, 1, 0, 1}, "", func(k keys.Bucket, _ string) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=1|5|2|0|x"), testutil.ZSet(k.InFlight("c"), "7:j=2000"),
				testutil.Hash(k.State(), "j=7@c")}
		}, ""},
		{"ActiveConsumerIsLeftAlone", "recover", 1 << 52, func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=1|5|2|0|x"), testutil.ZSet(k.InFlight("c"), "7:j=1"),
				testutil.Hash(k.State(), "j=7@c")}
		}, []int64{0, 1, 0, 1}, []int64{0, 1, 0, 1}, "", func(k keys.Bucket, _ string) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=1|5|2|0|x"), testutil.ZSet(k.InFlight("c"), "7:j=1"),
				testutil.Hash(k.State(), "j=7@c")}
		}, ""},
		{"RollbackIsDueNowUncounted", "rollback", 0, func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=1|5|2|0|x"), testutil.ZSet(k.InFlight("c"), "7:j=1"),
				testutil.Hash(k.State(), "j=7@c")}
		}, []int64{1, 0, 0, 0}, []int64{0, 0, 0, 0}, "bucket", func(k keys.Bucket, stamp string) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=1|5|2|0|x"), testutil.ZSet(k.Scheduled(), "j="+stamp)}
		}, ""},
		{"FreshLeaseRecoversNothing", "recover", 0, func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=1|5|2|0|x"), testutil.ZSet(k.InFlight("c"), "7:j=1"),
				testutil.Hash(k.State(), "j=7@c")}
		}, []int64{0, 1, 0, 1}, []int64{0, 1, 0, 1}, "", func(k keys.Bucket, _ string) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=1|5|2|0|x"), testutil.ZSet(k.InFlight("c"), "7:j=1"),
				testutil.Hash(k.State(), "j=7@c")}
		}, "fresh"},
		{"ExpiredLeaseIsNoLease", "recover", 0, func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=1|5|2|0|x"), testutil.ZSet(k.InFlight("c"), "7:j=1"),
				testutil.Hash(k.State(), "j=7@c")}
		}, []int64{1, 0, 0, 0}, []int64{0, 0, 0, 0}, "", func(k keys.Bucket, _ string) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=1|5|2|1|x"), testutil.Hash(k.State(), "j=r"),
				testutil.List(k.Ready(), "j")}
		}, "expired"},
		{"FreshLeaseOverEmptySetIsDone", "recover", 0, func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=1|5|2|0|x")}
		}, []int64{0, 0, 0, 0}, []int64{0, 0, 0, 0}, "", func(k keys.Bucket, _ string) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=1|5|2|0|x")}
		}, "fresh"},
		{"RollbackIgnoresLease", "rollback", 0, func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=1|5|2|0|x"), testutil.ZSet(k.InFlight("c"), "7:j=1"),
				testutil.Hash(k.State(), "j=7@c")}
		}, []int64{1, 0, 0, 0}, []int64{0, 0, 0, 0}, "bucket", func(k keys.Bucket, stamp string) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=1|5|2|0|x"), testutil.ZSet(k.Scheduled(), "j="+stamp)}
		}, "fresh"},
	}
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			serverMs := func() int64 {
				tm, err := c.Time(ctx).Result()
				require.NoError(t, err)
				return tm.UnixMilli()
			}
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					got, want := testutil.Prefix(t), testutil.Prefix(t)
					k, kw := keys.ForBucket(got, "t", 0), keys.ForBucket(want, "t", 0)
					testutil.Seed(t, c, tc.seed(k)...)
					leased := seedLease(t, c, k.Lease("c"), tc.lease)
					run := func() []int64 {
						v, err := recoverScript.Run(ctx, c, recoverKeys(k, "c"),
							tc.mode, 10, 3, 100, keys.ReadyChannel(got), keys.WakeChannel(got), "t#0", "c", tc.quiet, 1000).Int64Slice()
						require.NoError(t, err)
						return v
					}
					before := serverMs()
					require.Equal(t, tc.reply, run())
					after := serverMs() + 1
					stamp := ""
					if tc.stamped != "" {
						key := map[string]string{"dead": k.Dead(), "bucket": k.Scheduled()}[tc.stamped]
						s, err := c.ZScore(ctx, key, "j").Result()
						require.NoError(t, err)
						require.True(t, int64(s) >= before && int64(s) <= after, "stamp %v outside [%d, %d]", s, before, after)
						stamp = fmt.Sprint(int64(s))
					}
					testutil.Seed(t, c, tc.want(kw, stamp)...)
					if leased != "" { // no script writes or removes it
						testutil.Seed(t, c, testutil.String(kw.Lease("c"), leased))
					}
					require.Equal(t, testutil.DumpUnder(t, c, want), testutil.DumpUnder(t, c, got))
					require.Equal(t, tc.rerun, run(), "rerun after a lost reply")
					require.Equal(t, testutil.DumpUnder(t, c, want), testutil.DumpUnder(t, c, got), "rerun after a lost reply")
				})
			}
		})
	}
}

// recoverKeys are recover.lua's keys for consumer cid in bucket k.
func recoverKeys(k keys.Bucket, cid string) []string {
	return []string{k.InFlight(cid), k.Ready(), k.Pool(), k.Scheduled(), k.Dead(), k.Reasons(), k.State(), k.Errors(), k.LimitPrefix(), k.Lease(cid), k.Due()}
}

// seedLease writes the lease key as lease says, by the server's clock:
// "fresh" (an hour left), "expired" (ended a second ago; such a key has
// expired on a real server, not on miniredis, whose keys expire only when
// its clock is moved), or "" (none). It returns the value written.
func seedLease(t *testing.T, c redis.UniversalClient, key, lease string) string {
	t.Helper()
	ctx := context.Background()
	tm, err := c.Time(ctx).Result()
	require.NoError(t, err)
	var v string
	switch lease {
	case "":
		return ""
	case "fresh":
		v = fmt.Sprint(tm.UnixMilli() + time.Hour.Milliseconds())
	case "expired":
		v = fmt.Sprint(tm.UnixMilli() - time.Second.Milliseconds())
	default:
		t.Fatalf("no lease %q", lease)
	}
	require.NoError(t, c.Set(ctx, key, v, 0).Err())
	return v
}

// TestRecoverScriptBoundsEachCall: recover.lua over an in-flight set of
// 100,000 deliveries handles at most its batch per call, reads the lease
// in constant time whatever the set's size, and leaves the rest for the
// next calls; a rerun after a lost reply handles the next batch, never a
// delivery twice.
func TestRecoverScriptBoundsEachCall(t *testing.T) {
	testutil.FaultTier(t) // seconds to seed under -race
	const n, batch = 100_000, 500
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			p := testutil.Prefix(t)
			k := keys.ForBucket(p, "t", 0)
			pipe := c.Pipeline()
			for lo := 0; lo < n; lo += 1000 {
				zs := make([]redis.Z, 0, 1000)
				st := make([]any, 0, 2000)
				env := make([]any, 0, 2000)
				for i := lo; i < lo+1000; i++ {
					id := fmt.Sprint("j", i)
					zs = append(zs, redis.Z{Score: 1, Member: "7:" + id})
					st = append(st, id, "7@c")
					env = append(env, id, "1|5|2|0|x")
				}
				pipe.ZAdd(ctx, k.InFlight("c"), zs...)
				pipe.HSet(ctx, k.State(), st...)
				pipe.HSet(ctx, k.Pool(), env...)
			}
			_, err := pipe.Exec(ctx)
			require.NoError(t, err)
			run := func() []int64 {
				v, err := recoverScript.Run(ctx, c, recoverKeys(k, "c"),
					"recover", batch, 3, 100, keys.ReadyChannel(p), keys.WakeChannel(p), "t#0", "c", 0, "+inf").Int64Slice()
				require.NoError(t, err)
				return v
			}
			seedLease(t, c, k.Lease("c"), "fresh")
			require.Equal(t, []int64{0, n, 0, 1}, run(), "leased: nothing recovered")
			require.NoError(t, c.Del(ctx, k.Lease("c")).Err())
			require.Equal(t, []int64{batch, n - batch, 0, 0}, run())
			require.Equal(t, []int64{batch, n - 2*batch, 0, 0}, run(), "rerun after a lost reply")
			ready, err := c.LLen(ctx, k.Ready()).Result()
			require.NoError(t, err)
			require.EqualValues(t, 2*batch, ready, "each delivery recovered once")
		})
	}
}

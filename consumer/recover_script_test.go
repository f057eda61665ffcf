package consumer

import (
	"context"
	"fmt"
	"testing"

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
// a consumer that fetched within the quiet time is left alone. A rerun
// finds the members gone and writes nothing more.
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
	}{
		{"RecoverCountsAndReadies", "recover", 0, func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=1|5|2|0|x"), testutil.ZSet(k.InFlight("c"), "7:j=1"),
				testutil.Hash(k.State(), "j=7@c"), testutil.List(k.Ready(), "z")}
		}, []int64{1, 0, 0, 0}, []int64{0, 0, 0, 0}, "", func(k keys.Bucket, _ string) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=1|5|2|1|x"), testutil.Hash(k.State(), "j=r"),
				testutil.List(k.Ready(), "z", "j")}
		}},
		{"RecoverFreesTheDeadConsumersSlots", "recover", 0, func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=1|5|2|0|x"), testutil.ZSet(k.InFlight("c"), "7:j=1"),
				testutil.Hash(k.State(), "j=7@c"), testutil.ZSet(k.LimitRunning(), "7@c\nj=1", "3@d\nz=1"),
				testutil.Hash(k.LimitPrefix()+"keyof", "7@c\nj=hot"), testutil.ZSet(k.LimitKeyRunning("hot"), "7@c\nj=1")}
		}, []int64{1, 0, 0, 0}, []int64{0, 0, 0, 0}, "", func(k keys.Bucket, _ string) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=1|5|2|1|x"), testutil.Hash(k.State(), "j=r"),
				testutil.List(k.Ready(), "j"), testutil.ZSet(k.LimitRunning(), "3@d\nz=1")}
		}},
		{"RollbackFreesTheSlots", "rollback", 0, func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=1|5|2|0|x"), testutil.ZSet(k.InFlight("c"), "7:j=1"),
				testutil.Hash(k.State(), "j=7@c"), testutil.ZSet(k.LimitRunning(), "7@c\nj=1")}
		}, []int64{1, 0, 0, 0}, []int64{0, 0, 0, 0}, "bucket", func(k keys.Bucket, stamp string) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=1|5|2|0|x"), testutil.ZSet(k.Scheduled(), "j="+stamp)}
		}},
		{"PoisonJobGoesDead", "recover", 0, func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=1|5|2|3|x"), testutil.ZSet(k.InFlight("c"), "7:j=1"),
				testutil.Hash(k.State(), "j=7@c")}
		}, []int64{1, 0, 1, 0}, []int64{0, 0, 0, 0}, "dead", func(k keys.Bucket, stamp string) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=1|5|2|4|x"), testutil.ZSet(k.Dead(), "j="+stamp),
				testutil.Hash(k.Reasons(), "j=recovered 4 times: its consumers kept dying (poison job)")}
		}},
		{"StaleTokenIsOnlyRemoved", "recover", 0, func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=1|5|2|0|x"), testutil.ZSet(k.InFlight("c"), "6:j=1", "7:j=2000"),
				testutil.Hash(k.State(), "j=7@c")}
		}, []int64{1, 1, 0, 0}, []int64{0, 1, 0, 1}, "", func(k keys.Bucket, _ string) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=1|5|2|0|x"), testutil.ZSet(k.InFlight("c"), "7:j=2000"),
				testutil.Hash(k.State(), "j=7@c")}
		}},
		{"ActiveConsumerIsLeftAlone", "recover", 1 << 52, func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=1|5|2|0|x"), testutil.ZSet(k.InFlight("c"), "7:j=1"),
				testutil.Hash(k.State(), "j=7@c")}
		}, []int64{0, 1, 0, 1}, []int64{0, 1, 0, 1}, "", func(k keys.Bucket, _ string) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=1|5|2|0|x"), testutil.ZSet(k.InFlight("c"), "7:j=1"),
				testutil.Hash(k.State(), "j=7@c")}
		}},
		{"RollbackIsDueNowUncounted", "rollback", 0, func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=1|5|2|0|x"), testutil.ZSet(k.InFlight("c"), "7:j=1"),
				testutil.Hash(k.State(), "j=7@c")}
		}, []int64{1, 0, 0, 0}, []int64{0, 0, 0, 0}, "bucket", func(k keys.Bucket, stamp string) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=1|5|2|0|x"), testutil.ZSet(k.Scheduled(), "j="+stamp)}
		}},
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
					run := func() []int64 {
						v, err := recoverScript.Run(ctx, c,
							[]string{k.InFlight("c"), k.Ready(), k.Pool(), k.Scheduled(), k.Dead(), k.Reasons(), k.State(), k.Errors(), k.LimitPrefix()},
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
					require.Equal(t, testutil.DumpUnder(t, c, want), testutil.DumpUnder(t, c, got))
					require.Equal(t, tc.rerun, run(), "rerun after a lost reply")
					require.Equal(t, testutil.DumpUnder(t, c, want), testutil.DumpUnder(t, c, got), "rerun after a lost reply")
				})
			}
		})
	}
}

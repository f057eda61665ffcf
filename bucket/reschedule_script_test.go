package bucket

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/pool"
)

// reschedule.lua gives a waiting job a new due time: a scheduled one (or a
// broadcast one, under its mark) keeps its member with the new score, a
// ready one goes back to the bucket and loses its ready state; a delay
// counts from now and is capped at the year 9999; an absent job or one in
// flight writes nothing; a rerun with the same op key answers the same and
// writes nothing more.
func TestRescheduleScript(t *testing.T) {
	const maxDue = "253402300799999"
	type ks struct{ pool, bucket, state []string } // "field=value", "member=score"
	cases := []struct {
		name      string
		seed      ks
		due, wait string
		reply     int64
		want      ks
	}{
		{"ScheduledKeepsItsPlace", ks{[]string{"j=E"}, []string{"j=5", "k=7"}, nil}, "1000", "0", 0,
			ks{[]string{"j=E"}, []string{"j=1000", "k=7"}, nil}},
		{"BroadcastKeepsItsMark", ks{[]string{"j=E"}, []string{keys.BroadcastMark + "j=5"}, nil}, "1000", "0", 0,
			ks{[]string{"j=E"}, []string{keys.BroadcastMark + "j=1000"}, nil}},
		{"ReadyGoesBackToTheBucket", ks{[]string{"j=E"}, nil, []string{"j=r"}}, "1000", "0", 0,
			ks{[]string{"j=E"}, []string{"j=1000"}, nil}},
		{"DelayIsCappedAtYear9999", ks{[]string{"j=E"}, []string{"j=5"}, nil}, "", maxDue, 0,
			ks{[]string{"j=E"}, []string{"j=" + maxDue}, nil}},
		{"AbsentJobWritesNothing", ks{nil, []string{"j=5"}, nil}, "1000", "0", 1,
			ks{nil, []string{"j=5"}, nil}},
		{"InFlightJobWritesNothing", ks{[]string{"j=E"}, nil, []string{"j=tok@c"}}, "1000", "0", 2,
			ks{[]string{"j=E"}, nil, []string{"j=tok@c"}}},
	}
	write := func(t *testing.T, c redis.UniversalClient, k keys.Bucket, s ks, op bool) {
		testutil.Seed(t, c, testutil.Hash(k.Pool(), s.pool...), testutil.Hash(k.State(), s.state...),
			testutil.ZSet(k.Scheduled(), s.bucket...))
		if op {
			testutil.Seed(t, c, testutil.String(k.Op("op"), "0"))
		}
	}
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					got, want := testutil.Prefix(t), testutil.Prefix(t)
					k, kw := keys.ForBucket(got, "t", 0), keys.ForBucket(want, "t", 0)
					write(t, c, k, tc.seed, false)
					write(t, c, kw, tc.want, tc.reply == 0)
					run := func() int64 {
						v, err := rescheduleScript.Run(ctx, c, []string{k.Pool(), k.Scheduled(), k.State(), k.Op("op")},
							"j", keys.BroadcastMark, tc.due, keys.WakeChannel(got), "t#0", pool.OpTTL(c).Milliseconds(), tc.wait).Int64()
						require.NoError(t, err)
						return v
					}
					require.Equal(t, tc.reply, run())
					require.Equal(t, testutil.DumpUnder(t, c, want), testutil.DumpUnder(t, c, got))
					require.Equal(t, tc.reply, run(), "rerun after a lost reply")
					require.Equal(t, testutil.DumpUnder(t, c, want), testutil.DumpUnder(t, c, got), "rerun after a lost reply")
				})
			}
		})
	}
}

// reschedule.lua given a created time reschedules the job of the id only
// while it was created then: a job added again at another time is left,
// writing nothing (a rerun answers alike); a created time that is no whole
// number of ms fails before any write.
func TestRescheduleScriptLeavesAJobCreatedAtAnotherTime(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			p := testutil.Prefix(t)
			k := keys.ForBucket(p, "t", 0)
			testutil.Seed(t, c, testutil.Hash(k.Pool(), "j=1|10|0|0|x"), testutil.ZSet(k.Scheduled(), "j=5"))
			before := testutil.DumpUnder(t, c, p)
			run := func(op, created string) (int64, error) {
				return rescheduleScript.Run(ctx, c, []string{k.Pool(), k.Scheduled(), k.State(), k.Op(op)},
					"j", keys.BroadcastMark, "7", keys.WakeChannel(p), "t#0", pool.OpTTL(c).Milliseconds(), 0, created).Int64()
			}
			for range 2 {
				v, err := run("a", "9")
				require.NoError(t, err)
				require.EqualValues(t, 3, v)
				require.Equal(t, before, testutil.DumpUnder(t, c, p), "another created time writes nothing")
			}
			_, err := run("b", "x")
			require.ErrorContains(t, err, "reschedule.lua: created time x is no whole number of ms")
			require.Equal(t, before, testutil.DumpUnder(t, c, p))
			v, err := run("c", "10")
			require.NoError(t, err)
			require.Zero(t, v)
			due, err := c.ZScore(ctx, k.Scheduled(), "j").Result()
			require.NoError(t, err)
			require.EqualValues(t, 7, due)
		})
	}
}

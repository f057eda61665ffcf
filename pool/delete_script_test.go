package pool

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
)

// delete.lua removes a job from its pool, its reason and last error, and
// from wherever it waits (bucket, broadcast member, unack, dead), or only
// its state when it is ready or in flight; it returns the envelope and
// where the job was (with the holder of an in-flight job); an absent job
// writes nothing; a rerun with the same op key returns the same reply and
// writes nothing more.
func TestDeleteScript(t *testing.T) {
	type ks func(k keys.Bucket) []testutil.Entry
	withOp := func(k keys.Bucket, op string, es ...testutil.Entry) []testutil.Entry {
		return append(es, testutil.String(k.Op("op"), op))
	}
	cases := []struct {
		name  string
		seed  ks
		reply []any
		want  ks
	}{
		{"Scheduled", func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=E", "k=F"), testutil.ZSet(k.Scheduled(), "j=5", "k=6"),
				testutil.Hash(k.Errors(), "j=e"), testutil.Hash(k.Reasons(), "j=r")}
		}, []any{int64(1), "E", "scheduled", ""}, func(k keys.Bucket) []testutil.Entry {
			return withOp(k, "scheduled 0 E", testutil.Hash(k.Pool(), "k=F"), testutil.ZSet(k.Scheduled(), "k=6"))
		}},
		{"Broadcast", func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=E"), testutil.ZSet(k.Scheduled(), keys.BroadcastMark+"j=5")}
		}, []any{int64(1), "E", "scheduled", ""}, func(k keys.Bucket) []testutil.Entry { return withOp(k, "scheduled 0 E") }},
		{"ReadyLosesOnlyItsState", func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=E"), testutil.Hash(k.State(), "j=r", "k=r"), testutil.List(k.Ready(), "j", "k")}
		}, []any{int64(1), "E", "ready", ""}, func(k keys.Bucket) []testutil.Entry {
			return withOp(k, "ready 0 E", testutil.Hash(k.State(), "k=r"), testutil.List(k.Ready(), "j", "k"))
		}},
		{"InFlightLosesOnlyItsStateAndNamesItsHolder", func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=E"), testutil.Hash(k.State(), "j=tok@c 1"), testutil.ZSet(k.InFlight("c 1"), "tok:j=5")}
		}, []any{int64(1), "E", "inflight", "tok@c 1"}, func(k keys.Bucket) []testutil.Entry {
			return withOp(k, "inflight 7 tok@c 1E", testutil.ZSet(k.InFlight("c 1"), "tok:j=5"))
		}},
		{"InNoPlaceIsInFlight", func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=E")}
		}, []any{int64(1), "E", "inflight", ""}, func(k keys.Bucket) []testutil.Entry { return withOp(k, "inflight 0 E") }},
		{"UnAcked", func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=E"), testutil.ZSet(k.UnAck(), "j=5")}
		}, []any{int64(1), "E", "unack", ""}, func(k keys.Bucket) []testutil.Entry { return withOp(k, "unack 0 E") }},
		{"Dead", func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=E"), testutil.ZSet(k.Dead(), "j=5", "k=6")}
		}, []any{int64(1), "E", "dead", ""}, func(k keys.Bucket) []testutil.Entry {
			return withOp(k, "dead 0 E", testutil.ZSet(k.Dead(), "k=6"))
		}},
		{"ReplyOfAnOlderVersion", func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=F"), testutil.String(k.Op("op"), "1|0|E")}
		}, []any{int64(1), "1|0|E", "", ""}, func(k keys.Bucket) []testutil.Entry {
			return withOp(k, "1|0|E", testutil.Hash(k.Pool(), "j=F"))
		}},
		{"AbsentJobWritesNothing", func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.ZSet(k.Dead(), "j=5")}
		}, []any{int64(0)}, func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.ZSet(k.Dead(), "j=5")}
		}},
	}
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					got, want := testutil.Prefix(t), testutil.Prefix(t)
					k, kw := keys.ForBucket(got, "t", 0), keys.ForBucket(want, "t", 0)
					testutil.Seed(t, c, tc.seed(k)...)
					testutil.Seed(t, c, tc.want(kw)...)
					run := func() []any {
						v, err := deleteScript.Run(ctx, c, []string{k.Pool(), k.Scheduled(), k.State(), k.UnAck(), k.Dead(), k.Reasons(), k.Op("op"), k.Errors()},
							"j", keys.BroadcastMark, OpTTL(c).Milliseconds()).Slice()
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

// delete.lua given a created time deletes the job of the id only while it
// was created then: a job added again at another time is left, writing
// nothing (a rerun answers alike); a created time that is no whole number
// of ms fails before any write.
func TestDeleteScriptLeavesAJobCreatedAtAnotherTime(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			p := testutil.Prefix(t)
			k := keys.ForBucket(p, "t", 0)
			testutil.Seed(t, c, testutil.Hash(k.Pool(), "j=1|10|0|0|x"), testutil.ZSet(k.Scheduled(), "j=5"))
			before := testutil.DumpUnder(t, c, p)
			run := func(op, created string) ([]any, error) {
				return deleteScript.Run(ctx, c, []string{k.Pool(), k.Scheduled(), k.State(), k.UnAck(), k.Dead(), k.Reasons(), k.Op(op), k.Errors()},
					"j", keys.BroadcastMark, OpTTL(c).Milliseconds(), created).Slice()
			}
			for range 2 {
				v, err := run("a", "9")
				require.NoError(t, err)
				require.Equal(t, []any{int64(2)}, v)
				require.Equal(t, before, testutil.DumpUnder(t, c, p), "another created time writes nothing")
			}
			_, err := run("b", "1e1")
			require.ErrorContains(t, err, "delete.lua: created time 1e1 is no whole number of ms")
			require.Equal(t, before, testutil.DumpUnder(t, c, p))
			v, err := run("c", "10")
			require.NoError(t, err)
			require.Equal(t, []any{int64(1), "1|10|0|0|x", "scheduled", ""}, v)
			v, err = run("c", "10")
			require.NoError(t, err)
			require.Equal(t, []any{int64(1), "1|10|0|0|x", "scheduled", ""}, v, "rerun after a lost reply")
			n, err := c.HLen(ctx, k.Pool()).Result()
			require.NoError(t, err)
			require.Zero(t, n)
		})
	}
}

package ack

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/pool"
)

// seed is a bucket's keyspace by role: the pool, unack, dead, bucket,
// reasons and errors keys, each its fields or members (ZSET members with
// their scores as "member=score").
type seed map[string][]string

func (s seed) write(t *testing.T, c redis.UniversalClient, k keys.Bucket) {
	t.Helper()
	for role, vals := range s {
		switch role {
		case "pool":
			testutil.Seed(t, c, testutil.Hash(k.Pool(), vals...))
		case "reasons":
			testutil.Seed(t, c, testutil.Hash(k.Reasons(), vals...))
		case "errors":
			testutil.Seed(t, c, testutil.Hash(k.Errors(), vals...))
		case "unack":
			testutil.Seed(t, c, testutil.ZSet(k.UnAck(), vals...))
		case "dead":
			testutil.Seed(t, c, testutil.ZSet(k.Dead(), vals...))
		case "bucket":
			testutil.Seed(t, c, testutil.ZSet(k.Scheduled(), vals...))
		default:
			t.Fatalf("no role %q", role)
		}
	}
}

// maxDue is a delay that lands on the cap: the due time it gives is
// exactly pool.MaxDueMs, whatever the server's clock.
const maxDue = "253402300799999"

// requeue.lua takes a parked job back to its bucket due at now+delay
// (capped at the year 9999), drops its reason, resets its counts when asked,
// and records its reply; an absent or unparked job writes nothing, nor does
// a job whose created or parked time is not the mark's (added or parked
// again since it was listed); a rerun with the same op key answers the
// same and writes nothing more.
func TestRequeueScript(t *testing.T) {
	cases := []struct {
		name   string
		park   Parking
		seed   seed
		id     string
		reset  string
		mark   string
		reply  int64
		want   seed
		wantOp bool
	}{
		{"RequeuesUnAcked", UnAck,
			seed{"pool": {"j=1|10|3|2|x"}, "unack": {"j=5"}, "reasons": {"j=r"}}, "j", "", "", 0,
			seed{"pool": {"j=1|10|3|2|x"}, "bucket": {"j=" + maxDue}}, true},
		{"RequeuesDeadWithReset", Dead,
			seed{"pool": {"j=1|10|3|2|x"}, "dead": {"j=5"}, "reasons": {"j=r"}}, "j", "1", "", 0,
			seed{"pool": {"j=1|10|0|0|x"}, "bucket": {"j=" + maxDue}}, true},
		{"AbsentJobWritesNothing", UnAck,
			seed{"unack": {"j=5"}}, "j", "", "", 1,
			seed{"unack": {"j=5"}}, false},
		{"UnparkedJobWritesNothing", Dead,
			seed{"pool": {"j=1|10|3|2|x"}, "unack": {"j=5"}}, "j", "", "", 2,
			seed{"pool": {"j=1|10|3|2|x"}, "unack": {"j=5"}}, false},
		{"RequeuesTheMarkedJob", Dead,
			seed{"pool": {"j=1|10|3|2|x"}, "dead": {"j=5"}, "reasons": {"j=r"}}, "j", "1", "10:5", 0,
			seed{"pool": {"j=1|10|0|0|x"}, "bucket": {"j=" + maxDue}}, true},
		{"JobAddedAgainWritesNothing", UnAck,
			seed{"pool": {"j=1|11|0|0|x"}, "unack": {"j=5"}}, "j", "", "10:5", 3,
			seed{"pool": {"j=1|11|0|0|x"}, "unack": {"j=5"}}, false},
		{"JobParkedAgainWritesNothing", Dead,
			seed{"pool": {"j=1|10|1|0|x"}, "dead": {"j=7"}, "reasons": {"j=r"}}, "j", "1", "10:5", 3,
			seed{"pool": {"j=1|10|1|0|x"}, "dead": {"j=7"}, "reasons": {"j=r"}}, false},
	}
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					got, want := testutil.Prefix(t), testutil.Prefix(t)
					k, kw := keys.ForBucket(got, "t", 0), keys.ForBucket(want, "t", 0)
					tc.seed.write(t, c, k)
					tc.want.write(t, c, kw)
					if tc.wantOp {
						require.NoError(t, c.Set(ctx, kw.Op("op"), "0", 0).Err())
					}
					run := func() int64 {
						v, err := requeueScript.Run(ctx, c, []string{k.Pool(), tc.park.key(k), k.Scheduled(), k.Reasons(), k.Op("op")},
							tc.id, maxDue, tc.reset, keys.WakeChannel(got), "t#0", pool.OpTTL(c).Milliseconds(), tc.mark).Int64()
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

// take.lua removes a parked job from where it is parked, from its pool and
// with its reason and last error, and returns its envelope; an absent or
// unparked job writes nothing, nor does a job whose created or parked time
// is not the mark's; a rerun with the same op key returns the same
// envelope, even though the job is gone.
func TestTakeScript(t *testing.T) {
	cases := []struct {
		name  string
		park  Parking
		seed  seed
		mark  string
		reply []any
		want  seed
		op    string
	}{
		{"TakesDead", Dead,
			seed{"pool": {"j=E", "k=F"}, "dead": {"j=5", "k=6"}, "reasons": {"j=r"}, "errors": {"j=e"}}, "",
			[]any{int64(0), "E"}, seed{"pool": {"k=F"}, "dead": {"k=6"}}, "E"},
		{"TakesUnAcked", UnAck,
			seed{"pool": {"j=E"}, "unack": {"j=5"}}, "",
			[]any{int64(0), "E"}, seed{}, "E"},
		{"AbsentJobWritesNothing", Dead,
			seed{"dead": {"j=5"}}, "", []any{int64(1)}, seed{"dead": {"j=5"}}, ""},
		{"UnparkedJobWritesNothing", UnAck,
			seed{"pool": {"j=E"}, "dead": {"j=5"}}, "", []any{int64(2)}, seed{"pool": {"j=E"}, "dead": {"j=5"}}, ""},
		{"TakesTheMarkedJob", Dead,
			seed{"pool": {"j=1|10|1|0|x"}, "dead": {"j=5"}, "reasons": {"j=r"}}, "10:5",
			[]any{int64(0), "1|10|1|0|x"}, seed{}, "1|10|1|0|x"},
		{"JobAddedAgainWritesNothing", Dead,
			seed{"pool": {"j=1|11|1|0|x"}, "dead": {"j=5"}, "reasons": {"j=r"}}, "10:5",
			[]any{int64(3)}, seed{"pool": {"j=1|11|1|0|x"}, "dead": {"j=5"}, "reasons": {"j=r"}}, ""},
		{"JobParkedAgainWritesNothing", UnAck,
			seed{"pool": {"j=1|10|0|0|x"}, "unack": {"j=6"}}, "10:5",
			[]any{int64(3)}, seed{"pool": {"j=1|10|0|0|x"}, "unack": {"j=6"}}, ""},
	}
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					got, want := testutil.Prefix(t), testutil.Prefix(t)
					k, kw := keys.ForBucket(got, "t", 0), keys.ForBucket(want, "t", 0)
					tc.seed.write(t, c, k)
					tc.want.write(t, c, kw)
					if tc.op != "" {
						require.NoError(t, c.Set(ctx, kw.Op("op"), tc.op, 0).Err())
					}
					run := func() []any {
						v, err := takeScript.Run(ctx, c, []string{k.Pool(), tc.park.key(k), k.Reasons(), k.Op("op"), k.Errors()},
							"j", pool.OpTTL(c).Milliseconds(), tc.mark).Slice()
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

// take.lua and requeue.lua refuse a mark that is not "<created ms>:<parked
// ms>" with an error naming it, before they write anything.
func TestParkedScriptsRefuseABadMark(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			p := testutil.Prefix(t)
			k := keys.ForBucket(p, "t", 0)
			seed{"pool": {"j=1|10|0|0|x"}, "dead": {"j=5"}}.write(t, c, k)
			before := testutil.DumpUnder(t, c, p)
			for _, mark := range []string{"10", "10:", ":5", "10:5:1", "a:5", "10:5 "} {
				err := takeScript.Run(ctx, c, []string{k.Pool(), k.Dead(), k.Reasons(), k.Op("take"), k.Errors()},
					"j", pool.OpTTL(c).Milliseconds(), mark).Err()
				require.ErrorContains(t, err, "take.lua: mark "+mark+" is not", "take, mark %q", mark)
				err = requeueScript.Run(ctx, c, []string{k.Pool(), k.Dead(), k.Scheduled(), k.Reasons(), k.Op("requeue")},
					"j", 0, "1", keys.WakeChannel(p), "t#0", pool.OpTTL(c).Milliseconds(), mark).Err()
				require.ErrorContains(t, err, "requeue.lua: mark "+mark+" is not", "requeue, mark %q", mark)
				require.Equal(t, before, testutil.DumpUnder(t, c, p), "mark %q", mark)
				require.ErrorIs(t, CheckMark(mark), pool.ErrInvalidArgument, "CheckMark(%q)", mark)
			}
		})
	}
}

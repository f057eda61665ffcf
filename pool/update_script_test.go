package pool

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
)

// update.lua replaces a waiting job's envelope only while the job is as the
// caller read it (envelope, place, due time): a scheduled job keeps its due
// time unless given one, a ready job given a due time from now goes back to
// the bucket, capped at the year 9999; an absent job, one in flight and one
// changed since it was read write nothing; a rerun with the same op key
// answers the same and writes nothing more.
func TestUpdateScript(t *testing.T) {
	const maxDue = "253402300799999"
	sum := sha1.Sum([]byte("E"))
	readE := hex.EncodeToString(sum[:])
	type ks func(k keys.Bucket) []testutil.Entry
	cases := []struct {
		name                      string
		seed                      ks
		sha, place, read, how, at string
		reply                     int64
		want                      ks
	}{
		{"ScheduledKeepsItsDueTime", func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=E"), testutil.ZSet(k.Scheduled(), "j=5")}
		}, readE, "scheduled", "5", "", "", 0, func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=N"), testutil.ZSet(k.Scheduled(), "j=5"), testutil.String(k.Op("op"), "0")}
		}},
		{"ReadyGoesBackDueAtTheCap", func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=E"), testutil.Hash(k.State(), "j=r")}
		}, readE, "ready", "", "in", maxDue, 0, func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=N"), testutil.ZSet(k.Scheduled(), "j="+maxDue), testutil.String(k.Op("op"), "0")}
		}},
		{"ChangedSinceReadWritesNothing", func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=E2"), testutil.ZSet(k.Scheduled(), "j=5")}
		}, readE, "scheduled", "5", "at", "9", 3, func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=E2"), testutil.ZSet(k.Scheduled(), "j=5")}
		}},
		{"InFlightWritesNothing", func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=E"), testutil.Hash(k.State(), "j=7@c")}
		}, readE, "ready", "", "", "", 2, func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.Pool(), "j=E"), testutil.Hash(k.State(), "j=7@c")}
		}},
		{"AbsentWritesNothing", func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.ZSet(k.Scheduled(), "j=5")}
		}, readE, "scheduled", "5", "", "", 1, func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.ZSet(k.Scheduled(), "j=5")}
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
					run := func() int64 {
						v, err := updateScript.Run(ctx, c, []string{k.Pool(), k.Scheduled(), k.State(), k.Op("op")},
							"j", "j", tc.sha, tc.place, tc.read, "N", tc.how, tc.at, keys.WakeChannel(got), "t#0", OpTTL(c).Milliseconds()).Int64()
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

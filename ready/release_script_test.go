package ready

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
)

// release.lua puts back at the head of the ready list, oldest first, the
// deliveries of this consumer's in-flight set whose state still names them,
// and only drops the others (a stale token: the same consumer fetched the
// job again; another consumer's delivery); a member not in the set is left
// alone. A rerun finds the members gone: it returns 0 and writes nothing.
func TestReleaseScript(t *testing.T) {
	type ks func(k keys.Bucket) []testutil.Entry
	head := keys.ReadyHeadField
	cases := []struct {
		name    string
		seed    ks
		members []any
		reply   int64
		want    ks
	}{
		{"ReturnsLostFetchesOldestFirst", func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.ZSet(k.InFlight("c"), "7:j=1", "8:k=2", "9:x=3"), testutil.List(k.Ready(), "z"),
				testutil.Hash(k.State(), "j=7@c", "k=8@c", "x=9@c", "z=r")}
		}, []any{"7:j", "8:k"}, 2, func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.ZSet(k.InFlight("c"), "9:x=3"), testutil.List(k.Ready(), "j", "k", "z"),
				testutil.Hash(k.State(), "j=r", "k=r", "x=9@c", "z=r", head+"=-2")}
		}},
		{"StaleTokenIsOnlyDropped", func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.ZSet(k.InFlight("c"), "6:j=1", "7:j=2"), testutil.Hash(k.State(), "j=7@c")}
		}, []any{"6:j"}, 0, func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.ZSet(k.InFlight("c"), "7:j=2"), testutil.Hash(k.State(), "j=7@c")}
		}},
		{"OtherConsumersDeliveryIsOnlyDropped", func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.ZSet(k.InFlight("c"), "7:j=1"), testutil.Hash(k.State(), "j=7@d")}
		}, []any{"7:j"}, 0, func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.State(), "j=7@d")}
		}},
		{"MemberNotHeldWritesNothing", func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.State(), "j=7@c")}
		}, []any{"7:j"}, 0, func(k keys.Bucket) []testutil.Entry {
			return []testutil.Entry{testutil.Hash(k.State(), "j=7@c")}
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
						args := append([]any{keys.ReadyChannel(got), "t#0", "c"}, tc.members...)
						v, err := releaseScript.Run(ctx, c, []string{k.InFlight("c"), k.Ready(), k.State(), k.LimitPrefix(), k.Due()}, args...).Int64()
						require.NoError(t, err)
						return v
					}
					require.Equal(t, tc.reply, run())
					require.Equal(t, testutil.DumpUnder(t, c, want), testutil.DumpUnder(t, c, got))
					require.Equal(t, int64(0), run(), "rerun after a lost reply")
					require.Equal(t, testutil.DumpUnder(t, c, want), testutil.DumpUnder(t, c, got), "rerun after a lost reply")
				})
			}
		})
	}
}

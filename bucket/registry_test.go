package bucket_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/bucket"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
)

// TestEnsureRecordsAgain: a producer whose cached topic vanished from the
// topic set (retired, or lost in a failover) records it again once its
// cache is older than RecordEvery, without a restart.
func TestEnsureRecordsAgain(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx, rdb, prefix, _ := setup(t, be)
			reg := bucket.NewRegistry(rdb, prefix)
			reg.RecordEvery = 50 * time.Millisecond
			fresh, err := reg.Ensure(ctx, "t", 4)
			require.NoError(t, err)
			require.True(t, fresh)
			require.NoError(t, rdb.SRem(ctx, keys.Topics(prefix), "t").Err())
			require.Eventually(t, func() bool {
				fresh, err := reg.Ensure(ctx, "t", 4)
				require.NoError(t, err)
				require.False(t, fresh, "only the first Ensure is fresh")
				return rdb.SIsMember(ctx, keys.Topics(prefix), "t").Val()
			}, 5*time.Second, 10*time.Millisecond, "the topic recorded again")
		})
	}
}

// TestOwnerIsStable: every client seeing the same live set picks the same
// owner, and a client joining takes buckets only for itself.
func TestOwnerIsStable(t *testing.T) {
	live := []string{"a", "b", "c"}
	moved := 0
	for i := range 1000 {
		addr := keys.Address("t", i)
		before := bucket.Owner(live, addr)
		require.Equal(t, before, bucket.Owner([]string{"c", "a", "b"}, addr))
		after := bucket.Owner(append(live, "d"), addr)
		if after != before {
			require.Equal(t, "d", after, "a bucket moved between clients that stayed")
			moved++
		}
	}
	require.InDelta(t, 250, moved, 60, "a fourth client takes about a quarter of the buckets")
}

package ack

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/pool"
)

// A purge call rerun with the same op id (go-redis after a lost reply)
// returns the first run's count and removes no further chunk.
func TestPurgeRerunRemovesNothingMore(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			rdb := be.New(t)
			k := keys.ForBucket(testutil.Prefix(t), "t", 0)
			for i := range 5 {
				id := fmt.Sprint(i)
				require.NoError(t, rdb.HSet(ctx, k.Pool(), id, "env").Err())
				require.NoError(t, rdb.ZAdd(ctx, k.Dead(), redis.Z{Score: float64(i), Member: id}).Err())
			}
			run := func() int {
				n, err := purgeScript.Run(ctx, rdb, []string{k.Pool(), k.Dead(), k.Reasons(), k.Errors(), k.Op("one")}, 2, pool.OpTTL(rdb).Milliseconds()).Int()
				require.NoError(t, err)
				return n
			}
			require.Equal(t, 2, run())
			require.Equal(t, 2, run(), "rerun: same answer")
			require.EqualValues(t, 3, rdb.ZCard(ctx, k.Dead()).Val(), "and nothing more removed")
			require.Equal(t, []string{"2", "3", "4"}, rdb.ZRange(ctx, k.Dead(), 0, -1).Val(), "the oldest went first")
			require.EqualValues(t, 3, rdb.HLen(ctx, k.Pool()).Val())
		})
	}
}

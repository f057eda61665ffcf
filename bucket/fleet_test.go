package bucket_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/bucket"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
)

// TestFleetDropsSilentClients: a client that stopped announcing leaves
// every other client's live set once LiveFor has passed, at the next
// announcement, whether or not that one prunes; its entry itself is
// removed within a few announcements, so the ZSET does not grow with the
// clients that ever lived.
func TestFleetDropsSilentClients(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			rdb := be.New(t)
			prefix := testutil.Prefix(t)
			const interval = 100 * time.Millisecond
			a := bucket.NewFleet(rdb, prefix, "a", interval)
			b := bucket.NewFleet(rdb, prefix, "b", interval)
			gone := bucket.NewFleet(rdb, prefix, "gone", interval)

			for _, f := range []*bucket.Fleet{gone, b, a} {
				_, err := f.Announce(ctx)
				require.NoError(t, err)
			}
			require.Equal(t, 3, a.Size(), "a sees the clients that just announced")
			time.Sleep(a.LiveFor() + 50*time.Millisecond)

			// b announces again; gone stays silent. Every announcement of
			// a from now on sees b and not gone.
			_, err := b.Announce(ctx)
			require.NoError(t, err)
			score := func() error { return rdb.ZScore(ctx, keys.Movers(prefix), "gone").Err() }
			pruned := -1
			for i := range 12 {
				changed, err := a.Announce(ctx)
				require.NoError(t, err)
				require.Equal(t, i == 0, changed, "announcement %d", i)
				require.Equal(t, 2, a.Size(), "announcement %d: a, b live; gone is not", i)
				if pruned < 0 && score() == redis.Nil {
					pruned = i
				}
			}
			require.GreaterOrEqual(t, pruned, 0, "the silent client's entry outlived 12 announcements")
		})
	}
}

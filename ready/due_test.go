package ready_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/bucket"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/pool"
	"github.com/redeq-go/redeq/ready"
)

// A fetch reports how late after its due time it took each moved job, and
// removes the due times of the ids it consumes, stale ones included, so
// the due hash never outlives the ready list's entries; a job put back in
// the ready list otherwise than by the mover has no known lateness.
func TestFetchReportsLatenessAndClearsDueTimes(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			rdb := be.New(t)
			prefix := testutil.Prefix(t)
			s := pool.NewStore(rdb, prefix)
			for i := range 3 {
				_, err := s.Add(ctx, &pool.Job{Topic: "t", ID: fmt.Sprint(i)}, pool.Placement{Limit: 100})
				require.NoError(t, err)
			}
			time.Sleep(2 * time.Millisecond)
			_, err := bucket.Move(ctx, rdb, prefix, "t", 0, 100)
			require.NoError(t, err)
			k := keys.ForBucket(prefix, "t", 0)
			require.EqualValues(t, 3, rdb.HLen(ctx, k.Due()).Val())
			// Deleted while ready: its entry is stale.
			require.NoError(t, rdb.HDel(ctx, k.Pool(), "1").Err())

			items, _, err := ready.Fetch(ctx, rdb, prefix, "t", 0, "me", 10, true)
			require.NoError(t, err)
			require.Len(t, items, 2)
			for _, it := range items {
				require.GreaterOrEqual(t, it.Late, time.Duration(0), "moved by the mover: lateness known")
			}
			require.Zero(t, rdb.Exists(ctx, k.Due()).Val(), "due times of taken and stale ids removed")

			// Back in the ready list without the mover (as a recovery does).
			require.NoError(t, rdb.HSet(ctx, k.State(), "0", "r").Err())
			require.NoError(t, rdb.RPush(ctx, k.Ready(), "0").Err())
			items, _, err = ready.Fetch(ctx, rdb, prefix, "t", 0, "me", 10, true)
			require.NoError(t, err)
			require.Len(t, items, 1)
			require.Equal(t, time.Duration(-1), items[0].Late)
		})
	}
}

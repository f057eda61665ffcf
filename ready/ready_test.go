package ready_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/bucket"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/pool"
	"github.com/redeq-go/redeq/ready"
)

func TestFetchMovesIntoInFlight(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			rdb := be.New(t)
			prefix := testutil.Prefix(t)
			s := pool.NewStore(rdb, prefix)
			for i := range 5 {
				_, err := s.Add(ctx, &pool.Job{Topic: "t", ID: fmt.Sprint(i), Body: []byte{byte(i)}}, pool.Placement{Limit: 100})
				require.NoError(t, err)
			}
			time.Sleep(2 * time.Millisecond)
			_, err := bucket.Move(ctx, rdb, prefix, "t", 0, 100)
			require.NoError(t, err)
			// Deleted while ready: dropped, never handed out.
			k := keys.ForBucket(prefix, "t", 0)
			require.NoError(t, rdb.HDel(ctx, k.Pool(), "1").Err())

			items, _, err := ready.Fetch(ctx, rdb, prefix, "t", 0, "me", 3, true)
			require.NoError(t, err)
			require.Len(t, items, 2) // "0" and "2"; "1" was gone
			require.Equal(t, "0", items[0].ID)
			h, body, err := pool.Decode([]byte(items[0].Envelope))
			require.NoError(t, err)
			require.Zero(t, h.Attempt)
			require.Equal(t, []byte{0}, body)
			require.Equal(t, []string{items[0].Member(), items[1].Member()}, rdb.ZRange(ctx, k.InFlight("me"), 0, -1).Val())
			require.NotEqual(t, items[0].Token, items[1].Token)

			items, _, err = ready.Fetch(ctx, rdb, prefix, "t", 0, "me", 10, true)
			require.NoError(t, err)
			require.Len(t, items, 2)
			items, _, err = ready.Fetch(ctx, rdb, prefix, "t", 0, "me", 10, true)
			require.NoError(t, err)
			require.Empty(t, items)
			require.EqualValues(t, 4, rdb.ZCard(ctx, k.InFlight("me")).Val())
			require.Zero(t, rdb.Exists(ctx, k.Ready()).Val())
		})
	}
}

// A fetch leaves in the consumer's in-flight set exactly one member per
// delivery, scored with its fetch time, however large the set grows: the
// fetch that takes a set past 16 members turns it into a skiplist on a
// real server, and nothing else of that shows. That holds for a set
// created by a fetch of more than 16 jobs and for one a later fetch takes
// past 16.
func TestFetchLeavesOneMemberPerDeliveryInALargeInFlightSet(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			rdb := be.New(t)
			prefix := testutil.Prefix(t)
			s := pool.NewStore(rdb, prefix)
			for i := range 60 {
				_, err := s.Add(ctx, &pool.Job{Topic: "t", ID: fmt.Sprintf("j%02d", i), Body: []byte{byte(i)}}, pool.Placement{Limit: 100})
				require.NoError(t, err)
			}
			time.Sleep(2 * time.Millisecond)
			_, err := bucket.Move(ctx, rdb, prefix, "t", 0, 100)
			require.NoError(t, err)
			k := keys.ForBucket(prefix, "t", 0)
			for consumer, batches := range map[string][]int{"at-once": {20}, "later": {10, 20}} {
				var want []string
				for _, n := range batches {
					items, _, err := ready.Fetch(ctx, rdb, prefix, "t", 0, consumer, n, true)
					require.NoError(t, err)
					require.Len(t, items, n)
					for _, it := range items {
						want = append(want, it.Member())
					}
				}
				got, err := rdb.ZRangeWithScores(ctx, k.InFlight(consumer), 0, -1).Result()
				require.NoError(t, err)
				var members []string
				for _, z := range got {
					members = append(members, z.Member.(string))
					require.Greater(t, z.Score, float64(time.Now().Add(-time.Minute).UnixMilli()), "member %q", z.Member)
				}
				require.ElementsMatch(t, want, members, consumer)
				if be.Name != "miniredis" {
					require.Equal(t, "skiplist", rdb.ObjectEncoding(ctx, k.InFlight(consumer)).Val(), consumer)
				}
			}
		})
	}
}

// A consumer with one free worker drops a run of stale entries (jobs
// deleted while ready) in few fetches, not one fetch an entry, and each
// fetch says whether the list may hold more.
func TestFetchSkipsRunsOfStaleEntries(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			rdb := be.New(t)
			prefix := testutil.Prefix(t)
			s := pool.NewStore(rdb, prefix)
			k := keys.ForBucket(prefix, "t", 0)
			const stale = 300
			for i := range stale {
				_, err := s.Add(ctx, &pool.Job{Topic: "t", ID: fmt.Sprint("gone", i)}, pool.Placement{Limit: 1000})
				require.NoError(t, err)
			}
			time.Sleep(2 * time.Millisecond)
			_, err := s.Add(ctx, &pool.Job{Topic: "t", ID: "live"}, pool.Placement{Limit: 1000})
			require.NoError(t, err)
			time.Sleep(2 * time.Millisecond)
			moved, err := bucket.Move(ctx, rdb, prefix, "t", 0, 1000)
			require.NoError(t, err)
			require.Equal(t, stale+1, moved.Moved)
			for i := range stale {
				id := fmt.Sprint("gone", i)
				require.NoError(t, rdb.HDel(ctx, k.Pool(), id).Err())
				require.NoError(t, rdb.HDel(ctx, k.State(), id).Err())
			}

			// The first fetch reads 256 entries, all stale: nothing, more.
			b, err := ready.FetchBatch(ctx, rdb, prefix, "t", 0, "me", 1, false)
			require.NoError(t, err)
			require.Empty(t, b.Items)
			require.True(t, b.More, "256 of 301 entries read: the list holds more")
			require.EqualValues(t, stale+1-256, rdb.LLen(ctx, k.Ready()).Val())
			// The second reads the rest and takes the live job.
			b, err = ready.FetchBatch(ctx, rdb, prefix, "t", 0, "me", 1, false)
			require.NoError(t, err)
			require.Len(t, b.Items, 1)
			require.Equal(t, "live", b.Items[0].ID)
			require.False(t, b.More, "the list is empty")
			require.Zero(t, rdb.LLen(ctx, k.Ready()).Val())

			// A full window of live entries says more; the last one does not.
			for _, id := range []string{"a", "b"} {
				_, err := s.Add(ctx, &pool.Job{Topic: "t", ID: id}, pool.Placement{Limit: 1000})
				require.NoError(t, err)
				time.Sleep(2 * time.Millisecond)
			}
			_, err = bucket.Move(ctx, rdb, prefix, "t", 0, 1000)
			require.NoError(t, err)
			b, err = ready.FetchBatch(ctx, rdb, prefix, "t", 0, "me", 1, false)
			require.NoError(t, err)
			require.Len(t, b.Items, 1)
			require.True(t, b.More)
			b, err = ready.FetchBatch(ctx, rdb, prefix, "t", 0, "me", 1, false)
			require.NoError(t, err)
			require.Len(t, b.Items, 1)
			require.False(t, b.More)
		})
	}
}

// TestReleaseMissesNoDeliveryWhileHeldOnesSettle: Release returns every
// delivery the caller does not hold, however many pages the in-flight set
// takes, while deliveries it holds leave the set meanwhile (Shutdown's
// rollback runs while the handlers it kept conclude their jobs): none is
// left in flight for the reaper.
func TestReleaseMissesNoDeliveryWhileHeldOnesSettle(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			rdb := be.New(t)
			prefix := testutil.Prefix(t)
			k := keys.ForBucket(prefix, "t", 0)
			const n, kept = 1200, 10
			members := make([]string, n)
			pipe := rdb.Pipeline()
			for i := range members {
				id := fmt.Sprint("j", i)
				members[i] = fmt.Sprint(i+1, ":", id)
				pipe.ZAdd(ctx, k.InFlight("me"), redis.Z{Score: float64(i), Member: members[i]})
				pipe.HSet(ctx, k.State(), id, fmt.Sprint(i+1, "@me"))
			}
			_, err := pipe.Exec(ctx)
			require.NoError(t, err)
			held := map[string]bool{}
			for _, m := range members[:kept] {
				held[m] = true
			}
			calls := 0
			got, err := ready.Release(ctx, rdb, prefix, "t", 0, "me", func(m string) bool {
				if calls++; calls == n/2+1 {
					// The held deliveries' handlers return and settle
					// their jobs while Release is past its first page.
					require.NoError(t, rdb.ZRem(ctx, k.InFlight("me"), members[:kept]).Err())
				}
				return held[m]
			})
			require.NoError(t, err)
			require.Equal(t, n-kept, got)
			require.Zero(t, rdb.ZCard(ctx, k.InFlight("me")).Val(), "deliveries left in flight")
			require.EqualValues(t, n-kept, rdb.LLen(ctx, k.Ready()).Val())
		})
	}
}

package bucket_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
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

// setup returns what a test of one backend needs: a client, a prefix of
// its own, and a job store under that prefix.
func setup(t *testing.T, be testutil.Backend) (context.Context, redis.UniversalClient, string, *pool.Store) {
	rdb := be.New(t)
	prefix := testutil.Prefix(t)
	return context.Background(), rdb, prefix, pool.NewStore(rdb, prefix)
}

// addDue adds n jobs of topic to bucket 0, due at once.
func addDue(t *testing.T, s *pool.Store, topic string, n int) {
	jobs := make([]*pool.Job, n)
	at := make([]pool.Placement, n)
	for i := range jobs {
		jobs[i] = &pool.Job{Topic: topic, ID: fmt.Sprint(i)}
		at[i] = pool.Placement{Bucket: 0, Limit: 1 << 30}
	}
	for start := 0; start < n; start += 200 {
		end := min(start+200, n)
		errs, err := s.AddMany(context.Background(), jobs[start:end], at[start:end])
		require.NoError(t, err)
		for _, e := range errs {
			require.NoError(t, e)
		}
	}
}

// TestConcurrentMoversMoveEachJobOnce: four movers on one bucket at once
// (as when a lock expires under a slow holder) move each due id exactly
// once, each call bounded by its batch.
func TestConcurrentMoversMoveEachJobOnce(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx, rdb, prefix, s := setup(t, be)
			n := 5000
			if !be.Real() {
				n = 1000 // miniredis runs Lua slowly; the real servers take the full load
			}
			addDue(t, s, "t", n)
			time.Sleep(2 * time.Millisecond)
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					for {
						res, err := bucket.Move(ctx, rdb, prefix, "t", 0, 100)
						require.NoError(t, err)
						require.LessOrEqual(t, res.Moved, 100)
						if res.Moved == 0 {
							return
						}
					}
				})
			}
			wg.Wait()
			k := keys.ForBucket(prefix, "t", 0)
			ids, err := rdb.LRange(ctx, k.Ready(), 0, -1).Result()
			require.NoError(t, err)
			require.Len(t, ids, n)
			seen := map[string]bool{}
			for _, id := range ids {
				require.False(t, seen[id], "moved twice: %s", id)
				seen[id] = true
			}
			require.Zero(t, rdb.ZCard(ctx, k.Scheduled()).Val())
		})
	}
}

// TestMoveNeverEarly: a job is not moved before its due time, and the move
// reports when the next one falls due.
func TestMoveNeverEarly(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx, rdb, prefix, s := setup(t, be)
			due, err := s.Add(ctx, &pool.Job{Topic: "t", ID: "a", Delay: 300 * time.Millisecond}, pool.Placement{Limit: 10})
			require.NoError(t, err)
			res, err := bucket.Move(ctx, rdb, prefix, "t", 0, 100)
			require.NoError(t, err)
			require.Zero(t, res.Moved)
			require.True(t, res.Next.Equal(due))
			require.True(t, res.Now.Before(due))
			for res.Moved == 0 {
				time.Sleep(res.Next.Sub(res.Now))
				res, err = bucket.Move(ctx, rdb, prefix, "t", 0, 100)
				require.NoError(t, err)
				if res.Moved == 0 {
					require.True(t, res.Now.Before(due))
				}
			}
			require.False(t, res.Now.Before(due))
			require.True(t, res.Next.IsZero())
		})
	}
}

// TestDeletedBeforeMoveNotDelivered: a due job deleted before the move is
// not moved; one deleted after the move leaves a stale ready entry that
// the fetch drops.
func TestDeletedBeforeMoveNotDelivered(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx, rdb, prefix, s := setup(t, be)
			for _, id := range []string{"a", "b", "c"} {
				_, err := s.Add(ctx, &pool.Job{Topic: "t", ID: id}, pool.Placement{Limit: 10})
				require.NoError(t, err)
			}
			_, err := s.Delete(ctx, "t", "a", 0)
			require.NoError(t, err)
			time.Sleep(2 * time.Millisecond)
			res, err := bucket.Move(ctx, rdb, prefix, "t", 0, 100)
			require.NoError(t, err)
			require.Equal(t, 2, res.Moved)
			_, err = s.Delete(ctx, "t", "b", 0) // now in the ready list
			require.NoError(t, err)
			items, _, err := ready.Fetch(ctx, rdb, prefix, "t", 0, "me", 10, true)
			require.NoError(t, err)
			require.Len(t, items, 1)
			require.Equal(t, "c", items[0].ID)
			k := keys.ForBucket(prefix, "t", 0)
			require.Zero(t, rdb.LLen(ctx, k.Ready()).Val(), "the stale entry of b is gone too")
		})
	}
}

// TestMoveKeepsEachDueTimeInItsState: a move in the current format marks
// each id it moves ready with the due time it was moved at ("r<due ms>",
// the score it left), in chunks past the first thousand ids too, and
// writes no other key per job; one in the older format writes "r" and the
// due time in the due HASH, as clients of the version before read it. A
// rerun after a lost reply finds them moved and moves nothing again.
func TestMoveKeepsEachDueTimeInItsState(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			for _, current := range []bool{true, false} {
				ctx, rdb, prefix, s := setup(t, be)
				const n = 2500
				addDue(t, s, "t", n)
				k := keys.ForBucket(prefix, "t", 0)
				states, dues := map[string]string{}, map[string]string{}
				for _, z := range rdb.ZRangeWithScores(ctx, k.Scheduled(), 0, -1).Val() {
					id, due := z.Member.(string), fmt.Sprintf("%d", int64(z.Score))
					if current {
						states[id] = "r" + due
					} else {
						states[id], dues[id] = "r", due
					}
				}
				require.Len(t, states, n)
				time.Sleep(2 * time.Millisecond)
				move := bucket.Move
				if !current {
					move = bucket.MoveOlderFormat
				}
				res, err := move(ctx, rdb, prefix, "t", 0, 5000)
				require.NoError(t, err)
				require.Equal(t, n, res.Moved)
				require.Equal(t, states, rdb.HGetAll(ctx, k.State()).Val())
				want := []string{k.Pool(), k.Ready(), k.State()}
				if !current {
					require.Equal(t, dues, rdb.HGetAll(ctx, k.Due()).Val())
					want = append(want, k.Due())
				}
				var kinds []string
				for _, key := range testutil.Keys(t, rdb, prefix) {
					if !strings.Contains(key, ":op:") { // the add runs' replies
						kinds = append(kinds, key)
					}
				}
				require.ElementsMatch(t, want, kinds, "no key per job beside the state (current: %v)", current)
				before := testutil.Dump(t, rdb, prefix)

				res, err = move(ctx, rdb, prefix, "t", 0, 5000)
				require.NoError(t, err)
				require.Zero(t, res.Moved, "the rerun moves nothing again")
				require.Equal(t, before, testutil.Dump(t, rdb, prefix))
			}
		})
	}
}

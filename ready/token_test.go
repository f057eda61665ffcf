package ready_test

import (
	"context"
	"fmt"
	"strings"
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

// makeReady adds job id to bucket 0 of topic t and moves it to the ready
// list.
func makeReady(t *testing.T, rdb redis.UniversalClient, prefix, id string) {
	t.Helper()
	ctx := context.Background()
	_, err := pool.NewStore(rdb, prefix).Add(ctx, &pool.Job{Topic: "t", ID: id}, pool.Placement{Limit: 100})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, err := bucket.Move(ctx, rdb, prefix, "t", 0, 100)
		require.NoError(t, err)
		return strings.HasPrefix(rdb.HGet(ctx, keys.ForBucket(prefix, "t", 0).State(), id).Val(), "r") // ready
	}, 5*time.Second, time.Millisecond)
}

// TestFetchTokenUniqueAcrossDataLoss: when Redis loses every key of a
// bucket (a restart without persistence) and the same job is added and
// fetched again by the same consumer, the new delivery gets a token of its
// own: a release (or outcome) of the old delivery leaves the new one be.
func TestFetchTokenUniqueAcrossDataLoss(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			rdb := be.New(t)
			prefix := testutil.Prefix(t)
			k := keys.ForBucket(prefix, "t", 0)
			makeReady(t, rdb, prefix, "x")
			old, _, err := ready.Fetch(ctx, rdb, prefix, "t", 0, "me", 1, true)
			require.NoError(t, err)
			require.Len(t, old, 1)
			for _, key := range testutil.Keys(t, rdb, prefix) {
				require.NoError(t, rdb.Del(ctx, key).Err())
			}
			makeReady(t, rdb, prefix, "x")
			cur, _, err := ready.Fetch(ctx, rdb, prefix, "t", 0, "me", 1, true)
			require.NoError(t, err)
			require.Len(t, cur, 1)
			require.NotEqual(t, old[0].Token, cur[0].Token)

			n, err := ready.ReleaseMembers(ctx, rdb, prefix, "t", 0, "me", []string{old[0].Member()})
			require.NoError(t, err)
			require.Zero(t, n)
			require.Equal(t, cur[0].Token+"@me", rdb.HGet(ctx, k.State(), "x").Val())
			require.Equal(t, []string{cur[0].Member()}, rdb.ZRange(ctx, k.InFlight("me"), 0, -1).Val())
			require.Zero(t, rdb.LLen(ctx, k.Ready()).Val())
		})
	}
}

// rerun sends every command running script s twice, as go-redis does when
// the first reply is lost, and hands the client the second reply.
type rerun struct{ s testutil.Script }

func (h rerun) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h rerun) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.s.RunBy(cmd) {
			if err := next(ctx, cmd); err != nil {
				return err
			}
		}
		return next(ctx, cmd)
	}
}

func (h rerun) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestFetchRerunKeepsDeliveriesApart: a fetch run twice (its first reply
// lost) gives each id it took a delivery of its own, though both runs
// number their takes alike: the release of the deliveries the consumer
// never heard of returns exactly those to the ready list, and the one it
// holds stays its own.
func TestFetchRerunKeepsDeliveriesApart(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			rdb := be.New(t)
			prefix := testutil.Prefix(t)
			k := keys.ForBucket(prefix, "t", 0)
			makeReady(t, rdb, prefix, "a")
			makeReady(t, rdb, prefix, "b")
			twice := be.New(t)
			twice.AddHook(rerun{testutil.LoadScript(t, "fetch.lua")})
			items, _, err := ready.Fetch(ctx, twice, prefix, "t", 0, "me", 1, true)
			require.NoError(t, err)
			require.Len(t, items, 1)
			require.Equal(t, "b", items[0].ID, "the first run took a")
			require.EqualValues(t, 2, rdb.ZCard(ctx, k.InFlight("me")).Val())

			n, err := ready.Release(ctx, rdb, prefix, "t", 0, "me", func(m string) bool { return m == items[0].Member() })
			require.NoError(t, err)
			require.Equal(t, 1, n)
			require.Equal(t, []string{"a"}, rdb.LRange(ctx, k.Ready(), 0, -1).Val())
			require.Equal(t, "r", rdb.HGet(ctx, k.State(), "a").Val())
			require.Equal(t, items[0].Token+"@me", rdb.HGet(ctx, k.State(), "b").Val())
			require.Equal(t, []string{items[0].Member()}, rdb.ZRange(ctx, k.InFlight("me"), 0, -1).Val())
		})
	}
}

// TestFetchBoundedAmongManyReady: with 100,000 ids ready, half in each
// format of the job state, a fetch takes at most MaxFetch of them, in
// order, each with a token of its own, and leaves the rest in the list.
func TestFetchBoundedAmongManyReady(t *testing.T) {
	for _, be := range testutil.RealBackends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			rdb := be.New(t)
			prefix := testutil.Prefix(t)
			k := keys.ForBucket(prefix, "t", 0)
			makeReady(t, rdb, prefix, "seed")
			env := rdb.HGet(ctx, k.Pool(), "seed").Val()
			require.NoError(t, rdb.Del(ctx, k.Ready()).Err())
			const n = 100_000
			for from := 0; from < n; from += 10_000 {
				pipe := rdb.Pipeline()
				ids := make([]any, 0, 10_000)
				for i := from; i < from+10_000; i++ {
					id := fmt.Sprint("j", i)
					pipe.HSet(ctx, k.Pool(), id, env)
					st := "r" // the older format, with no due time kept
					if i%2 == 1 {
						st = "r1700000000000" // the current one
					}
					pipe.HSet(ctx, k.State(), id, st)
					ids = append(ids, id)
				}
				pipe.RPush(ctx, k.Ready(), ids...)
				_, err := pipe.Exec(ctx)
				require.NoError(t, err)
			}
			seen := map[string]bool{}
			for round := range 2 {
				items, _, err := ready.Fetch(ctx, rdb, prefix, "t", 0, "me", n, false)
				require.NoError(t, err)
				require.Len(t, items, ready.MaxFetch)
				require.Equal(t, fmt.Sprint("j", round*ready.MaxFetch), items[0].ID)
				for i, it := range items {
					require.Equal(t, i%2 == 1, it.Late > 0, "%s: lateness known in the current format only", it.ID)
					require.False(t, seen[it.Token], "token %s given twice", it.Token)
					seen[it.Token] = true
				}
			}
			require.EqualValues(t, n-2*ready.MaxFetch, rdb.LLen(ctx, k.Ready()).Val())
			require.EqualValues(t, 2*ready.MaxFetch, rdb.ZCard(ctx, k.InFlight("me")).Val())
		})
	}
}

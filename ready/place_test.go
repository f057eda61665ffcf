package ready_test

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/bucket"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/pool"
	"github.com/redeq-go/redeq/ready"
)

// places reads a ready list with each entry's place: its index plus the
// head count of keys.ReadyHeadField.
func places(t *testing.T, rdb redis.UniversalClient, k keys.Bucket) (ids []string, at []int64) {
	t.Helper()
	ctx := context.Background()
	ids, err := rdb.LRange(ctx, k.Ready(), 0, -1).Result()
	require.NoError(t, err)
	var head int64
	if v, err := rdb.HGet(ctx, k.State(), keys.ReadyHeadField).Result(); err == nil {
		head, err = strconv.ParseInt(v, 10, 64)
		require.NoError(t, err)
	} else {
		require.ErrorIs(t, err, redis.Nil)
	}
	for i := range ids {
		at = append(at, head+int64(i))
	}
	return ids, at
}

// TestReadyEntriesKeepTheirPlaces: an entry of a ready list keeps its
// place while it waits, whatever fetches take from the head (live and
// stale entries), give-backs push at the head and the mover pushes at the
// tail; the places of a list rise from head to tail, so a job given back
// takes a place before every entry that waited.
func TestReadyEntriesKeepTheirPlaces(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			rdb := be.New(t)
			prefix := testutil.Prefix(t)
			s := pool.NewStore(rdb, prefix)
			k := keys.ForBucket(prefix, "t", 0)
			add := func(from, n int) {
				for i := from; i < from+n; i++ {
					_, err := s.Add(ctx, &pool.Job{Topic: "t", ID: fmt.Sprintf("j%03d", i)}, pool.Placement{Limit: 10_000})
					require.NoError(t, err)
				}
				for {
					st, err := rdb.ZCard(ctx, k.Scheduled()).Result()
					require.NoError(t, err)
					if st == 0 {
						return
					}
					_, err = bucket.Move(ctx, rdb, prefix, "t", 0, 1000)
					require.NoError(t, err)
				}
			}
			fetch := func(n int) []string {
				items, _, err := ready.Fetch(ctx, rdb, prefix, "t", 0, "me", n, true)
				require.NoError(t, err)
				var ms []string
				for _, it := range items {
					ms = append(ms, it.Member())
				}
				return ms
			}
			add(0, 100)
			ids, at := places(t, rdb, k)
			was := map[string]int64{}
			for i, id := range ids {
				was[id] = at[i]
			}

			taken := fetch(30)
			_, err := ready.ReleaseMembers(ctx, rdb, prefix, "t", 0, "me", taken[:20])
			require.NoError(t, err)
			add(100, 20)
			// Stale entries at the head are trimmed too.
			for _, id := range []string{"j030", "j031", "j032"} {
				_, err := s.Delete(ctx, "t", id, 0)
				require.NoError(t, err)
			}
			fetch(25) // the 20 given back, 3 stale entries dropped, 5 more
			more := fetch(4)
			_, err = ready.ReleaseMembers(ctx, rdb, prefix, "t", 0, "me", append(taken[20:], more...))
			require.NoError(t, err)

			ids, at = places(t, rdb, k)
			require.NotEmpty(t, ids)
			moved := map[string]bool{}
			for _, m := range append(taken, more...) {
				_, id, _ := strings.Cut(m, ":")
				moved[id] = true
			}
			for i, id := range ids {
				if i > 0 {
					require.Greater(t, at[i], at[i-1], "places rise from head to tail")
				}
				if p, ok := was[id]; ok && !moved[id] {
					require.Equal(t, p, at[i], "%s waited and moved to another place", id)
				}
			}
			i := slices.Index(ids, "j099")
			require.GreaterOrEqual(t, i, 0)
			require.Equal(t, was["j099"], at[i])
		})
	}
}

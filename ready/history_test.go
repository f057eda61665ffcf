package ready_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/bucket"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/pool"
	"github.com/redeq-go/redeq/ready"
)

// A fetch adds each job it takes to the lateness counter of this minute
// whose bounds hold its lateness, in the bucket's history key, which
// expires; jobs without a known due time are not counted.
func TestFetchRecordsLatenessHistory(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			rdb := be.New(t)
			prefix := testutil.Prefix(t)
			s := pool.NewStore(rdb, prefix)
			for i := range 4 {
				_, err := s.Add(ctx, &pool.Job{Topic: "t", ID: fmt.Sprint(i)}, pool.Placement{Limit: 100})
				require.NoError(t, err)
			}
			time.Sleep(2 * time.Millisecond)
			_, err := bucket.Move(ctx, rdb, prefix, "t", 0, 100)
			require.NoError(t, err)
			k := keys.ForBucket(prefix, "t", 0)
			before, err := rdb.Time(ctx).Result()
			require.NoError(t, err)
			now := before.UnixMilli()
			// 1: 3 s late (the 2..5 s counter); 2: 2 min late (over every
			// bound); 3: no known due time (as after a recovery).
			require.NoError(t, rdb.HSet(ctx, k.Due(), "1", now-3000, "2", now-120000).Err())
			require.NoError(t, rdb.HDel(ctx, k.Due(), "3").Err())

			items, _, err := ready.Fetch(ctx, rdb, prefix, "t", 0, "me", 10, true)
			require.NoError(t, err)
			require.Len(t, items, 4)
			after, err := rdb.Time(ctx).Result()
			require.NoError(t, err)

			var got [keys.HistoryFields]int64
			for m := before.Unix() / 60; m <= after.Unix()/60; m++ {
				v, err := rdb.Get(ctx, k.History(m)).Result()
				if err != nil {
					continue
				}
				for i := range got {
					if len(v) >= 4*(i+1) {
						got[i] += int64(binary.BigEndian.Uint32([]byte(v[4*i:])))
					}
				}
				ttl := rdb.TTL(ctx, k.History(m)).Val()
				require.Greater(t, ttl, 80*time.Minute)
				require.LessOrEqual(t, ttl, time.Duration(keys.HistoryTTLSeconds)*time.Second)
			}
			var late int64
			for i := keys.HistLate; i < keys.HistoryFields; i++ {
				late += got[i]
			}
			require.EqualValues(t, 3, late, "jobs with a known due time")
			require.EqualValues(t, 1, got[keys.HistLate+11], "3 s late: over 2 s, at most 5 s (%v)", got)
			require.EqualValues(t, 1, got[keys.HistoryFields-1], "2 min late: over every bound")
			require.Zero(t, got[keys.HistProcessed], "a fetch processes nothing")
			require.Equal(t, int64(5000), keys.HistLateBoundsMs[11])
		})
	}
}

// On a server without BITFIELD (a plain miniredis) a fetch still takes
// its jobs: history is skipped, never an error.
func TestFetchWithoutBitfieldRecordsNothing(t *testing.T) {
	ctx := context.Background()
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { rdb.Close() })
	prefix := testutil.Prefix(t)
	_, err := pool.NewStore(rdb, prefix).Add(ctx, &pool.Job{Topic: "t", ID: "1"}, pool.Placement{Limit: 100})
	require.NoError(t, err)
	time.Sleep(2 * time.Millisecond)
	_, err = bucket.Move(ctx, rdb, prefix, "t", 0, 100)
	require.NoError(t, err)
	items, _, err := ready.Fetch(ctx, rdb, prefix, "t", 0, "me", 10, true)
	require.NoError(t, err)
	require.Len(t, items, 1)
	require.GreaterOrEqual(t, items[0].Late, time.Duration(0))
	for _, k := range m.Keys() {
		require.NotContains(t, k, ":hist:")
	}
}

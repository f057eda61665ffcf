package ready_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/bucket"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/pool"
	"github.com/redeq-go/redeq/ready"
)

// The mover keeps each moved job's due time in its state ("r<due ms>"),
// the one field a ready job has anyway, and a fetch reports from it how
// late after its due time it took each job; a job put back in the ready
// list otherwise than by the mover ("r") has no known lateness. Neither
// writes a key per job beside the state, and a fetch writes no history:
// its consumer's settle counts the lateness (ack/settle.lua).
func TestFetchReportsLatenessFromTheMoversDueTime(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			rdb := be.New(t)
			prefix := testutil.Prefix(t)
			s := pool.NewStore(rdb, prefix)
			var dues []int64
			for i := range 3 {
				due, err := s.Add(ctx, &pool.Job{Topic: "t", ID: fmt.Sprint(i)}, pool.Placement{Limit: 100})
				require.NoError(t, err)
				dues = append(dues, due.UnixMilli())
			}
			time.Sleep(2 * time.Millisecond)
			_, err := bucket.Move(ctx, rdb, prefix, "t", 0, 100)
			require.NoError(t, err)
			k := keys.ForBucket(prefix, "t", 0)
			states, err := rdb.HGetAll(ctx, k.State()).Result()
			require.NoError(t, err)
			for i, due := range dues {
				require.Equal(t, "r"+strconv.FormatInt(due, 10), states[fmt.Sprint(i)], "the due time the job was moved at")
			}
			// 2 was due 3 s before the mover moved it.
			tm, err := rdb.Time(ctx).Result()
			require.NoError(t, err)
			require.NoError(t, rdb.HSet(ctx, k.State(), "2", "r"+strconv.FormatInt(tm.UnixMilli()-3000, 10)).Err())
			// Deleted while ready: its entry is stale.
			require.NoError(t, rdb.HDel(ctx, k.Pool(), "1").Err())

			items, _, err := ready.Fetch(ctx, rdb, prefix, "t", 0, "me", 10, true)
			require.NoError(t, err)
			require.Len(t, items, 2)
			require.Equal(t, "0", items[0].ID)
			require.GreaterOrEqual(t, items[0].Late, time.Duration(0), "moved by the mover: lateness known")
			require.Less(t, items[0].Late, time.Minute)
			require.Equal(t, "2", items[1].ID)
			require.GreaterOrEqual(t, items[1].Late, 3*time.Second)
			require.Less(t, items[1].Late, time.Minute)

			// Back in the ready list without the mover (as a recovery does).
			require.NoError(t, rdb.HSet(ctx, k.State(), "0", "r").Err())
			require.NoError(t, rdb.RPush(ctx, k.Ready(), "0").Err())
			items, _, err = ready.Fetch(ctx, rdb, prefix, "t", 0, "me", 10, true)
			require.NoError(t, err)
			require.Len(t, items, 1)
			require.Equal(t, time.Duration(-1), items[0].Late)

			for _, key := range testutil.Keys(t, rdb, prefix) {
				require.NotContains(t, key, ":hist:", "a fetch writes no history")
				require.False(t, strings.HasSuffix(key, ":due"), "no key of due times beside the states")
			}
		})
	}
}

// A fetch takes the jobs of both formats of the job state, whatever the
// namespace writes: the older one ("r" with the due time in the due HASH)
// and the current one ("r<due ms>"), with the lateness of each, and
// leaves no due time behind for the ids it consumed. The fetch of the
// older version takes only the older format and drops an entry of the
// current one as stale, which is why the namespace writes the current
// format only after UpgradeFormat.
func TestFetchReadsBothFormats(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			rdb := be.New(t)
			prefix := testutil.Prefix(t)
			s := pool.NewStore(rdb, prefix)
			k := keys.ForBucket(prefix, "t", 0)
			add := func(id string) {
				_, err := s.Add(ctx, &pool.Job{Topic: "t", ID: id}, pool.Placement{Limit: 100})
				require.NoError(t, err)
				time.Sleep(2 * time.Millisecond)
			}
			add("old")
			_, err := bucket.MoveOlderFormat(ctx, rdb, prefix, "t", 0, 100)
			require.NoError(t, err)
			add("new")
			_, err = bucket.Move(ctx, rdb, prefix, "t", 0, 100)
			require.NoError(t, err)
			require.Equal(t, "r", rdb.HGet(ctx, k.State(), "old").Val())
			require.True(t, strings.HasPrefix(rdb.HGet(ctx, k.State(), "new").Val(), "r1"))

			items, _, err := ready.Fetch(ctx, rdb, prefix, "t", 0, "me", 10, true)
			require.NoError(t, err)
			require.Len(t, items, 2)
			for _, it := range items {
				require.GreaterOrEqual(t, it.Late, time.Duration(0), "%s: lateness known", it.ID)
				require.Less(t, it.Late, time.Minute)
			}
			require.Zero(t, rdb.Exists(ctx, k.Due()).Val(), "the older format's due time is used")

			// The older version's fetch: the current format is lost to it.
			add("new2")
			_, err = bucket.Move(ctx, rdb, prefix, "t", 0, 100)
			require.NoError(t, err)
			b, err := ready.FetchOlderFormat(ctx, rdb, prefix, "t", 0, "old", 10, true)
			require.NoError(t, err)
			require.Empty(t, b.Items)
			require.Zero(t, rdb.LLen(ctx, k.Ready()).Val(), "dropped from the ready list")
			require.True(t, strings.HasPrefix(rdb.HGet(ctx, k.State(), "new2").Val(), "r"), "left ready, in no list")
		})
	}
}

// A job put back in the ready list by a rollback has no known lateness,
// even when the older format left a due time of an earlier job of its id
// behind (the job was moved in that format, deleted and added again, and
// moved in the current one): the rollback clears its due time.
func TestRolledBackJobHasNoLatenessFromAnOlderDueTime(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			c := be.New(t)
			prefix := testutil.Prefix(t)
			s := pool.NewStore(c, prefix)
			k := keys.ForBucket(prefix, "t", 0)
			add := func() {
				_, err := s.Add(ctx, &pool.Job{Topic: "t", ID: "x"}, pool.Placement{Limit: 100})
				require.NoError(t, err)
				time.Sleep(2 * time.Millisecond)
			}
			add()
			_, err := bucket.MoveOlderFormat(ctx, c, prefix, "t", 0, 100)
			require.NoError(t, err)
			_, err = s.Delete(ctx, "t", "x", 0)
			require.NoError(t, err)
			time.Sleep(200 * time.Millisecond) // the older due time is that much before the next
			add()
			_, err = bucket.Move(ctx, c, prefix, "t", 0, 100)
			require.NoError(t, err)
			require.Equal(t, []string{"x", "x"}, c.LRange(ctx, k.Ready(), 0, -1).Val())
			require.True(t, c.HExists(ctx, k.Due(), "x").Val(), "the scenario: an older due time left behind")

			b, err := ready.FetchBatch(ctx, c, prefix, "t", 0, "me", 1, true)
			require.NoError(t, err)
			require.Len(t, b.Items, 1)
			n, err := ready.ReleaseMembers(ctx, c, prefix, "t", 0, "me", []string{b.Items[0].Member()})
			require.NoError(t, err)
			require.Equal(t, 1, n)
			require.False(t, c.HExists(ctx, k.Due(), "x").Val(), "the rollback clears the due time")
			b, err = ready.FetchBatch(ctx, c, prefix, "t", 0, "me", 1, true)
			require.NoError(t, err)
			require.Len(t, b.Items, 1)
			require.Equal(t, time.Duration(-1), b.Items[0].Late, "a job put back by a rollback has no known lateness")
		})
	}
}

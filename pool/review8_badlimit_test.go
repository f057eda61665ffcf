package pool_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/pool"
)

// TestReview8BadLimitLoneRunWritesNothing: add.lua given a pool limit
// that is no number fails; a run of many jobs fails before it writes, but
// a run of one has written its op record (the job's due time) first and
// leaves it. The rerun go-redis sends of that call then finds the record
// and answers "added at <due>" for a job that was never stored.
func TestReview8BadLimitLoneRunWritesNothing(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			prefix := testutil.Prefix(t)
			k := keys.ForBucket(prefix, "t", 0)
			sc := redis.NewScript(pool.AddSource)
			for i, limit := range []string{"abc", ""} {
				for _, n := range []int{2, 1} {
					op := fmt.Sprint("lim", i, "-", n)
					args := []any{limit, "ch", "w", 30000}
					for j := range n {
						id := fmt.Sprint(op, "-", j)
						args = append(args, id, id, "|0|0||\n", "b", "1000", "")
					}
					run := func() ([]any, error) {
						return sc.Run(ctx, c, []string{k.Pool(), k.Scheduled(), k.Op(op)}, args...).Slice()
					}
					before := testutil.Dump(t, c, prefix)
					_, err := run()
					require.Error(t, err, "limit %q, %d jobs", limit, n)
					assert.Equal(t, before, testutil.Dump(t, c, prefix), "limit %q, %d jobs: refused (%v) after writing", limit, n, err)
					v, err := run() // the rerun
					if err == nil {
						stored := c.HExists(ctx, k.Pool(), fmt.Sprint(op, "-0")).Val()
						assert.True(t, stored, "limit %q, %d jobs: the rerun of a refused call answers %v (added), and no job is stored", limit, n, v)
					}
				}
			}
		})
	}
}

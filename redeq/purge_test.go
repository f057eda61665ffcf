package redeq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/bucket"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// PurgeDead empties a topic's dead set in every bucket, more than one
// script call's worth in one bucket, with the jobs' envelopes, reasons and
// last errors, and leaves the other jobs alone.
func TestPurgeDeadEmptiesTheDeadSet(t *testing.T) {
	t.Parallel()
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			cfg := testutil.Config(t)
			cfg.Concurrency = 4
			e := setup(t, be, cfg)
			ctx := context.Background()
			for i := range 4 {
				require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint("d", i)}))
			}
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "keep", Delay: time.Hour}))
			startWith(t, e.c, newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
				return redeq.SkipRetry(errors.New("bad " + job.ID))
			}))
			testutil.Eventually(t, 10*time.Second, "dead", func() bool { return stats(t, e.c, "t").Dead == 4 })
			require.NoError(t, e.c.Shutdown(ctx))

			// More than one call's worth (500) in one bucket.
			var n0 []string
			for i := 0; len(n0) < 1100; i++ {
				if id := fmt.Sprint("x", i); bucket.Of(id, 4) == 0 {
					n0 = append(n0, id)
				}
			}
			k := keys.ForBucket(e.cfg.Prefix, "t", 0)
			pipe := e.rdb.Pipeline()
			for _, id := range n0 {
				pipe.HSet(ctx, k.Pool(), id, "1|0|0|0||||\nx")
				pipe.ZAdd(ctx, k.Dead(), redis.Z{Score: 1, Member: id})
			}
			_, err := pipe.Exec(ctx)
			require.NoError(t, err)

			n, err := e.c.PurgeDead(ctx, "t")
			require.NoError(t, err)
			require.Equal(t, 1104, n)
			st := stats(t, e.c, "t")
			require.Zero(t, st.Dead)
			require.EqualValues(t, 1, st.Pool, "the scheduled job stays")
			for _, key := range testutil.Keys(t, e.rdb, e.cfg.Prefix) {
				require.False(t, strings.HasSuffix(key, ":reasons") || strings.HasSuffix(key, ":errors"), "%s left", key)
			}
			n, err = e.c.PurgeDead(ctx, "t")
			require.NoError(t, err)
			require.Zero(t, n)

			_, err = e.c.PurgeDead(ctx, "never")
			require.ErrorIs(t, err, redeq.ErrUnknownTopic)
			_, err = e.c.PurgeDead(ctx, "bad topic")
			require.ErrorIs(t, err, redeq.ErrInvalidJob)
		})
	}
}

package pool_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/pool"
)

// TestAddWakesOnEarliest: Add wakes the bucket's mover exactly when the
// new job becomes the bucket's earliest, and stores the due time asked.
func TestAddWakesOnEarliest(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			prefix := testutil.Prefix(t)
			s := pool.NewStore(c, prefix)
			ps := c.Subscribe(ctx, keys.WakeChannel(prefix))
			defer ps.Close()
			_, err := ps.Receive(ctx) // subscribed
			require.NoError(t, err)

			base := time.Now().Add(time.Hour).Truncate(time.Millisecond)
			at := pool.Placement{Bucket: 0, Limit: 100}
			for i, off := range []time.Duration{10, 20, 5, 30, 1} {
				job := &pool.Job{Topic: "t", ID: fmt.Sprint("j", i), Body: []byte("b"), RunAt: base.Add(off * time.Second)}
				due, err := s.Add(ctx, job, at)
				require.NoError(t, err)
				require.Equal(t, job.RunAt, due)
			}
			// A mark published from the bucket's node arrives after its wakes.
			pub := redis.Cmdable(c)
			if cc, ok := c.(*redis.ClusterClient); ok {
				pub, err = cc.MasterForKey(ctx, keys.ForBucket(prefix, "t", 0).Pool())
				require.NoError(t, err)
			}
			require.NoError(t, pub.Publish(ctx, keys.WakeChannel(prefix), "end").Err())
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			var got []string
			for {
				m, err := ps.ReceiveMessage(rctx)
				require.NoError(t, err)
				if m.Payload == "end" {
					break
				}
				got = append(got, m.Payload)
			}
			addr := keys.Address("t", 0)
			require.Equal(t, []string{addr, addr, addr}, got, "jobs due at +10s, +5s and +1s are each the earliest")
		})
	}
}

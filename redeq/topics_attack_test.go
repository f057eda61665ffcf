package redeq_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/redeq"
)

// TestTopicsListsEveryWayATopicIsUsed: Topics lists a topic whatever first
// used it: AddBatch, Put, a listener started, a broadcast job, a
// schedule's tick.
func TestTopicsListsEveryWayATopicIsUsed(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		require.NoError(t, e.c.AddBatch(ctx, []*redeq.Job{{Topic: "by-batch", ID: "1", Delay: time.Hour}}))
		require.NoError(t, e.c.Put(ctx, &redeq.Job{Topic: "by-put", ID: "1", Delay: time.Hour}))
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "by-broadcast", ID: "1", Delay: time.Hour, Broadcast: true}))
		require.NoError(t, e.c.PutSchedule(ctx, redeq.Schedule{Name: "s", Topic: "by-schedule", Spec: "@every 1s"}))
		startWith(t, e.c, newListener("by-listener", nil))
		want := []string{"by-batch", "by-broadcast", "by-listener", "by-put", "by-schedule"}
		waitFor(t, 10*time.Second, "every topic listed", func() bool {
			ts, err := e.c.Topics(ctx)
			require.NoError(t, err)
			got := map[string]bool{}
			for _, ti := range ts {
				got[ti.Name] = true
			}
			for _, w := range want {
				if !got[w] {
					t.Logf("missing %s in %v", w, got)
					return false
				}
			}
			return true
		})
	})
}

package redeq_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestReview10HugeTimeoutsOpTTLRefused: the op TTL is the window plus the
// client's ReadTimeout plus DialTimeout plus 5 s, and the scripts refuse
// one past a day. A client whose DialTimeout (or ReadTimeout) is a day
// (a "never give up dialing" setting) makes every Add, Delete and
// Reschedule fail with the script's "op TTL ... is no whole number of ms
// from 1 to a day", though go-redis accepts the options.
func TestReview10HugeTimeoutsOpTTLRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  func(o *redis.Options)
	}{
		{"DialTimeout 24h", func(o *redis.Options) { o.DialTimeout = 24 * time.Hour }},
		{"ReadTimeout 24h", func(o *redis.Options) { o.ReadTimeout = 24 * time.Hour }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, be := range testutil.RealBackends(t) {
				if be.Name != "redis" {
					continue
				}
				o := &redis.Options{Addr: be.Addrs[0]}
				tc.opt(o)
				rc := redis.NewClient(o)
				t.Cleanup(func() { rc.Close() })
				ctx := context.Background()
				c, err := redeq.New(rc, testutil.Config(t))
				if err != nil {
					t.Logf("New refused the client: %v", err)
					return
				}
				err = c.Add(ctx, &redeq.Job{Topic: "t", ID: "1", Body: []byte("b"), Delay: time.Hour})
				assert.NoError(t, err, "Add")
				err = c.AddBatch(ctx, []*redeq.Job{{Topic: "t", ID: "2", Delay: time.Hour}})
				assert.NoError(t, err, "AddBatch")
				err = c.Reschedule(ctx, "t", "1", time.Now().Add(2*time.Hour))
				assert.NoError(t, err, "Reschedule")
				_, err = c.Delete(ctx, "t", "1")
				assert.NoError(t, err, "Delete")
			}
		})
	}
}

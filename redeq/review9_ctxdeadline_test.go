package redeq_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestReview9CallerDeadlineHonoured: Add promises that when the caller's
// ctx ends first it returns ctx's error (the Committer selects on ctx).
// But go-redis cuts a read at the ctx deadline only with
// ContextTimeoutEnabled, which go-redis leaves off by default: the calls
// Add and AddBatch make directly (the topic record of a client's first
// Add to a topic, and every RecordEvery; AddBatch's pipelines) wait for
// the server's reply, up to ReadTimeout, past the caller's deadline. Here
// the server is busy for 2 s (DEBUG SLEEP) and the callers give 300 ms.
func TestReview9CallerDeadlineHonoured(t *testing.T) {
	srv := testutil.StartServer(t, "--enable-debug-command", "yes")
	rc := srv.Client(nil) // go-redis defaults
	admin := srv.Client(nil)
	ctx := context.Background()
	cfg := testutil.Config(t)
	c, err := redeq.New(rc, cfg)
	require.NoError(t, err)
	require.NoError(t, c.Add(ctx, &redeq.Job{Topic: "warm", ID: "0", Delay: time.Hour}))
	require.NoError(t, admin.Ping(ctx).Err())

	busy := func() {
		go admin.Do(context.Background(), "DEBUG", "SLEEP", "2")
		time.Sleep(100 * time.Millisecond)
	}
	type call struct {
		name string
		run  func(ctx context.Context) error
	}
	for _, tc := range []call{
		{"Add to a new topic", func(ctx context.Context) error {
			return c.Add(ctx, &redeq.Job{Topic: "fresh", ID: "1", Delay: time.Hour})
		}},
		{"AddBatch", func(ctx context.Context) error {
			return c.AddBatch(ctx, []*redeq.Job{{Topic: "warm", ID: "2", Delay: time.Hour}})
		}},
	} {
		busy()
		cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		start := time.Now()
		err := tc.run(cctx)
		took := time.Since(start)
		cancel()
		t.Logf("%s: %v after %v", tc.name, err, took.Round(time.Millisecond))
		assert.Less(t, took, 800*time.Millisecond, "%s: the caller's 300 ms deadline was not honoured", tc.name)
		time.Sleep(2 * time.Second) // let the server wake
	}
}

package redeq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestReview9RefusedWritesFullPoolFromFreshClient: docs/operations.md
// promises that a server refusing writes (maxmemory under noeviction,
// min-replicas-to-write) still answers a full pool with ErrPoolFull and
// AddBatch a stored id with ErrJobExists, writing nothing, "since both need
// only reads". But Add and AddBatch first record the job's topic
// (bucket.Registry.Ensure: meta.lua's HSETNX, then SADD), a write, on a
// client's first Add to a topic and again every RecordEvery (2 min). A
// producer started (or past its 2 minutes) while the server refuses
// writes gets Redis's OOM / NOREPLICAS from the topic record instead: Add
// to the full pool is not ErrPoolFull, and AddBatch fails as a whole.
func TestReview9RefusedWritesFullPoolFromFreshClient(t *testing.T) {
	for _, tc := range []struct{ param, value, refusal string }{
		{"maxmemory", "1", "OOM"},
		{"min-replicas-to-write", "1", "NOREPLICAS"},
	} {
		t.Run(tc.param, func(t *testing.T) {
			srv := testutil.StartServer(t, "--maxmemory-policy", "noeviction")
			rc := srv.Client(nil)
			ctx := context.Background()
			cfg := testutil.Config(t)
			cfg.Concurrency, cfg.MaxPool = 1, 1
			first, err := redeq.New(rc, cfg)
			require.NoError(t, err)
			require.NoError(t, first.Add(ctx, &redeq.Job{Topic: "orders", ID: "a", Delay: time.Hour}))
			require.NoError(t, rc.ConfigSet(ctx, tc.param, tc.value).Err()) // writes refused, reads not
			before := testutil.Dump(t, rc, cfg.Prefix)

			// Another producer (a new process, or one whose 2 minutes ran
			// out) with the same settings.
			fresh, err := redeq.New(rc, cfg)
			require.NoError(t, err)
			err = fresh.Add(ctx, &redeq.Job{Topic: "orders", ID: "b", Delay: time.Hour})
			t.Logf("Add to the full pool: %v", err)
			assert.ErrorIs(t, err, redeq.ErrPoolFull, "a full pool is answered ErrPoolFull while writes are refused")

			other, err := redeq.New(rc, cfg)
			require.NoError(t, err)
			err = other.AddBatch(ctx, []*redeq.Job{
				{Topic: "orders", ID: "a", Delay: time.Hour},
				{Topic: "orders", ID: "c", Delay: time.Hour},
			})
			t.Logf("AddBatch of a stored id and one more: %v", err)
			var be *redeq.BatchError
			if assert.True(t, errors.As(err, &be), "AddBatch answers each job, not %v", err) {
				assert.ErrorIs(t, be.Errs[0], redeq.ErrJobExists)
				assert.ErrorIs(t, be.Errs[1], redeq.ErrPoolFull)
			}
			assert.Equal(t, before, testutil.Dump(t, rc, cfg.Prefix), "a refused Add wrote")
		})
	}
}

package pool_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/pool"
)

// TestReview8LoneRunRefusalUnderMaxmemory: a server at its maxmemory with
// maxmemory-policy noeviction (the policy docs/operations.md asks for)
// refuses the first write of a script, not its reads. A run of many jobs
// refuses a stored id or a full pool with reads only, and answers exists
// and full. A lone Add (a run of one) wrote its op record (SET NX GET)
// before it knew whether it added its job, and deleted it when it did
// not, so on such a server it failed with OOM instead of answering
// ErrJobExists or ErrPoolFull. Now a full pool is answered with reads
// only; a stored id is still found by HSETNX, a write, so a lone Add of
// one gets the server's refusal (documented in docs/operations.md).
func TestReview8LoneRunRefusalUnderMaxmemory(t *testing.T) {
	srv := testutil.StartServer(t, "--maxmemory-policy", "noeviction")
	loneRunRefusal(t, srv.Client(nil), "maxmemory", "1", "OOM")
}

// TestReview8LoneRunRefusalWithoutReplicas: the same with
// min-replicas-to-write, which refuses a script's first write with
// NOREPLICAS while the master lacks its replicas.
func TestReview8LoneRunRefusalWithoutReplicas(t *testing.T) {
	srv := testutil.StartServer(t)
	loneRunRefusal(t, srv.Client(nil), "min-replicas-to-write", "1", "NOREPLICAS")
}

// loneRunRefusal adds a job to a pool of one, sets the server's config
// param to value so that it refuses writes with refusal, and checks the
// answers of a run of many and of lone Adds of a stored id and to the
// full pool.
func loneRunRefusal(t *testing.T, c *redis.Client, param, value, refusal string) {
	ctx := context.Background()
	s := pool.NewStore(c, "p")
	job := func(id string) *pool.Job {
		return &pool.Job{Topic: "t", ID: id, Body: []byte(id), Delay: time.Hour}
	}
	_, err := s.Add(ctx, job("a"), pool.Placement{Limit: 1})
	require.NoError(t, err)
	require.NoError(t, c.ConfigSet(ctx, param, value).Err()) // writes refused, reads not

	errs, err := s.AddMany(ctx, []*pool.Job{job("a"), job("b")}, []pool.Placement{{Limit: 1}, {Limit: 1}})
	require.NoError(t, err)
	assert.ErrorIs(t, errs[0], pool.ErrJobExists, "in a run: the stored id")
	assert.ErrorIs(t, errs[1], pool.ErrPoolFull, "in a run: the full pool")

	before := testutil.Dump(t, c, "p")
	_, err = s.Add(ctx, job("a"), pool.Placement{Limit: 10})
	require.Error(t, err, "a lone Add of a stored id")
	if !errors.Is(err, pool.ErrJobExists) {
		assert.ErrorContains(t, err, refusal, "a lone Add of a stored id")
	}
	assert.Equal(t, before, testutil.Dump(t, c, "p"), "a lone Add of a stored id wrote")
	_, err = s.Add(ctx, job("b"), pool.Placement{Limit: 1})
	assert.ErrorIs(t, err, pool.ErrPoolFull, "a lone Add to a full pool")
	assert.Equal(t, before, testutil.Dump(t, c, "p"), "a lone Add to a full pool wrote")
}

// TestReview8LoneRunRerunUnderMaxmemory: the rerun go-redis sends after a
// lost reply must give the first run's answer. A run of many jobs finds
// its record with GET, a read, and answers even when the server has since
// gone over maxmemory (the first run's own jobs may be what pushed it
// over). A run of one read its record with SET NX GET, a write command,
// which such a server refuses: the rerun failed with OOM, and the caller
// was told its Add failed though its job is stored.
func TestReview8LoneRunRerunUnderMaxmemory(t *testing.T) {
	srv := testutil.StartServer(t, "--maxmemory-policy", "noeviction")
	c := srv.Client(nil)
	ctx := context.Background()
	k := keys.ForBucket("p", "t", 0)
	for _, n := range []int{2, 1} {
		require.NoError(t, c.ConfigSet(ctx, "maxmemory", "0").Err())
		op := fmt.Sprint("run", n)
		var jobs [][3]any
		for j := range n {
			jobs = append(jobs, [3]any{fmt.Sprint(op, "-", j), "60000", ""})
		}
		v, err := addDirect(ctx, c, k, op, 30000, jobs...)
		require.NoError(t, err)
		require.Greater(t, v[0].(int64), int64(0), "%d jobs: added", n)
		require.NoError(t, c.ConfigSet(ctx, "maxmemory", "1").Err())
		again, err := addDirect(ctx, c, k, op, 30000, jobs...)
		if assert.NoError(t, err, "%d jobs: the rerun", n) {
			assert.Equal(t, v, again, "%d jobs: the rerun", n)
		}
	}
}

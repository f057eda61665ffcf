package pool_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/pool"
)

// TestReview8LoneRunRefusalUnderMaxmemory: a server at its maxmemory with
// maxmemory-policy noeviction (the policy docs/operations.md asks for)
// refuses the first write of a script, not its reads. A run of many jobs
// refuses a stored id or a full pool with reads only, and answers exists
// and full. A lone Add (a run of one) writes its op record (SET NX GET)
// before it knows whether it adds its job, and deletes it when it does
// not, so on such a server it fails with OOM instead of answering
// ErrJobExists or ErrPoolFull: the same job answered differently alone
// and in a run, and a refused Add is not a call that writes nothing.
func TestReview8LoneRunRefusalUnderMaxmemory(t *testing.T) {
	srv := testutil.StartServer(t, "--maxmemory-policy", "noeviction")
	c := srv.Client(nil)
	ctx := context.Background()
	s := pool.NewStore(c, "p")
	job := func(id string) *pool.Job {
		return &pool.Job{Topic: "t", ID: id, Body: []byte(id), Delay: time.Hour}
	}
	_, err := s.Add(ctx, job("a"), pool.Placement{Limit: 1})
	require.NoError(t, err)
	// Memory is now over maxmemory: writes are refused, reads are not.
	require.NoError(t, c.ConfigSet(ctx, "maxmemory", "1").Err())

	// A run of many jobs answers each refusal.
	errs, err := s.AddMany(ctx, []*pool.Job{job("a"), job("b")}, []pool.Placement{{Limit: 1}, {Limit: 1}})
	require.NoError(t, err)
	assert.ErrorIs(t, errs[0], pool.ErrJobExists, "in a run: the stored id")
	assert.ErrorIs(t, errs[1], pool.ErrPoolFull, "in a run: the full pool")

	// The same jobs, each a lone Add.
	_, err = s.Add(ctx, job("a"), pool.Placement{Limit: 10})
	assert.ErrorIs(t, err, pool.ErrJobExists, "a lone Add of a stored id")
	_, err = s.Add(ctx, job("b"), pool.Placement{Limit: 1})
	assert.ErrorIs(t, err, pool.ErrPoolFull, "a lone Add to a full pool")
}

// TestReview8LoneRunRefusalWithoutReplicas: the same with
// min-replicas-to-write, which refuses a script's first write with
// NOREPLICAS while the master lacks its replicas: a run of many answers
// exists and full, a lone Add of the same job fails with NOREPLICAS.
func TestReview8LoneRunRefusalWithoutReplicas(t *testing.T) {
	srv := testutil.StartServer(t)
	c := srv.Client(nil)
	ctx := context.Background()
	s := pool.NewStore(c, "p")
	job := func(id string) *pool.Job {
		return &pool.Job{Topic: "t", ID: id, Body: []byte(id), Delay: time.Hour}
	}
	_, err := s.Add(ctx, job("a"), pool.Placement{Limit: 1})
	require.NoError(t, err)
	require.NoError(t, c.ConfigSet(ctx, "min-replicas-to-write", "1").Err())

	errs, err := s.AddMany(ctx, []*pool.Job{job("a"), job("b")}, []pool.Placement{{Limit: 1}, {Limit: 1}})
	require.NoError(t, err)
	assert.ErrorIs(t, errs[0], pool.ErrJobExists, "in a run: the stored id")
	assert.ErrorIs(t, errs[1], pool.ErrPoolFull, "in a run: the full pool")

	_, err = s.Add(ctx, job("a"), pool.Placement{Limit: 10})
	assert.ErrorIs(t, err, pool.ErrJobExists, "a lone Add of a stored id")
	_, err = s.Add(ctx, job("b"), pool.Placement{Limit: 1})
	assert.ErrorIs(t, err, pool.ErrPoolFull, "a lone Add to a full pool")
}

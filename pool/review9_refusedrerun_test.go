package pool_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/pool"
)

// TestReview9RerunOfRefusedRunAnswersOtherwise: add.lua keeps the reply
// of a run only when it added a job; a run that answered "exists" or
// "full" keeps nothing ("a rerun of it is a run like any other"). So
// when go-redis resends such a run after its reply was lost, and the
// stored job was delivered and deleted meanwhile (or the full pool got
// room), the rerun adds the job and answers with a due time: a different
// answer than the first run's, and a write. The caller is told its job
// was added, and a job whose id was already used (and ran) runs again.
func TestReview9RerunOfRefusedRunAnswersOtherwise(t *testing.T) {
	var addr string
	for _, be := range testutil.RealBackends(t) {
		if be.Name == "redis" {
			addr = be.Addrs[0]
		}
	}
	if addr == "" {
		t.Skip("no standalone server")
	}
	mark := []byte(redis.NewScript(pool.AddSource).Hash())
	ctx := context.Background()
	plain := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { plain.Close() })

	// lossy returns a Store whose next add.lua reply is lost: go-redis
	// reads for ReadTimeout (1 s), then sends the run again.
	lossy := func(prefix string) *pool.Store {
		var lose atomic.Int32
		lose.Store(1)
		c := redis.NewClient(&redis.Options{
			Addr:        addr,
			ReadTimeout: time.Second,
			Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
				conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
				if err != nil {
					return nil, err
				}
				return &lossyConn{Conn: conn, mark: mark, lose: &lose}, nil
			},
		})
		t.Cleanup(func() { c.Close() })
		return pool.NewStore(c, prefix)
	}
	job := func(id string) *pool.Job {
		return &pool.Job{Topic: "t", ID: id, Body: []byte("b"), Delay: time.Hour}
	}

	t.Run("exists", func(t *testing.T) {
		prefix := testutil.Prefix(t)
		other := pool.NewStore(plain, prefix)
		_, err := other.Add(ctx, job("x"), pool.Placement{Limit: 10})
		require.NoError(t, err)
		// The first run answers "exists"; its reply is lost; the job is
		// delivered and deleted before go-redis resends the run.
		time.AfterFunc(500*time.Millisecond, func() { other.Delete(ctx, "t", "x", 0) })
		_, err = lossy(prefix).Add(ctx, job("x"), pool.Placement{Limit: 10})
		stored := plain.HExists(ctx, keys.ForBucket(prefix, "t", 0).Pool(), "x").Val()
		t.Logf("err %v, stored after %v", err, stored)
		assert.ErrorIs(t, err, pool.ErrJobExists, "the first run answered exists; the rerun must too")
		assert.False(t, stored, "the rerun of a refused Add wrote the job")
	})
	t.Run("full", func(t *testing.T) {
		prefix := testutil.Prefix(t)
		other := pool.NewStore(plain, prefix)
		_, err := other.Add(ctx, job("a"), pool.Placement{Limit: 1})
		require.NoError(t, err)
		time.AfterFunc(500*time.Millisecond, func() { other.Delete(ctx, "t", "a", 0) })
		_, err = lossy(prefix).Add(ctx, job("b"), pool.Placement{Limit: 1})
		stored := plain.HExists(ctx, keys.ForBucket(prefix, "t", 0).Pool(), "b").Val()
		t.Logf("err %v, stored after %v", err, stored)
		assert.ErrorIs(t, err, pool.ErrPoolFull, "the first run answered full; the rerun must too")
		assert.False(t, stored, "the rerun of a refused Add wrote the job")
	})
}

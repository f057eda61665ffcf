package rdb_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redeq-go/redeq/internal/rdb"
	"github.com/redeq-go/redeq/internal/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var incr = redis.NewScript(`return redis.call('INCR', KEYS[1]) * 0 + tonumber(ARGV[1])`)

// TestCommitterManyCallers: concurrent callers each get their own reply,
// and every call runs exactly once.
func TestCommitterManyCallers(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			key := testutil.Prefix(t) + ":{n}"
			cm := rdb.NewCommitter(c, incr)
			var wg sync.WaitGroup
			const callers, each = 32, 50
			for g := range callers {
				wg.Go(func() {
					for i := range each {
						want := int64(g*1000 + i)
						v, err := cm.Do(context.Background(), rdb.Call{Keys: []string{key}, Args: []any{want}})
						require.NoError(t, err)
						require.Equal(t, want, v, fmt.Sprint(g, i))
					}
				})
			}
			wg.Wait()
			n, err := c.Get(context.Background(), key).Int()
			require.NoError(t, err)
			require.Equal(t, callers*each, n)
			c.Del(context.Background(), key)
		})
	}
}

func TestCommitterCanceled(t *testing.T) {
	c := testutil.Backends(t)[0].New(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := rdb.NewCommitter(c, incr).Do(ctx, rdb.Call{Keys: []string{"k"}, Args: []any{1}})
	require.ErrorIs(t, err, context.Canceled)
}

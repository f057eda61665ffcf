package lock_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/lock"
)

func TestTryLockExtendUnlock(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			rdb := be.New(t)
			key := testutil.Prefix(t) + ":{t#0}:lock"
			a := lock.New(rdb).NewMutex(key, lock.WithExpiry(10*time.Second))
			b := lock.New(be.New(t)).NewMutex(key, lock.WithExpiry(10*time.Second))

			ok, err := a.TryLock(ctx)
			require.NoError(t, err)
			require.True(t, ok)
			require.True(t, a.Held(time.Now()))

			ok, err = b.TryLock(ctx)
			require.NoError(t, err, "another holder is not an error")
			require.False(t, ok)

			ok, err = a.Extend(ctx)
			require.NoError(t, err)
			require.True(t, ok)

			require.NoError(t, a.Unlock(ctx))
			require.False(t, a.Held(time.Now()))
			ok, err = b.TryLock(ctx)
			require.NoError(t, err)
			require.True(t, ok)

			// a's lock was lost: extending reports it, unlocking is harmless.
			ok, err = a.Extend(ctx)
			require.NoError(t, err)
			require.False(t, ok)
			require.NoError(t, a.Unlock(ctx))
			require.True(t, b.Held(time.Now()))
			require.NoError(t, b.Unlock(ctx))
		})
	}
}

// failKey fails every command naming key while on is set, as a dropped
// connection would.
type failKey struct {
	key string
	on  atomic.Bool
}

func (h *failKey) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *failKey) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.on.Load() {
			for _, a := range cmd.Args() {
				if a == h.key {
					err := errors.New("i/o timeout (simulated)")
					cmd.SetErr(err)
					return err
				}
			}
		}
		return next(ctx, cmd)
	}
}

func (h *failKey) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestExtendErrorKeepsLock: a Redis error on extend does not make the
// holder drop a lock whose key is still its own; it used to, and the
// bucket then ran only fallback moves until the lock expired.
func TestExtendErrorKeepsLock(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			key := testutil.Prefix(t) + ":{t#0}:lock"
			hook := &failKey{key: key}
			rdb := be.New(t)
			rdb.AddHook(hook)
			m := lock.New(rdb).NewMutex(key, lock.WithExpiry(10*time.Second))
			ok, err := m.TryLock(ctx)
			require.NoError(t, err)
			require.True(t, ok)
			hook.on.Store(true)
			ok, err = m.Extend(ctx)
			require.Error(t, err)
			require.True(t, ok, "still ours until it expires")
			require.True(t, m.Held(time.Now()))
			hook.on.Store(false)
			ok, err = m.Extend(ctx)
			require.NoError(t, err)
			require.True(t, ok)
			require.NoError(t, m.Unlock(ctx))
		})
	}
}

package lock_test

import (
	"context"
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

// namesKey picks the commands that name key.
func namesKey(key string) func(redis.Cmder) bool {
	return func(cmd redis.Cmder) bool {
		for _, a := range cmd.Args() {
			if a == key {
				return true
			}
		}
		return false
	}
}

// TestExtendErrorKeepsLock: a Redis error on extend does not make the
// holder drop a lock whose key is still its own; it used to, and the
// bucket then ran only fallback moves until the lock expired.
func TestExtendErrorKeepsLock(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			key := testutil.Prefix(t) + ":{t#0}:lock"
			hook := testutil.HookMatch(namesKey(key)) // while refusing: a dropped connection
			rdb := be.New(t)
			rdb.AddHook(hook)
			m := lock.New(rdb).NewMutex(key, lock.WithExpiry(10*time.Second))
			ok, err := m.TryLock(ctx)
			require.NoError(t, err)
			require.True(t, ok)
			hook.Refuse(true)
			ok, err = m.Extend(ctx)
			require.Error(t, err)
			require.True(t, ok, "still ours until it expires")
			require.True(t, m.Held(time.Now()))
			hook.Refuse(false)
			ok, err = m.Extend(ctx)
			require.NoError(t, err)
			require.True(t, ok)
			require.NoError(t, m.Unlock(ctx))
		})
	}
}

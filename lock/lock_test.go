package lock_test

import (
	"context"
	"testing"
	"time"

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
			a := lock.New(rdb).NewMutex(key, lock.WithExpiry(time.Second))
			b := lock.New(be.New(t)).NewMutex(key, lock.WithExpiry(time.Second))

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

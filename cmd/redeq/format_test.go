package main

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
)

// TestCLIUpgradeFormat: upgrade-format refuses, naming it and changing
// nothing, while a live client records no format it reads (as a client of
// the older version announces itself), and switches once it is gone.
func TestCLIUpgradeFormat(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := newEnv(t, b)
			ctx := context.Background()
			rdb := b.New(t)
			movers := keys.Movers(e.prefix)
			require.NoError(t, rdb.ZAdd(ctx, movers, redis.Z{Score: float64(time.Now().UnixMilli()), Member: "old-client"}).Err())

			code, _, errs := e.run(t, "", "upgrade-format")
			require.NotZero(t, code)
			require.Contains(t, errs, "old-client")
			require.Zero(t, rdb.Exists(ctx, keys.MoversFormat(e.prefix)).Val(), "a refusal changes nothing")

			require.NoError(t, rdb.ZRem(ctx, movers, "old-client").Err())
			require.Equal(t, "the namespace writes the current job state format\n", e.ok(t, "upgrade-format"))
			require.Equal(t, keys.FormatCurrent, rdb.Get(ctx, keys.MoversFormat(e.prefix)).Val())
		})
	}
}

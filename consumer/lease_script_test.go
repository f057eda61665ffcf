package consumer

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
)

// lease.lua writes when the lease ends (the node's clock plus the
// consumer's ConsumerTimeout) and makes the key expire then; a rerun
// after a lost reply renews it from the rerun's time, never shorter. A
// lease it wrote keeps recover.lua off the consumer's set.
func TestLeaseScript(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			c := be.New(t)
			ctx := context.Background()
			p := testutil.Prefix(t)
			k := keys.ForBucket(p, "t", 0)
			const ttl = 600
			serverMs := func() int64 {
				tm, err := c.Time(ctx).Result()
				require.NoError(t, err)
				return tm.UnixMilli()
			}
			run := func() int64 {
				v, err := leaseScript.Run(ctx, c, []string{k.Lease("c")}, ttl).Int64()
				require.NoError(t, err)
				return v
			}
			before := serverMs()
			ends := run()
			after := serverMs()
			require.True(t, ends >= before+ttl && ends <= after+ttl, "ends %d outside [%d, %d]", ends, before+ttl, after+ttl)
			stored, err := c.Get(ctx, k.Lease("c")).Result()
			require.NoError(t, err)
			require.Equal(t, strconv.FormatInt(ends, 10), stored)
			pttl, err := c.PTTL(ctx, k.Lease("c")).Result()
			require.NoError(t, err)
			require.True(t, pttl > 0 && pttl <= ttl*time.Millisecond, "expiry %v", pttl)
			require.GreaterOrEqual(t, run(), ends, "rerun after a lost reply")

			testutil.Seed(t, c, testutil.Hash(k.Pool(), "j=1|5|2|0|x"), testutil.ZSet(k.InFlight("c"), "7:j=1"),
				testutil.Hash(k.State(), "j=7@c"))
			v, err := recoverScript.Run(ctx, c, recoverKeys(k, "c"),
				"recover", 10, 3, 100, keys.ReadyChannel(p), keys.WakeChannel(p), "t#0", "c", 0, "+inf").Int64Slice()
			require.NoError(t, err)
			require.Equal(t, []int64{0, 1, 0, 1}, v, "leased: nothing recovered")
		})
	}
}

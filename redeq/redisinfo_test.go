package redeq_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestRedisInfoCountsThePrefixKeys: RedisInfo reports each server (each
// master of a cluster) with its version and memory, and counts exactly the
// keys under the client's prefix, hash-tagged ones included, and not those
// of a prefix that merely contains it.
func TestRedisInfoCountsThePrefixKeys(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		for i := range 5 {
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: fmt.Sprint("t", i%2), ID: fmt.Sprint(i), Delay: time.Hour}))
		}
		require.NoError(t, e.rdb.Set(ctx, "x"+e.cfg.Prefix+":other", "1", time.Minute).Err())
		require.NoError(t, e.rdb.Set(ctx, "{"+e.cfg.Prefix+":tagged}:k", "1", time.Minute).Err())
		want := len(testutil.Keys(t, e.rdb, e.cfg.Prefix+":")) + 1 // and the tagged one

		info, err := e.c.RedisInfo(ctx)
		require.NoError(t, err)
		require.True(t, info.Exact)
		require.EqualValues(t, want, info.PrefixKeys)
		servers := 1
		if e.be.Name == "cluster" {
			servers = 3
		}
		require.Len(t, info.Servers, servers)
		var used int64
		for _, s := range info.Servers {
			require.NotEmpty(t, s.Addr)
			require.True(t, s.Exact)
			require.GreaterOrEqual(t, s.Keys, s.PrefixKeys)
			used += s.UsedMemory
			if e.be.Real() {
				require.NotEmpty(t, s.Version)
				require.Positive(t, s.UsedMemory)
				require.Positive(t, s.Clients)
			}
		}
		require.Equal(t, used, info.UsedMemory)
		if e.be.Name == "cluster" {
			require.Equal(t, "cluster", info.Servers[0].Mode)
		}
	})
}

// TestRedisInfoScanIsBounded: on a server with more keys than
// RedisScanBudget, RedisInfo examines about that many and says its count
// of the prefix's keys is an estimate. (Fault tier: writing 120,000 keys
// takes seconds.)
func TestRedisInfoScanIsBounded(t *testing.T) {
	testutil.FaultTier(t)
	be := testutil.RealBackends(t)[0]
	e := setup(t, be, testutil.Config(t))
	ctx := context.Background()
	filler := "fill" + e.cfg.Prefix
	pipe := e.rdb.Pipeline()
	for i := range redeq.RedisScanBudget + 20_000 {
		pipe.Set(ctx, fmt.Sprintf("%s:%d", filler, i), "", 5*time.Minute)
	}
	_, err := pipe.Exec(ctx)
	require.NoError(t, err)
	t.Cleanup(func() {
		iter := e.rdb.Scan(ctx, 0, filler+":*", 5000).Iterator()
		var batch []string
		for iter.Next(ctx) {
			if batch = append(batch, iter.Val()); len(batch) == 5000 {
				e.rdb.Unlink(ctx, batch...)
				batch = batch[:0]
			}
		}
		if len(batch) > 0 {
			e.rdb.Unlink(ctx, batch...)
		}
	})
	require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "1", Delay: time.Hour}))
	info, err := e.c.RedisInfo(ctx)
	require.NoError(t, err)
	require.False(t, info.Exact)
	require.Len(t, info.Servers, 1)
	require.GreaterOrEqual(t, info.Servers[0].Scanned, int64(redeq.RedisScanBudget))
	require.Less(t, info.Servers[0].Scanned, info.Servers[0].Keys)
}

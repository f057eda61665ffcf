package testutil_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
)

// TestConnWrappers: each connection wrapper misbehaves as it says, on the
// writes it is told to, and the command still reaches the server.
func TestConnWrappers(t *testing.T) {
	ctx := context.Background()
	incr := redis.NewScript(incrSrc)
	mark := []byte(incr.Hash())
	setup := func(t *testing.T, opts *redis.Options, wrap func(n int, c net.Conn) net.Conn) (*redis.Client, *redis.Client, string) {
		be := testutil.Backends(t)[0]
		plain := redis.NewClient(&redis.Options{Addr: be.Addrs[0]})
		t.Cleanup(func() { plain.Close() })
		require.NoError(t, incr.Load(ctx, plain).Err())
		opts.Addr = be.Addrs[0]
		opts.Dialer = testutil.Dialer(wrap)
		c := redis.NewClient(opts)
		t.Cleanup(func() { c.Close() })
		return c, plain, testutil.Prefix(t) + ":n"
	}
	t.Run("DialerNumbersTheDials", func(t *testing.T) {
		var seen []int
		c, _, _ := setup(t, &redis.Options{PoolSize: 2}, func(n int, c net.Conn) net.Conn {
			seen = append(seen, n)
			return c
		})
		require.NoError(t, c.Ping(ctx).Err())
		c.Close()
		require.Equal(t, []int{1}, seen)
	})
	t.Run("CountWritesCountsMarkedWrites", func(t *testing.T) {
		var w testutil.WriteCount
		require.True(t, w.Last().IsZero())
		c, _, key := setup(t, &redis.Options{}, func(_ int, c net.Conn) net.Conn { return testutil.CountWrites(c, mark, &w) })
		require.NoError(t, c.Ping(ctx).Err())
		require.Zero(t, w.N())
		before := time.Now()
		require.NoError(t, incr.EvalSha(ctx, c, []string{key}).Err())
		require.EqualValues(t, 1, w.N())
		require.False(t, w.Last().Before(before))
	})
	t.Run("LoseRepliesTimesOutAfterTheRun", func(t *testing.T) {
		var lose atomic.Int32
		lose.Store(1)
		c, plain, key := setup(t, &redis.Options{ReadTimeout: 200 * time.Millisecond, MaxRetries: -1}, func(_ int, c net.Conn) net.Conn {
			return testutil.LoseReplies(c, mark, &lose)
		})
		require.NoError(t, c.Ping(ctx).Err(), "unmarked commands keep their replies")
		err := incr.EvalSha(ctx, c, []string{key}).Err()
		require.ErrorIs(t, err, os.ErrDeadlineExceeded)
		require.Equal(t, "1", plain.Get(ctx, key).Val(), "the command ran")
		require.EqualValues(t, 0, lose.Load())
		require.NoError(t, incr.EvalSha(ctx, c, []string{key}).Err(), "a new connection, no loss left")
		require.EqualValues(t, -1, lose.Load(), "the count goes on below zero")
	})
	t.Run("EOFAfterReplyCutsAfterTheRun", func(t *testing.T) {
		c, plain, key := setup(t, &redis.Options{MaxRetries: -1}, func(_ int, c net.Conn) net.Conn { return testutil.EOFAfterReply(c, mark) })
		err := incr.EvalSha(ctx, c, []string{key}).Err()
		require.True(t, errors.Is(err, io.EOF), "%v", err)
		require.Equal(t, "1", plain.Get(ctx, key).Val(), "the command ran")
	})
	t.Run("LateReadsDelaysTheFirstReads", func(t *testing.T) {
		c, _, _ := setup(t, &redis.Options{}, func(_ int, c net.Conn) net.Conn { return testutil.LateReads(c, 100*time.Millisecond, 1) })
		start := time.Now()
		require.NoError(t, c.Ping(ctx).Err())
		require.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond)
	})
	t.Run("LateFirstWriteStallsTheFirstWrite", func(t *testing.T) {
		c, _, _ := setup(t, &redis.Options{}, func(_ int, c net.Conn) net.Conn { return testutil.LateFirstWrite(c, 100*time.Millisecond) })
		start := time.Now()
		require.NoError(t, c.Ping(ctx).Err())
		require.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond)
	})
	t.Run("SplitPipelineRunsBetweenItsParts", func(t *testing.T) {
		var armed atomic.Bool
		var plain *redis.Client
		var key string
		var between string
		c, p, k := setup(t, &redis.Options{}, func(_ int, c net.Conn) net.Conn {
			return testutil.SplitPipeline(c, &armed, func() { between = plain.Get(ctx, key).Val() })
		})
		plain, key = p, k
		require.NoError(t, c.Ping(ctx).Err())
		armed.Store(true)
		pipe := c.Pipeline()
		incr.EvalSha(ctx, pipe, []string{key})
		second := incr.EvalSha(ctx, pipe, []string{key})
		_, err := pipe.Exec(ctx)
		require.NoError(t, err)
		require.False(t, armed.Load(), "split once, then disarmed")
		require.Equal(t, "1", between, "the first command ran before the rest was sent")
		require.EqualValues(t, 2, second.Val())
	})
}

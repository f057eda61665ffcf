package testutil_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
)

const incrSrc = `return redis.call('INCR', KEYS[1])`

// TestHook: a Hook acts on the runs of its script only, alone or in a
// pipeline: a lost reply ran on the server and fails its caller, a double
// run ran twice and answers the second reply, a delay holds the run, Set
// runs every match; each armed fault applies as many times as asked and
// is counted.
func TestHook(t *testing.T) {
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			ctx := context.Background()
			incr := redis.NewScript(incrSrc)
			setup := func(t *testing.T) (redis.UniversalClient, *testutil.Hook, string) {
				c := be.New(t)
				h := testutil.HookScript(testutil.ScriptOf("incr.lua", incrSrc))
				c.AddHook(h)
				require.NoError(t, incr.Load(ctx, c).Err())
				return c, h, testutil.Prefix(t) + ":n"
			}
			count := func(t *testing.T, c redis.UniversalClient, key string) int64 {
				n, err := c.Get(ctx, key).Int64()
				if errors.Is(err, redis.Nil) {
					return 0
				}
				require.NoError(t, err)
				return n
			}
			t.Run("LosesTheReplyAfterTheRun", func(t *testing.T) {
				c, h, key := setup(t)
				h.LoseReply(1)
				require.ErrorIs(t, incr.Run(ctx, c, []string{key}).Err(), testutil.ErrReplyLost)
				require.EqualValues(t, 1, count(t, c, key), "the run whose reply was lost ran")
				v, err := incr.Run(ctx, c, []string{key}).Int64()
				require.NoError(t, err, "one loss only")
				require.EqualValues(t, 2, v)
				require.EqualValues(t, 1, h.Fired())
			})
			t.Run("LosesTheReplyInAPipeline", func(t *testing.T) {
				c, h, key := setup(t)
				h.LoseReply(1)
				pipe := c.Pipeline()
				get := pipe.Get(ctx, key+"x")
				run := incr.EvalSha(ctx, pipe, []string{key})
				_, _ = pipe.Exec(ctx)
				require.ErrorIs(t, run.Err(), testutil.ErrReplyLost)
				require.ErrorIs(t, get.Err(), redis.Nil, "a command of another kind keeps its reply")
				require.EqualValues(t, 1, count(t, c, key))
			})
			t.Run("RunsTwiceAnsweringTheSecond", func(t *testing.T) {
				c, h, key := setup(t)
				h.RunTwice(1)
				v, err := incr.Run(ctx, c, []string{key}).Int64()
				require.NoError(t, err)
				require.EqualValues(t, 2, v, "the caller sees the second run's reply")
				require.EqualValues(t, 2, count(t, c, key))
				require.EqualValues(t, 3, incr.Run(ctx, c, []string{key}).Val(), "one double run only")
			})
			t.Run("DelaysTheRun", func(t *testing.T) {
				c, h, key := setup(t)
				h.Delay(50*time.Millisecond, 1)
				start := time.Now()
				require.NoError(t, incr.Run(ctx, c, []string{key}).Err())
				require.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)
				require.EqualValues(t, 1, h.Fired())
			})
			t.Run("LeavesOtherCommandsAlone", func(t *testing.T) {
				c, h, key := setup(t)
				h.LoseReply(1)
				require.NoError(t, c.Set(ctx, key+"x", "v", 0).Err())
				require.Zero(t, h.Fired())
				require.ErrorIs(t, incr.Run(ctx, c, []string{key}).Err(), testutil.ErrReplyLost, "the loss still armed")
			})
			t.Run("RefusesUnsentWhileOn", func(t *testing.T) {
				c, h, key := setup(t)
				h.Refuse(true)
				for range 2 {
					require.ErrorIs(t, incr.Run(ctx, c, []string{key}).Err(), testutil.ErrUnsent)
				}
				require.Zero(t, count(t, c, key), "nothing was sent")
				h.Refuse(false)
				require.NoError(t, incr.Run(ctx, c, []string{key}).Err())
				require.EqualValues(t, 1, count(t, c, key))
				require.EqualValues(t, 2, h.Fired())
			})
			t.Run("SetRunsEveryMatch", func(t *testing.T) {
				c, h, key := setup(t)
				seen := 0
				h.Set(func(ctx context.Context, cmds []redis.Cmder, next func() error) error {
					seen++
					return next()
				})
				for range 3 {
					require.NoError(t, incr.Run(ctx, c, []string{key}).Err())
				}
				h.Set(nil)
				require.NoError(t, incr.Run(ctx, c, []string{key}).Err())
				require.Equal(t, 3, seen)
				require.EqualValues(t, 3, h.Fired())
			})
		})
	}
}

// TestWrap: a Wrap runs around every command and every pipeline.
func TestWrap(t *testing.T) {
	be := testutil.Backends(t)[0]
	c := be.New(t)
	ctx := context.Background()
	var sizes []int
	c.AddHook(testutil.Wrap(func(ctx context.Context, cmds []redis.Cmder, next func() error) error {
		sizes = append(sizes, len(cmds))
		return next()
	}))
	require.NoError(t, c.Ping(ctx).Err())
	pipe := c.Pipeline()
	pipe.Ping(ctx)
	pipe.Ping(ctx)
	_, err := pipe.Exec(ctx)
	require.NoError(t, err)
	require.Contains(t, sizes, 1)
	require.Contains(t, sizes, 2)
}

// TestWrapPipelines: a WrapPipelines runs around every pipeline and lets
// commands sent alone through.
func TestWrapPipelines(t *testing.T) {
	be := testutil.Backends(t)[0]
	c := be.New(t)
	ctx := context.Background()
	var sizes []int
	c.AddHook(testutil.WrapPipelines(func(ctx context.Context, cmds []redis.Cmder, next func() error) error {
		sizes = append(sizes, len(cmds))
		return next()
	}))
	require.NoError(t, c.Ping(ctx).Err()) // a connection, its handshake a pipeline
	sizes = nil
	require.NoError(t, c.Ping(ctx).Err())
	require.Empty(t, sizes)
	pipe := c.Pipeline()
	pipe.Ping(ctx)
	_, err := pipe.Exec(ctx)
	require.NoError(t, err)
	require.Contains(t, sizes, 1)
}

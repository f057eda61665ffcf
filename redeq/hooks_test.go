package redeq_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/internal/testutil"
)

// scriptSHA is the SHA1 of one of the library's embedded scripts, as the
// EVALSHA commands carry it. path is relative to the module root.
func scriptSHA(t *testing.T, path string) string {
	t.Helper()
	return testutil.LoadScript(t, "../"+path).SHA
}

// scriptHook lets a test act on the runs of one script: it sees each
// command that runs the script (EVALSHA with its SHA, or EVAL of it), alone
// or in a pipeline, and decides what happens through around.
type scriptHook struct {
	testutil.Script
	// around runs the command: call next to send it (zero, one or more
	// times) and return the error the client should see.
	mu     sync.Mutex
	around func(ctx context.Context, cmd redis.Cmder, next func() error) error
}

func newScriptHook(t *testing.T, path string) *scriptHook {
	return &scriptHook{Script: testutil.LoadScript(t, "../"+path)}
}

// set installs f; nil lets every command through.
func (h *scriptHook) set(f func(ctx context.Context, cmd redis.Cmder, next func() error) error) {
	h.mu.Lock()
	h.around = f
	h.mu.Unlock()
}

func (h *scriptHook) get() func(ctx context.Context, cmd redis.Cmder, next func() error) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.around
}

func (h *scriptHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		f := h.get()
		if f == nil || !h.RunBy(cmd) {
			return next(ctx, cmd)
		}
		return f(ctx, cmd, func() error { return next(ctx, cmd) })
	}
}

// ProcessPipelineHook sends pipelines as they are; the tests that use this
// hook act on scripts the library runs alone.
func (h *scriptHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		f := h.get()
		if f == nil {
			return next(ctx, cmds)
		}
		for _, cmd := range cmds {
			if h.RunBy(cmd) {
				err := f(ctx, cmd, func() error { return next(ctx, cmds) })
				if err != nil {
					// A pipeline that failed as a whole fails each command.
					for _, c := range cmds {
						if c.Err() == nil {
							c.SetErr(err)
						}
					}
				}
				return err
			}
		}
		return next(ctx, cmds)
	}
}

// rerun sends a command twice and returns the second reply, as go-redis
// does when the first reply is lost and its retry gets through.
func rerun(ctx context.Context, cmd redis.Cmder, next func() error) error {
	if err := next(); err != nil {
		return err
	}
	return next()
}

// leaseRenewals is a Hook on a consumer's lease renewals (lease.lua, on
// each bucket where it holds deliveries). A test that makes a consumer
// silent by failing its heartbeats fails these too (cutLeases), so that
// the consumer is cut off as a stopped process or a partition cuts it
// off, not only from the alive set's node.
func leaseRenewals(t *testing.T) *testutil.Hook {
	return testutil.HookScript(testutil.LoadScript(t, "../consumer/lease.lua"))
}

// cutLeases fails the lease renewals of the client it is added to while
// cut is true.
func cutLeases(t *testing.T, cut *atomic.Bool) *testutil.Hook {
	h := leaseRenewals(t)
	h.Set(func(ctx context.Context, cmds []redis.Cmder, next func() error) error {
		if !cut.Load() {
			return next()
		}
		err := errors.New("cut off")
		for _, cmd := range cmds {
			cmd.SetErr(err)
		}
		return err
	})
	return h
}

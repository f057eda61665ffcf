package testutil

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ErrReplyLost is the error a Hook gives a caller whose reply it lost
// after the server ran the command, as a read timeout or a reset
// connection does.
var ErrReplyLost = errors.New("read tcp: i/o timeout (simulated: reply lost)")

// ErrUnsent is the error a Hook gives a caller whose command it refused
// to send, as a dropped connection does.
var ErrUnsent = errors.New("i/o timeout (simulated: connection dropped, command not sent)")

// Around runs a matched command or pipeline: cmds are the commands sent
// together (one alone, or a whole pipeline), next sends them on (zero,
// one or more times); it returns the error the caller sees.
type Around func(ctx context.Context, cmds []redis.Cmder, next func() error) error

// Hook is a go-redis hook (add it with AddHook) that injects a fault into
// the round trips that carry a matching command: a run of one script
// (HookScript), or any command a predicate picks (HookMatch). A round
// trip without a match, or while no fault is armed, goes through
// untouched. Faults:
//   - LoseReply(n): the next n matched round trips run on the server,
//     then their matched commands fail with ErrReplyLost;
//   - RunTwice(n): the next n run twice and the caller sees the second
//     reply, as when go-redis resends a command whose reply was lost;
//   - Delay(d, n): the next n are held for d before they are sent;
//   - Refuse(true): every matched round trip fails with ErrUnsent, unsent,
//     until Refuse(false);
//   - Set(f): f runs every matched round trip, until Set(nil).
//
// Fired counts the faults injected.
type Hook struct {
	match func(redis.Cmder) bool

	mu     sync.Mutex
	lose   int
	twice  int
	delays int
	delay  time.Duration
	around Around
	refuse bool

	fired atomic.Int64
}

// HookScript returns a Hook matched by the runs of s (EVALSHA or EVAL).
func HookScript(s Script) *Hook { return HookMatch(s.RunBy) }

// HookMatch returns a Hook matched by the commands match picks.
func HookMatch(match func(redis.Cmder) bool) *Hook { return &Hook{match: match} }

// LoseReply arms the loss of the replies of the next n matched round
// trips.
func (h *Hook) LoseReply(n int) { h.mu.Lock(); h.lose = n; h.mu.Unlock() }

// RunTwice arms the double run of the next n matched round trips.
func (h *Hook) RunTwice(n int) { h.mu.Lock(); h.twice = n; h.mu.Unlock() }

// Delay arms a delay of d before each of the next n matched round trips.
func (h *Hook) Delay(d time.Duration, n int) {
	h.mu.Lock()
	h.delay, h.delays = d, n
	h.mu.Unlock()
}

// Refuse makes every matched round trip fail unsent while on.
func (h *Hook) Refuse(on bool) { h.mu.Lock(); h.refuse = on; h.mu.Unlock() }

// Set makes f run every matched round trip; nil stops it.
func (h *Hook) Set(f Around) { h.mu.Lock(); h.around = f; h.mu.Unlock() }

// Fired is the number of faults injected so far (each round trip f of Set
// ran counts one).
func (h *Hook) Fired() int64 { return h.fired.Load() }

// take picks the fault for the next matched round trip.
func (h *Hook) take() Around {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.refuse:
		return refuse
	case h.around != nil:
		return h.around
	case h.lose > 0:
		h.lose--
		return h.loseReply
	case h.twice > 0:
		h.twice--
		return h.runTwice
	case h.delays > 0:
		h.delays--
		d := h.delay
		return func(ctx context.Context, _ []redis.Cmder, next func() error) error {
			time.Sleep(d)
			return next()
		}
	}
	return nil
}

// ran reports whether a matched command of cmds got its reply.
func (h *Hook) ran(cmds []redis.Cmder) bool {
	for _, cmd := range cmds {
		if h.match(cmd) && cmd.Err() == nil {
			return true
		}
	}
	return false
}

func (h *Hook) loseReply(_ context.Context, cmds []redis.Cmder, next func() error) error {
	err := next()
	if !h.ran(cmds) {
		return err
	}
	for _, cmd := range cmds {
		if h.match(cmd) && cmd.Err() == nil {
			cmd.SetErr(ErrReplyLost)
		}
	}
	return ErrReplyLost
}

func refuse(_ context.Context, cmds []redis.Cmder, _ func() error) error {
	for _, cmd := range cmds {
		cmd.SetErr(ErrUnsent)
	}
	return ErrUnsent
}

func (h *Hook) runTwice(_ context.Context, cmds []redis.Cmder, next func() error) error {
	err := next()
	if !h.ran(cmds) {
		return err
	}
	return next()
}

func (h *Hook) process(ctx context.Context, cmds []redis.Cmder, next func() error) error {
	matched := false
	for _, cmd := range cmds {
		if h.match(cmd) {
			matched = true
			break
		}
	}
	if !matched {
		return next()
	}
	f := h.take()
	if f == nil {
		return next()
	}
	h.fired.Add(1)
	return f(ctx, cmds, next)
}

// DialHook is part of redis.Hook.
func (h *Hook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook is part of redis.Hook.
func (h *Hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return h.process(ctx, []redis.Cmder{cmd}, func() error { return next(ctx, cmd) })
	}
}

// ProcessPipelineHook is part of redis.Hook.
func (h *Hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return h.process(ctx, cmds, func() error { return next(ctx, cmds) })
	}
}

// Wrap is a go-redis hook that runs f around every command and pipeline
// of the client it is added to, matched or not.
type Wrap Around

// DialHook is part of redis.Hook.
func (f Wrap) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook is part of redis.Hook.
func (f Wrap) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		return f(ctx, []redis.Cmder{cmd}, func() error { return next(ctx, cmd) })
	}
}

// ProcessPipelineHook is part of redis.Hook.
func (f Wrap) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return f(ctx, cmds, func() error { return next(ctx, cmds) })
	}
}

// WrapPipelines is a go-redis hook that runs f around every pipeline of
// the client it is added to, and lets commands sent alone through.
type WrapPipelines Around

// DialHook is part of redis.Hook.
func (f WrapPipelines) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook is part of redis.Hook.
func (f WrapPipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

// ProcessPipelineHook is part of redis.Hook.
func (f WrapPipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		return f(ctx, cmds, func() error { return next(ctx, cmds) })
	}
}

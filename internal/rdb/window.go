package rdb

import (
	"context"
	"time"
)

// A script that keeps its reply under an op key, so that a rerun by
// go-redis after a lost reply answers as the first run did, is only as
// safe as the key lives: go-redis sends a command again after a read
// timeout, a broken connection or a failed dial, up to MaxRetries times,
// each attempt bounded by ReadTimeout, WriteTimeout, DialTimeout and
// PoolTimeout, which the caller's client sets (a ReadTimeout of 16 s and
// two lost replies put the third run 32 s after the first). Such calls
// therefore run under a ctx deadline RerunWindow (plus the wait for
// replicas) after they are first sent, which go-redis honours before and
// during every attempt, and the op key lives RerunMargin longer than
// that: a rerun reaches the server while the key is there, unless the
// server left it unread in its input for longer than the margin.
const (
	RerunWindow = 25 * time.Second
	RerunMargin = 5 * time.Second
)

// Window is how long after its first send a call under d may be sent
// again: RerunWindow, plus the WAIT for replicas when d is on.
func (d Durability) Window() time.Duration {
	if d.On() {
		return RerunWindow + d.Timeout
	}
	return RerunWindow
}

// OpTTL is how long the op key of a call under d must live.
func (d Durability) OpTTL() time.Duration { return d.Window() + RerunMargin }

// Bounded returns ctx with a deadline at most w from now, and its cancel.
func Bounded(ctx context.Context, w time.Duration) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= w {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, w)
}

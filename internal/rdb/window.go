package rdb

import (
	"context"
	"reflect"
	"time"

	"github.com/redis/go-redis/v9"
)

// A script that keeps its reply under an op key, so that a rerun by
// go-redis after a lost reply answers as the first run did, is only as
// safe as the key lives: go-redis sends a command again after a read
// timeout, a broken connection or a failed dial, up to MaxRetries times,
// each attempt bounded by ReadTimeout, WriteTimeout, DialTimeout and
// PoolTimeout, which the caller's client sets (a ReadTimeout of 16 s and
// two lost replies put the third run 32 s after the first). Such calls
// therefore run under a ctx deadline RerunWindow (plus the wait for
// replicas) after they are first sent, which go-redis checks before every
// attempt and while it waits for a connection or dials one. An attempt
// that started before the deadline may still be written later: on a new
// connection go-redis first reads the handshake's reply (HELLO), for up
// to ReadTimeout whatever the ctx unless ContextTimeoutEnabled, and a TLS
// handshake takes up to DialTimeout. The op key lives for the window,
// plus that slack (Slack), plus RerunMargin for the wait in the server's
// input: 45 s with go-redis's default options.
const (
	RerunWindow = 15 * time.Second
	RerunMargin = 5 * time.Second
	// blockingSlack stands for the handshake of a client whose reads have
	// no timeout, or of a kind whose options are unknown.
	blockingSlack = 30 * time.Second
)

// Window is how long after its first send a call under d may be sent
// again: RerunWindow, plus the WAIT for replicas when d is on.
func (d Durability) Window() time.Duration {
	if d.On() {
		return RerunWindow + d.Timeout
	}
	return RerunWindow
}

// Slack is how late after the window an attempt of c may be written: a
// dial (DialTimeout), then the handshake of the new connection, whose
// round trips (HELLO, CLIENT SETINFO, and SELECT when DB > 0) each write
// under WriteTimeout and read under ReadTimeout, as c's options set them.
// A read or write without a timeout, or a client of another kind, counts
// blockingSlack for each.
func Slack(c any) time.Duration {
	rounds := time.Duration(handshakeRounds)
	o, ok := timeoutsOf(c)
	if !ok {
		return blockingSlack + rounds*2*blockingSlack
	}
	if o.db > 0 {
		rounds++
	}
	read, write := o.read, o.write
	if read <= 0 {
		read = blockingSlack
	}
	if write <= 0 {
		write = blockingSlack
	}
	return o.dial + rounds*(read+write)
}

// TimeoutsSet reports whether go-redis bounds every read and write of c
// by a timeout: a *redis.Client or a *redis.ClusterClient (without a
// NewClient of its own, which may give its nodes other options) whose
// ReadTimeout and WriteTimeout, as go-redis keeps them, are positive (it
// keeps a -1 given, none, as 0, and a -2, no deadline set, as -1). Only
// then does a call that runs on its caller's goroutine end soon after its
// window.
func TimeoutsSet(c any) bool {
	o, ok := timeoutsOf(c)
	return ok && o.ownNodes && o.read > 0 && o.write > 0
}

// CutsAtDeadline reports whether go-redis ends every read and write of c
// at the deadline of the call's ctx: ContextTimeoutEnabled is set, and
// ReadTimeout and WriteTimeout set a deadline (a -2 given, kept as -1,
// sets none). A call with a deadline may then run on its caller's
// goroutine and still return by the deadline (go-redis's pool wait and
// retry backoff watch the ctx too); a cancel before the deadline ends it
// only at the deadline, as for any command of that client.
func CutsAtDeadline(c any) bool {
	o, ok := timeoutsOf(c)
	return ok && o.ownNodes && o.ctxTimeout && o.read >= 0 && o.write >= 0
}

// timeouts are the options of a go-redis client that bound its calls.
type timeouts struct {
	read, write, dial time.Duration
	db                int  // a *redis.Client's DB: SELECT on each new connection
	ownNodes          bool // a cluster's nodes take these options (go-redis's own NewClient)
	ctxTimeout        bool // ContextTimeoutEnabled
}

// timeoutsOf returns c's timeouts, as go-redis keeps them; ok is false for
// a client of another kind, whose options do not tell.
func timeoutsOf(c any) (t timeouts, ok bool) {
	switch c := c.(type) {
	case *redis.Client:
		o := c.Options()
		return timeouts{read: o.ReadTimeout, write: o.WriteTimeout, dial: o.DialTimeout, db: o.DB, ownNodes: true, ctxTimeout: o.ContextTimeoutEnabled}, true
	case *redis.ClusterClient:
		o := c.Options()
		return timeouts{read: o.ReadTimeout, write: o.WriteTimeout, dial: o.DialTimeout, ownNodes: ownNewClient(o.NewClient), ctxTimeout: o.ContextTimeoutEnabled}, true
	}
	return timeouts{}, false
}

// ownNewClient reports whether f is go-redis's own redis.NewClient, which
// a cluster client uses unless its options name another, and which
// builds each node's client with the cluster's timeouts.
func ownNewClient(f func(*redis.Options) *redis.Client) bool {
	return f == nil || reflect.ValueOf(f).Pointer() == reflect.ValueOf(redis.NewClient).Pointer()
}

// handshakeRounds is the round trips of go-redis's handshake on a new
// connection (HELLO, then CLIENT SETINFO), SELECT aside.
const handshakeRounds = 2

// MaxOpTTL is the longest op TTL the scripts take.
const MaxOpTTL = 24 * time.Hour

// OpTTL is how long the op key of a call of c under d must live, at most
// MaxOpTTL: a client whose timeouts add up to more (a day to dial, say)
// could resend a call after its key expired, and is documented so.
func OpTTL(c any, d Durability) time.Duration {
	return min(d.Window()+Slack(c)+RerunMargin, MaxOpTTL)
}

// Bounded returns ctx with a deadline at most w from now, and its cancel.
func Bounded(ctx context.Context, w time.Duration) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= w {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, w)
}

// Await runs f and returns its error, or ctx's error as soon as ctx ends.
// go-redis cuts a read short at ctx's deadline only when the caller's
// client sets ContextTimeoutEnabled, so a call that must return when its
// caller's ctx ends runs f on a goroutine of its own, which goes on under
// go-redis's timeouts. f must then not use what the caller may change
// once Await returned (see Detach). A ctx that can never end runs f here.
func Await(ctx context.Context, f func() error) error { return AwaitOn(ctx, false, f) }

// AwaitOn is Await for a call on a client that cuts its calls at their
// ctx's deadline or not (CutsAtDeadline): on one that does, a call whose
// ctx has a deadline runs here, and returns by the deadline, but not at
// a cancel before it.
func AwaitOn(ctx context.Context, cuts bool, f func() error) error {
	if Here(ctx, cuts) {
		return cutErr(ctx, f())
	}
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Detach replaces each byte slice among args with a copy of its own.
func Detach(args []any) { detach(args) }

// Here reports whether AwaitOn runs a call under ctx on its caller's
// goroutine: then the caller cannot return before the call is done, and
// the call may read the caller's buffers.
func Here(ctx context.Context, cuts bool) bool { return ctx.Done() == nil || cuts && hasDeadline(ctx) }

func hasDeadline(ctx context.Context) bool {
	_, ok := ctx.Deadline()
	return ok
}

// cutErr is err of a call run on its caller's goroutine, ctx's own error
// when ctx ended meanwhile (go-redis reports the deadline it cut at in
// its own words).
func cutErr(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

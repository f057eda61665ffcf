package consumer

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redeq-go/redeq/ack"
	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/pool"
	"github.com/redeq-go/redeq/ready"
)

// runOne runs item through r's execution, as a worker does, and returns
// the outcome it submitted, or nil when it submitted none.
func runOne(t *testing.T, rg *rig, item ready.Item) *ack.Outcome {
	t.Helper()
	r := rg.r
	members := r.dl.hold(0, []ready.Item{item})
	r.handle(delivery{bucket: 0, item: item, member: members[0], sent: time.Now()}, workerGuard(t, r))
	if r.dl.isRunning(0, members[0]) {
		t.Fatal("the delivery still counts as running after its handler returned")
	}
	select {
	case s := <-r.outs:
		r.submits.Wait()
		return &s.out
	default:
		return nil
	}
}

// TestExecute proves what running one job turns into: the outcome of
// each way a handler returns, the retry schedule, FinalRetry before the
// dead set, and a handler canceled by Shutdown giving its job back.
func TestExecute(t *testing.T) {
	boom := errors.New("boom")
	cases := []struct {
		name    string
		autoAck bool
		on      func(ctx context.Context, job *pool.Job, ch *ack.Channel) error
		op      ack.Op
		delay   time.Duration
		err     string
	}{
		{name: "AckAcks", on: acking, op: ack.OpAck},
		{name: "RejoinRejoins", op: ack.OpRejoin, delay: time.Minute,
			on: func(_ context.Context, _ *pool.Job, ch *ack.Channel) error { ch.Rejoin(time.Minute); return nil }},
		{name: "AckAndRejoinReAddsFresh", op: ack.OpAckRejoin, delay: time.Second,
			on: func(_ context.Context, _ *pool.Job, ch *ack.Channel) error {
				ch.Ack()
				ch.Rejoin(time.Second)
				return nil
			}},
		{name: "NeitherParksInUnAck", op: ack.OpUnAck,
			on: func(context.Context, *pool.Job, *ack.Channel) error { return nil }},
		{name: "NeitherWithAutoAckAcks", autoAck: true, op: ack.OpAck,
			on: func(context.Context, *pool.Job, *ack.Channel) error { return nil }},
		{name: "ErrorRetriesAfterTheFirstInterval", op: ack.OpRetry, delay: 3 * time.Second, err: "boom",
			on: func(context.Context, *pool.Job, *ack.Channel) error { return boom }},
		{name: "PanicIsAFailure", op: ack.OpRetry, delay: 3 * time.Second, err: "handler panicked: oops",
			on: func(context.Context, *pool.Job, *ack.Channel) error { panic("oops") }},
		{name: "TimeoutIsAFailure", op: ack.OpRetry, delay: 3 * time.Second, err: ErrConsumeTimeout.Error(),
			on: func(ctx context.Context, _ *pool.Job, ch *ack.Channel) error { <-ctx.Done(); ch.Ack(); return nil }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			l := &listener{topic: "t", workers: 1, on: c.on, opts: Options{ConsumeTimeout: 5 * time.Millisecond}}
			rg := newRig(t, l, rigOptions{cfg: func(cfg *config.Config) {
				cfg.AutoAck = c.autoAck
				cfg.RetryIntervals = []time.Duration{3 * time.Second, time.Minute}
			}})
			out := runOne(t, rg, job("j", 0))
			if out == nil {
				t.Fatal("no outcome submitted")
			}
			if out.Op != c.op || out.Delay != c.delay || out.ID != "j" || out.Token != "tok-j" {
				t.Fatalf("outcome %+v, want op %v delay %v for j's delivery", out, c.op, c.delay)
			}
			if !strings.Contains(out.Err, c.err) || (c.err == "") != (out.Err == "") {
				t.Fatalf("outcome's error %q, want one with %q", out.Err, c.err)
			}
		})
	}

	t.Run("LastFailureRunsFinalRetryThenGoesDead", func(t *testing.T) {
		var final *pool.Job
		var settledBefore bool
		var rg *rig
		l := &listener{topic: "t", workers: 1,
			on: func(context.Context, *pool.Job, *ack.Channel) error { return boom },
			final: func(ctx context.Context, job *pool.Job) {
				final = job
				settledBefore = len(rg.r.outs) > 0
			},
		}
		rg = newRig(t, finalListener{l}, rigOptions{cfg: func(cfg *config.Config) { cfg.Retry = 1 }})
		item := job("j", 0)
		item.Envelope = string(pool.Encode(pool.Header{CreatedMs: 1, Attempt: 1}, []byte("x")))
		out := runOne(t, rg, item)
		if final == nil || final.Attempt != 2 || final.LastError != "boom" {
			t.Fatalf("FinalRetry saw %+v, want attempt 2 with last error boom", final)
		}
		if settledBefore {
			t.Fatal("the outcome was submitted before FinalRetry returned")
		}
		if out == nil || out.Op != ack.OpDead || !strings.Contains(out.Reason, "failed 2 times") {
			t.Fatalf("outcome %+v, want dead after 2 failures", out)
		}
	})

	t.Run("FinalRetryCtxEndsWhenTheLeaseMayLapse", func(t *testing.T) {
		var cause error
		l := &listener{topic: "t", workers: 1,
			on: func(context.Context, *pool.Job, *ack.Channel) error { return boom },
			final: func(ctx context.Context, job *pool.Job) {
				select {
				case <-ctx.Done():
					cause = context.Cause(ctx)
				case <-time.After(10 * time.Second):
				}
			},
		}
		rg := newRig(t, finalListener{l}, rigOptions{cfg: func(cfg *config.Config) { cfg.Retry = 1 }})
		r := rg.r
		item := lastTry("j")
		members := r.dl.hold(0, []ready.Item{item})
		// The fetch's protection runs out 300 ms from now, and no
		// renewal gets through: FinalRetry is still running then.
		sent := time.Now().Add(-leaseWindow(rg.g.cfg.ConsumerTimeout) + 300*time.Millisecond)
		r.handle(delivery{bucket: 0, item: item, member: members[0], sent: sent}, workerGuard(t, r))
		if !errors.Is(cause, ErrLeaseLapsed) {
			t.Fatalf("FinalRetry's ctx ended with %v, want ErrLeaseLapsed", cause)
		}
		s := <-r.outs
		r.submits.Wait()
		if s.out.Op != ack.OpDead || s.out.Token != "tok-j" {
			t.Fatalf("outcome %+v, want j's delivery dead (fenced: it lands only while the job is still this delivery's)", s.out)
		}
	})

	t.Run("LeaseLapsedBeforeFinalRetryCallsNone", func(t *testing.T) {
		called := false
		clock := &shiftedClock{}
		l := &listener{topic: "t", workers: 1,
			final: func(context.Context, *pool.Job) { called = true },
		}
		rg := newRig(t, finalListener{l}, rigOptions{cfg: func(cfg *config.Config) { cfg.Retry = 1 }})
		rg.g.env.Clock = clock
		// The handler fails as its lease may lapse, by the consumer's
		// clock, before the guard's timer fires.
		l.on = func(context.Context, *pool.Job, *ack.Channel) error {
			clock.shift.Store(int64(rg.g.cfg.ConsumerTimeout))
			return boom
		}
		out := runOne(t, rg, lastTry("j"))
		if called {
			t.Fatal("FinalRetry was called for a delivery whose lease may have lapsed")
		}
		if out == nil || out.Op != ack.OpRejoin || out.Delay != 0 || out.Err != "" || out.Token != "tok-j" {
			t.Fatalf("outcome %+v, want j's delivery given back due now, unspent", out)
		}
	})

	t.Run("LeaseLapsedBeforeTheHandlerCallsNone", func(t *testing.T) {
		ran := false
		rg := newRig(t, &listener{topic: "t", workers: 1, on: func(context.Context, *pool.Job, *ack.Channel) error { ran = true; return nil }}, rigOptions{})
		r := rg.r
		item := job("j", 0)
		members := r.dl.hold(0, []ready.Item{item})
		// The fetch was sent a ConsumerTimeout ago and no renewal got
		// through since: its reply came late, and another consumer may
		// run the job by now.
		r.handle(delivery{bucket: 0, item: item, member: members[0], sent: time.Now().Add(-rg.g.cfg.ConsumerTimeout)}, workerGuard(t, r))
		if r.dl.isRunning(0, members[0]) {
			t.Fatal("the delivery still counts as running")
		}
		var out *ack.Outcome
		select {
		case s := <-r.outs:
			r.submits.Wait()
			out = &s.out
		default:
		}
		if ran {
			t.Fatal("the handler was called for a delivery whose lease may have lapsed")
		}
		if out == nil || out.Op != ack.OpRejoin || out.Delay != 0 || out.Err != "" || out.Token != "tok-j" {
			t.Fatalf("outcome %+v, want j's delivery given back due now, unspent", out)
		}
	})

	t.Run("CorruptEnvelopeGoesDead", func(t *testing.T) {
		ran := false
		rg := newRig(t, &listener{topic: "t", workers: 1, on: func(context.Context, *pool.Job, *ack.Channel) error { ran = true; return nil }}, rigOptions{})
		item := job("j", 0)
		item.Envelope = "not an envelope"
		out := runOne(t, rg, item)
		if ran || out == nil || out.Op != ack.OpDead || out.Reason == "" {
			t.Fatalf("handler ran: %v; outcome %+v, want dead with a reason", ran, out)
		}
	})

	t.Run("CanceledByShutdownGivesNoOutcome", func(t *testing.T) {
		// A handler that fails because Shutdown canceled it submits no
		// outcome: the rollback gives its job back, its attempt unspent.
		var rg *rig
		rg = newRig(t, &listener{topic: "t", workers: 1, on: func(ctx context.Context, _ *pool.Job, _ *ack.Channel) error {
			rg.handlerCancel()
			<-ctx.Done()
			return ctx.Err()
		}}, rigOptions{})
		if out := runOne(t, rg, job("j", 0)); out != nil {
			t.Fatalf("outcome %+v submitted for a handler canceled by Shutdown", out)
		}
	})

	t.Run("ListenerOptionsOverTheConfig", func(t *testing.T) {
		l := &listener{topic: "t", workers: 1, on: func(context.Context, *pool.Job, *ack.Channel) error { return boom },
			opts: Options{RetryIntervals: []time.Duration{7 * time.Second}}}
		rg := newRig(t, l, rigOptions{cfg: func(cfg *config.Config) { cfg.RetryIntervals = []time.Duration{time.Second} }})
		out := runOne(t, rg, job("j", 0))
		if out == nil || out.Op != ack.OpRetry || out.Delay != 7*time.Second {
			t.Fatalf("outcome %+v, want a retry after the listener's 7s", out)
		}
	})
}

// shiftedClock is the local clock moved on by shift.
type shiftedClock struct{ shift atomic.Int64 }

func (c *shiftedClock) Now() time.Time { return time.Now().Add(time.Duration(c.shift.Load())) }

// lastTry is a job whose next failure is its last under Retry = 1.
func lastTry(id string) ready.Item {
	item := job(id, 0)
	item.Envelope = string(pool.Encode(pool.Header{CreatedMs: 1, Attempt: 1}, []byte("x")))
	return item
}

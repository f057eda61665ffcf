package consumer

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redeq-go/redeq/ack"
	"github.com/redeq-go/redeq/pool"
)

// A worker's lease guard cancels only the handler it is armed for: a timer
// set for a job the worker ran before, firing after that job ended and the
// next began, cancels nothing; armed for a job whose lease may lapse soon,
// it cancels that job's handler with ErrLeaseLapsed.
func TestLeaseGuardCancelsOnlyTheJobItIsArmedFor(t *testing.T) {
	rg := newRig(t, &listener{topic: "t", workers: 1, on: func(context.Context, *pool.Job, *ack.Channel) error { return nil }}, rigOptions{})
	r := rg.r
	guard := workerGuard(t, r)
	window := leaseWindow(rg.g.cfg.ConsumerTimeout)
	const soon = 50 * time.Millisecond

	// The first job's lease may lapse in 50 ms; it ends at once, and the
	// worker's next job was fetched just now.
	first, firstCancel := context.WithCancelCause(context.Background())
	defer firstCancel(nil)
	guard.arm(delivery{bucket: 0, item: job("a", 0), sent: time.Now().Add(-window + soon)}, firstCancel)
	guard.stop()
	second, secondCancel := context.WithCancelCause(context.Background())
	defer secondCancel(nil)
	guard.arm(delivery{bucket: 0, item: job("b", 0), sent: time.Now()}, secondCancel)
	time.Sleep(4 * soon)
	if err := context.Cause(second); err != nil {
		t.Fatalf("the second job's handler was canceled (%v) by the first job's timer", err)
	}
	if err := context.Cause(first); err != nil {
		t.Fatalf("the first job's handler was canceled (%v) after it ended", err)
	}
	guard.stop()

	// Armed for a job whose lease may lapse in 50 ms, it cancels it.
	third, thirdCancel := context.WithCancelCause(context.Background())
	defer thirdCancel(nil)
	guard.arm(delivery{bucket: 0, item: job("c", 0), sent: time.Now().Add(-window + soon)}, thirdCancel)
	select {
	case <-third.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the handler of a job whose lease may lapse was not canceled")
	}
	if err := context.Cause(third); !errors.Is(err, ErrLeaseLapsed) {
		t.Fatalf("canceled with %v, want ErrLeaseLapsed", err)
	}
	if err := context.Cause(second); err != nil {
		t.Fatalf("the second job's handler was canceled (%v) after it ended", err)
	}
}

// workerGuard is a worker's lease guard of r, closed at the end of the test.
func workerGuard(t *testing.T, r *runner) *leaseGuard {
	g := newLeaseGuard(r)
	t.Cleanup(g.close)
	return g
}

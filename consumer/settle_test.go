package consumer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redeq-go/redeq/ack"
	"github.com/redeq-go/redeq/ready"
)

// TestSettle proves what the settler promises: a bucket whose outcomes
// cannot be applied holds up no other bucket's, and stops being fetched
// from at heldPerWorker times the workers; its outcomes are applied once it can; a lane
// under load settles two fetches' outcomes at once; and a delivery
// Shutdown kept in flight is concluded by its own worker.
func TestSettle(t *testing.T) {
	t.Run("LaneUnderLoadSettlesTwiceTheWorkersAtOnce", func(t *testing.T) {
		// Two workers. A lone outcome is settled at once; then, the lane
		// busy, eight jobs that ack at once are settled four at a time:
		// two fetches' outcomes (the lingers are lengthened out of the way,
		// so that each fetch is for both workers and the batch size ends a
		// lane's wait, long before the linger).
		const workers = 2
		log := &journal{}
		rg := newRig(t, &listener{topic: "t", workers: workers, on: acking}, rigOptions{log: log})
		rg.r.lingerFor, rg.r.lingerAfter = 500*time.Millisecond, 500*time.Millisecond
		rg.f.push(0, job("lone", 0))
		rg.start()
		eventually(t, "the lone job is settled", settled(log, "t", "lone"))
		for i := range 8 {
			rg.f.push(0, job(fmt.Sprint(i), 0))
		}
		rg.r.wake(0)
		eventually(t, "every job is settled", func() bool {
			for i := range 8 {
				if !settled(log, "t", fmt.Sprint(i))() {
					return false
				}
			}
			return true
		})
		var sizes []int
		for _, e := range log.all() {
			if e.kind == "settle" {
				sizes = append(sizes, len(e.ids))
			}
		}
		if !slices.Equal(sizes, []int{1, 2 * workers, 2 * workers}) {
			t.Fatalf("settles of %v outcomes, want [1 %d %d]: the lone one at once, then twice the workers:%s", sizes, 2*workers, 2*workers, describe(log))
		}
	})

	t.Run("FullLaneHoldsUpNoOtherBucket", func(t *testing.T) {
		const workers, jobs = 2, 40
		log := &journal{}
		rg := newRig(t, &listener{topic: "t", workers: workers, on: acking}, rigOptions{buckets: 2, log: log})
		var refusing atomic.Bool
		refusing.Store(true)
		refused := errors.New("READONLY")
		rg.a.setHook(func(ctx context.Context, b int) error {
			if b == 0 && refusing.Load() {
				return refused
			}
			return nil
		})
		for i := range jobs {
			rg.f.push(0, job(fmt.Sprintf("a%d", i), 0))
			rg.f.push(1, job(fmt.Sprintf("b%d", i), 0))
		}
		rg.start()
		for i := range jobs {
			eventually(t, fmt.Sprintf("b%d is settled", i), settled(log, "t", fmt.Sprintf("b%d", i)))
		}
		if n := fetchedFrom(log, 0); n > heldPerWorker*workers {
			t.Fatalf("%d jobs fetched from bucket 0 whose outcomes cannot be applied, want at most %d", n, heldPerWorker*workers)
		}
		if n := rg.r.dl.heldLen(0); n > heldPerWorker*workers {
			t.Fatalf("bucket 0 holds %d deliveries, want at most %d", n, heldPerWorker*workers)
		}
		refusing.Store(false)
		for i := range jobs {
			eventually(t, fmt.Sprintf("a%d is settled", i), settled(log, "t", fmt.Sprintf("a%d", i)))
		}
		for _, e := range log.all() {
			if e.kind == "settle" && len(e.ids) > maxSettle {
				t.Fatalf("a settle of %d outcomes, want at most %d", len(e.ids), maxSettle)
			}
		}
	})

	t.Run("StopAppliesTheOutcomesQueued", func(t *testing.T) {
		// Outcomes submitted before the settler is told to stop are
		// applied before it reports it is done.
		log := &journal{}
		rg := newRig(t, &listener{topic: "t", workers: 4, on: acking}, rigOptions{log: log})
		hold := make(chan struct{})
		rg.a.setHook(func(ctx context.Context, b int) error {
			<-hold
			return nil
		})
		r := rg.r
		go r.settle()
		for i := range 4 {
			r.submit(0, ack.Outcome{ID: fmt.Sprint(i), Token: "tok", Op: ack.OpAck})
		}
		close(r.stopSettle)
		close(hold)
		<-r.settlerDone
		for i := range 4 {
			if !settled(log, "t", fmt.Sprint(i))() {
				t.Fatalf("outcome %d not applied before the settler ended:%s", i, describe(log))
			}
		}
		r.submit(0, ack.Outcome{ID: "late", Op: ack.OpAck}) // dropped, never blocks
	})

	t.Run("KeptDeliveryIsConcludedByItsWorker", func(t *testing.T) {
		// Shutdown kept two deliveries in flight for their handlers and
		// stopped the settler: the one whose handler returns an outcome
		// applies it itself; the one canceled gives its job back.
		log := &journal{}
		rg := newRig(t, &listener{topic: "t", workers: 2, on: acking}, rigOptions{log: log})
		r, g := rg.r, rg.g
		items := []ready.Item{job("done", 0), job("canceled", 0)}
		members := r.dl.hold(0, items)
		for _, m := range members {
			r.dl.start(0, m)
		}
		_, n := r.dl.keepRunning(func() { g.keptWG.Add(1); g.keptN.Add(1) })
		if n != 2 || g.Kept() != 2 {
			t.Fatalf("kept %d (Kept %d), want 2", n, g.Kept())
		}
		close(r.settlerDone) // the settler is gone
		r.conclude(0, members[0], &ack.Outcome{ID: "done", Token: items[0].Token, Op: ack.OpAck})
		r.conclude(0, members[1], nil)
		if !g.WaitKept(context.Background()) || g.Kept() != 0 {
			t.Fatalf("Kept is %d after both concluded", g.Kept())
		}
		if !settled(log, "t", "done")() {
			t.Fatalf("the kept outcome was not applied:%s", describe(log))
		}
		if log.index(0, func(e event) bool { return e.kind == "release" && slices.Equal(e.ids, members[1:]) }) < 0 {
			t.Fatalf("the canceled delivery was not given back:%s", describe(log))
		}
	})
}

// fetchedFrom counts the jobs fetched from bucket b.
func fetchedFrom(log *journal, b int) int {
	n := 0
	for _, e := range log.all() {
		if e.kind == "fetch" && e.b == b && e.err == nil {
			n += len(e.ids)
		}
	}
	return n
}

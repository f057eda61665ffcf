package consumer

import (
	"sync"
	"testing"

	"github.com/redeq-go/redeq/ack"
	"github.com/redeq-go/redeq/ready"
)

// TestDeliveries proves the bookkeeping Shutdown and the dispatcher rely
// on: a delivery is held from its fetch until its outcome is settled, a
// running one is kept by keepRunning and then reported kept once to its
// worker, and an outcome counted on its way is never also kept.
func TestDeliveries(t *testing.T) {
	t.Run("HeldUntilSettled", func(t *testing.T) {
		d := newDeliveries(2)
		a, b := job("a", 0), job("b", 0)
		members := d.hold(1, []ready.Item{a, b})
		if d.idle() || d.heldLen(1) != 2 || d.heldLen(0) != 0 || !d.holds(1)(members[0]) || d.holds(0)(members[0]) {
			t.Fatal("fetched deliveries are not held in their bucket alone")
		}
		d.unhold(1, []ack.Outcome{{ID: "a", Token: a.Token}})
		if d.holds(1)(members[0]) || !d.holds(1)(members[1]) {
			t.Fatal("settling a unheld the wrong delivery")
		}
		d.unhold(1, []ack.Outcome{{ID: "b", Token: b.Token}})
		if !d.idle() {
			t.Fatal("not idle once every outcome is settled")
		}
	})

	t.Run("KeptOnceThenConcludedByItsWorker", func(t *testing.T) {
		d := newDeliveries(1)
		members := d.hold(0, []ready.Item{job("run", 0), job("waits", 0)})
		d.start(0, members[0])
		keep, n := d.keepRunning(func() {})
		if n != 1 || !keep[0][members[0]] || keep[0][members[1]] {
			t.Fatalf("kept %v, want only the running delivery", keep)
		}
		var pending sync.WaitGroup
		if !d.finish(0, members[0], &pending) {
			t.Fatal("the kept delivery's worker is not told it was kept")
		}
		if d.isRunning(0, members[0]) || d.anyRunning() {
			t.Fatal("still running after finish")
		}
		// Not kept twice: a second run of the same delivery is not.
		d.start(0, members[0])
		if d.finish(0, members[0], &pending) {
			t.Fatal("kept again after it was concluded")
		}
		pending.Done() // counted once, for the outcome not kept
		pending.Wait()
	})
}

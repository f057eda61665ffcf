package consumer

import (
	"sync"
	"time"

	"github.com/redeq-go/redeq/ack"
	"github.com/redeq-go/redeq/ready"
)

// deliveries is a runner's bookkeeping of its deliveries (in-flight
// members), per bucket, under one lock:
//   - held: from their fetch until their outcome is settled;
//   - running: their handler runs;
//   - kept: Shutdown left them in flight because their handler still ran
//     when it rolled back (see keepRunning): each worker concludes its own
//     when its handler returns.
//
// renewed is, per bucket, when the last renewal of this consumer's lease
// there that succeeded was sent (local clock): what leaseGuard counts
// from; since is when the unbroken run of renewals it ends began (each
// sent within the guard's window of the one before). A renewal after a
// gap (the process stopped, Redis unreachable) starts a new run: it does
// not cover a delivery whose protection had run out before it.
type deliveries struct {
	mu      sync.Mutex
	held    []map[string]bool
	running []map[string]bool
	kept    []map[string]bool
	renewed []time.Time
	since   []time.Time
}

func newDeliveries(buckets int) *deliveries {
	d := &deliveries{
		held:    make([]map[string]bool, buckets),
		running: make([]map[string]bool, buckets),
		kept:    make([]map[string]bool, buckets),
		renewed: make([]time.Time, buckets),
		since:   make([]time.Time, buckets),
	}
	for i := range buckets {
		d.held[i] = map[string]bool{}
		d.running[i] = map[string]bool{}
		d.kept[i] = map[string]bool{}
	}
	return d
}

// hold records items of bucket b as held and returns their in-flight
// members.
func (d *deliveries) hold(b int, items []ready.Item) []string {
	members := make([]string, len(items))
	d.mu.Lock()
	for i, it := range items {
		members[i] = it.Member()
		d.held[b][members[i]] = true
	}
	d.mu.Unlock()
	return members
}

// unhold forgets the deliveries of bucket b whose outcomes were settled.
func (d *deliveries) unhold(b int, outs []ack.Outcome) {
	d.mu.Lock()
	for _, o := range outs {
		delete(d.held[b], ready.Member(o.Token, o.ID))
	}
	d.mu.Unlock()
}

// start records that the handler of delivery member of bucket b runs.
func (d *deliveries) start(b int, member string) {
	d.mu.Lock()
	d.running[b][member] = true
	d.mu.Unlock()
}

// finish records that the handler of delivery member of bucket b
// returned, and reports whether Shutdown had kept the delivery in flight
// for it (it is no longer kept then). When it was not kept, pending (if
// not nil) counts one more outcome under the lock: a keepRunning that
// comes later sees the outcome on its way, never a delivery both kept and
// submitted.
func (d *deliveries) finish(b int, member string, pending *sync.WaitGroup) (kept bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.running[b], member)
	kept = d.kept[b][member]
	delete(d.kept[b], member)
	if !kept && pending != nil {
		pending.Add(1)
	}
	return kept
}

// anyRunning reports whether a handler runs.
func (d *deliveries) anyRunning() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, m := range d.running {
		if len(m) > 0 {
			return true
		}
	}
	return false
}

// keepRunning marks every delivery whose handler still runs as kept in
// flight, and returns them per bucket with their number: Shutdown's
// rollback leaves them, so that no other consumer runs a job while its
// handler here still winds down, and each worker concludes its own once
// its handler returned. onKeep runs for each, under the lock: before its
// finish sees it kept.
func (d *deliveries) keepRunning(onKeep func()) ([]map[string]bool, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	keep := make([]map[string]bool, len(d.running))
	n := 0
	for b, running := range d.running {
		keep[b] = map[string]bool{}
		for m := range running {
			d.kept[b][m] = true
			keep[b][m] = true
			onKeep()
			n++
		}
	}
	return keep, n
}

// runningIn reports whether a handler of bucket b runs.
func (d *deliveries) runningIn(b int) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.running[b]) > 0
}

// isRunning reports whether the handler of delivery member of bucket b
// runs.
func (d *deliveries) isRunning(b int, member string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.running[b][member]
}

// heldLen is how many deliveries of bucket b are held.
func (d *deliveries) heldLen(b int) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.held[b])
}

// heldBuckets returns the buckets in which a delivery is held, in order:
// those this consumer renews its lease on.
func (d *deliveries) heldBuckets() []int {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []int
	for b, h := range d.held {
		if len(h) > 0 {
			out = append(out, b)
		}
	}
	return out
}

// idle reports that no delivery is held: none running, none waiting for
// its outcome to be applied. Only then may a runner take a quarantined
// job, so that if that job kills the process, nothing else of its topic
// is in flight with it; and only while it holds its Quarantine slot, so
// that nothing else quarantined is either.
func (d *deliveries) idle() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, h := range d.held {
		if len(h) > 0 {
			return false
		}
	}
	return true
}

// holds tells, for bucket b, whether a delivery is held: what a reconcile
// of the bucket keeps in flight.
func (d *deliveries) holds(b int) func(member string) bool {
	return func(member string) bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.held[b][member]
	}
}

// renewedAt is when the last renewal of the lease on bucket b that
// succeeded was sent, and when the unbroken run of renewals it ends
// began; zero when none did.
func (d *deliveries) renewedAt(b int) (last, since time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.renewed[b], d.since[b]
}

// setRenewed records that a renewal of the lease on bucket b sent at sent
// succeeded; one sent more than window after the last starts a new run. A
// renewal sent earlier that answers later changes nothing.
func (d *deliveries) setRenewed(b int, sent time.Time, window time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !sent.After(d.renewed[b]) {
		return
	}
	if d.renewed[b].IsZero() || sent.Sub(d.renewed[b]) > window {
		d.since[b] = sent
	}
	d.renewed[b] = sent
}

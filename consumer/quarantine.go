package consumer

import "sync"

// Quarantine is the slot a quarantined job runs in (a job recovered
// ready.Quarantine times, which a fetch returns alone): at most one runner
// of the groups that share it runs such a job, or has claimed the right
// to fetch one, at a time. Two jobs recovered twice (a poison job, and a
// healthy one that ran beside it) are then never in flight together when
// the process dies.
//
// The promise is per process, whatever the clients and topics in it: the
// facade gives every client of the process the same Quarantine. Groups
// that share none get a slot of their own each.
type Quarantine struct {
	mu      sync.Mutex
	holder  chan struct{}          // the holder's wake channel; nil: free
	waiting map[chan struct{}]bool // to wake when the holder lets go
}

// NewQuarantine returns a free slot.
func NewQuarantine() *Quarantine { return &Quarantine{} }

// take makes the runner woken by wake the holder if there is none, and
// reports whether it is; when another holds the slot, wake is signaled
// once it lets go.
func (q *Quarantine) take(wake chan struct{}) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.holder == nil {
		q.holder = wake
	}
	if q.holder == wake {
		return true
	}
	if q.waiting == nil {
		q.waiting = map[chan struct{}]bool{}
	}
	q.waiting[wake] = true
	return false
}

// release ends the hold of the runner woken by wake, if it had it, and
// wakes the runners waiting for the slot.
func (q *Quarantine) release(wake chan struct{}) {
	q.mu.Lock()
	if q.holder != wake {
		q.mu.Unlock()
		return
	}
	q.holder = nil
	waiting := q.waiting
	q.waiting = nil
	q.mu.Unlock()
	for w := range waiting {
		signal(w)
	}
}

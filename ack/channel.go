package ack

import (
	"sync"
	"time"
)

// Channel carries a handler's answer about its job: Ack to finish it,
// Rejoin to run it again later, both to finish it and add it again fresh.
// It is safe for concurrent use; the answer counts only when the handler
// returns a nil error.
type Channel struct {
	mu     sync.Mutex
	acked  bool
	rejoin bool
	delay  time.Duration
}

// Ack marks the job done: it is removed when the handler returns nil.
func (ch *Channel) Ack() {
	ch.mu.Lock()
	ch.acked = true
	ch.mu.Unlock()
}

// Rejoin puts the job back into its bucket, due delay from when the
// handler returns, with its attempts unchanged. A negative delay counts as 0.
// The last call wins.
func (ch *Channel) Rejoin(delay time.Duration) {
	ch.mu.Lock()
	ch.rejoin = true
	ch.delay = max(delay, 0)
	ch.mu.Unlock()
}

// State returns the bits: acked, rejoined, and the rejoin delay.
func (ch *Channel) State() (acked, rejoined bool, delay time.Duration) {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return ch.acked, ch.rejoin, ch.delay
}

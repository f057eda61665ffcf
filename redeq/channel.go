package redeq

import (
	"time"

	"github.com/redeq-go/redeq/ack"
)

// Channel carries a handler's answer about its job: Ack to finish it,
// Rejoin to run it again later, both to finish it and add it again fresh
// after the delay. Neither parks the job in un_ack (unless AutoAck). The
// answer counts only when the handler returns nil: an error, a panic or a
// timeout is a failure, and the job is retried on its schedule. A Channel
// is safe for concurrent use; its zero value is ready, for a handler's
// own tests.
type Channel ack.Channel

// Ack marks the job done: it is removed when the handler returns nil.
func (ch *Channel) Ack() { (*ack.Channel)(ch).Ack() }

// Rejoin puts the job back into its bucket, due delay after the handler
// returns, with its attempts unchanged. A negative delay counts as 0. The
// last call wins.
func (ch *Channel) Rejoin(delay time.Duration) { (*ack.Channel)(ch).Rejoin(delay) }

// State returns the answer so far: whether Ack and Rejoin were called, and
// the rejoin delay. A handler's own tests read it.
func (ch *Channel) State() (acked, rejoined bool, delay time.Duration) {
	return (*ack.Channel)(ch).State()
}

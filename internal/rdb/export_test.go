package rdb

// MaxInFlight is how many round trips a Committer has under way at most.
const MaxInFlight = 1

// Queued returns how many calls wait for a round trip.
func (c *Committer) Queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}

package rdb

// MaxInFlight is maxInFlight, for tests.
const MaxInFlight = maxInFlight

// Queued returns how many calls wait for a round trip.
func (c *Committer) Queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}

// Package env carries what every component needs from its surroundings: the
// local clock and the logger.
//
// Due times never come from here: they come from the Redis server's TIME
// inside the scripts, so that clients with skewed clocks agree. The local
// clock only measures local things, such as when a lock was last extended.
package env

import (
	"log/slog"
	"time"
)

// Clock tells the local time.
type Clock interface {
	Now() time.Time
}

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// System is the machine's clock.
var System Clock = systemClock{}

// Env is the clock and the logger of one client.
type Env struct {
	Clock  Clock
	Logger *slog.Logger
}

// New returns an Env with the system clock and logger (slog.Default when nil).
func New(logger *slog.Logger) Env {
	if logger == nil {
		logger = slog.Default()
	}
	return Env{Clock: System, Logger: logger}
}

// Backoff is the wait after consecutive failures of a background loop:
// Min, doubling up to Max. The zero value waits 50ms up to 5s.
type Backoff struct {
	Min, Max time.Duration
	fails    int
}

// Next records a failure and returns how long to wait.
func (b *Backoff) Next() time.Duration {
	lo, hi := b.Min, b.Max
	if lo <= 0 {
		lo = 50 * time.Millisecond
	}
	if hi <= 0 {
		hi = 5 * time.Second
	}
	d := lo << min(b.fails, 20)
	b.fails++
	return min(d, hi)
}

// Failing reports whether the last attempt failed.
func (b *Backoff) Failing() bool { return b.fails > 0 }

// Reset records a success.
func (b *Backoff) Reset() { b.fails = 0 }

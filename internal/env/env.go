package env

import (
	"context"
	"log/slog"
	"sync"
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
	limit  *limiter
}

// New returns an Env with the system clock and logger (slog.Default when nil).
func New(logger *slog.Logger) Env {
	if logger == nil {
		logger = slog.Default()
	}
	return Env{Clock: System, Logger: logger, limit: &limiter{last: map[string]time.Time{}, quiet: map[string]int{}}}
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

// failureLogEvery bounds how often one kind of background failure is
// logged: during a Redis outage every loop of every bucket fails at once.
const failureLogEvery = 10 * time.Second

// limiter remembers when each kind of failure was last logged.
type limiter struct {
	mu    sync.Mutex
	last  map[string]time.Time
	quiet map[string]int
}

// Failure logs msg at Warn, at most once per 10s for each msg across the
// client's loops, counting the ones it kept quiet in between ("repeats").
func (e Env) Failure(msg string, args ...any) { e.limited(slog.LevelWarn, msg, args) }

// Recovery logs msg at Info, as Failure does: when every bucket recovers
// from one outage at once, it says so once.
func (e Env) Recovery(msg string, args ...any) { e.limited(slog.LevelInfo, msg, args) }

func (e Env) limited(level slog.Level, msg string, args []any) {
	if e.limit == nil {
		e.Logger.Log(context.Background(), level, msg, args...)
		return
	}
	now := e.Clock.Now()
	l := e.limit
	l.mu.Lock()
	if t, ok := l.last[msg]; ok && now.Sub(t) < failureLogEvery {
		l.quiet[msg]++
		l.mu.Unlock()
		return
	}
	n := l.quiet[msg]
	l.last[msg], l.quiet[msg] = now, 0
	l.mu.Unlock()
	if n > 0 {
		args = append(args, "repeats", n)
	}
	e.Logger.Log(context.Background(), level, msg, args...)
}

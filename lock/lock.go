package lock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// Locker makes mutexes on one Redis deployment.
type Locker struct {
	rs *redsync.Redsync
}

// New returns a Locker over c.
func New(c redis.UniversalClient) *Locker {
	return &Locker{rs: redsync.New(goredis.NewPool(c))}
}

// Option sets up a Mutex.
type Option func(*options)

type options struct {
	expiry time.Duration
}

// WithExpiry sets how long the lock lives unless extended. Defaults to 20s.
func WithExpiry(d time.Duration) Option { return func(o *options) { o.expiry = d } }

// Mutex is a lock on one key. It is not safe for concurrent use: each
// background loop owns its own.
type Mutex struct {
	m      *redsync.Mutex
	expiry time.Duration
	held   bool
	until  time.Time
}

// NewMutex returns an unheld mutex on key.
func (l *Locker) NewMutex(key string, opts ...Option) *Mutex {
	o := options{expiry: 20 * time.Second}
	for _, opt := range opts {
		opt(&o)
	}
	return &Mutex{
		// Each call may take a fifth of the expiry (redsync's default, a
		// twentieth, gave up after 100ms with a 2s expiry on a busy server).
		m:      l.rs.NewMutex(key, redsync.WithExpiry(o.expiry), redsync.WithTries(1), redsync.WithTimeoutFactor(0.2)),
		expiry: o.expiry,
	}
}

// TryLock takes the lock if it is free, without waiting. Another holder is
// a normal outcome (false, nil); the error is a Redis failure.
func (m *Mutex) TryLock(ctx context.Context) (bool, error) {
	err := m.m.TryLockContext(ctx)
	var taken *redsync.ErrTaken
	switch {
	case err == nil:
		m.held, m.until = true, m.m.Until()
		return true, nil
	case errors.Is(err, redsync.ErrFailed), errors.As(err, &taken):
		m.held = false
		return false, nil
	default:
		m.held = false
		return false, fmt.Errorf("lock %s: %w", m.m.Name(), err)
	}
}

// Held reports whether this mutex believes it holds the lock and has not
// outlived its expiry.
func (m *Mutex) Held(now time.Time) bool { return m.held && now.Before(m.until) }

// ExtendDue reports whether a third of the expiry has passed since the lock
// was taken or last extended, so that Extend is worth a round trip.
func (m *Mutex) ExtendDue(now time.Time) bool {
	return m.held && m.until.Sub(now) < m.expiry*2/3
}

// Extend renews the lock for another expiry. false means it was lost (it
// expired and may have been taken by another client). A Redis error leaves
// the lock held until its known expiry: the key is still ours until then,
// and the caller retries.
func (m *Mutex) Extend(ctx context.Context) (bool, error) {
	ok, err := m.m.ExtendContext(ctx)
	if err != nil && !errors.Is(err, redsync.ErrExtendFailed) && !isTaken(err) {
		return m.Held(time.Now()), fmt.Errorf("extend lock %s: %w", m.m.Name(), err)
	}
	m.held = ok
	if ok {
		m.until = m.m.Until()
	}
	return ok, nil
}

// Unlock releases the lock if held. Releasing a lock another client took
// after ours expired is a no-op.
func (m *Mutex) Unlock(ctx context.Context) error {
	if !m.held {
		return nil
	}
	m.held = false
	if _, err := m.m.UnlockContext(ctx); err != nil && !isTaken(err) && !errors.Is(err, redsync.ErrLockAlreadyExpired) {
		return fmt.Errorf("unlock %s: %w", m.m.Name(), err)
	}
	return nil
}

func isTaken(err error) bool {
	var taken *redsync.ErrTaken
	return errors.As(err, &taken)
}

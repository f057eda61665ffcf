package bucket

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/internal/env"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/lock"
)

// MoverConfig is what the mover needs of the client's settings.
type MoverConfig struct {
	Prefix       string
	ScanInterval time.Duration
	MoveBatch    int
	LockExpiry   time.Duration
}

// Mover carries due jobs from every known topic's buckets to their ready
// lists. For each bucket it tries the bucket's lock; the holder moves due
// jobs in bounded batches, sleeps until the next due time, and is woken
// early by Wake. A non-holder retries the lock every LockExpiry/4 and, on
// every other scan, moves the jobs overdue by more than two ScanIntervals:
// none while the holder lives, and a dead holder's due jobs within seconds
// rather than after its lock expires. Moves are atomic, so two movers
// never move a job twice.
type Mover struct {
	rdb     redis.UniversalClient
	locker  *lock.Locker
	reg     *Registry
	cfg     MoverConfig
	env     env.Env
	onReady func(topic string, n int)

	mu      sync.Mutex
	loops   map[string]chan struct{} // bucket address -> wake signal
	refresh chan struct{}
}

// NewMover returns a Mover. onReady, if not nil, is called after a move put
// jobs on a ready list, so local fetchers need not wait for pub/sub.
func NewMover(c redis.UniversalClient, locker *lock.Locker, reg *Registry, cfg MoverConfig, e env.Env, onReady func(topic string, n int)) *Mover {
	return &Mover{
		rdb: c, locker: locker, reg: reg, cfg: cfg, env: e, onReady: onReady,
		loops:   map[string]chan struct{}{},
		refresh: make(chan struct{}, 1),
	}
}

// Wake asks the holder of the bucket at address (topic#n) to move now. An
// unknown topic makes the mover reread the topic set.
func (m *Mover) Wake(address string) {
	m.mu.Lock()
	ch, ok := m.loops[address]
	m.mu.Unlock()
	if ok {
		signal(ch)
	} else {
		signal(m.refresh)
	}
}

// Refresh makes the mover reread the topic set soon.
func (m *Mover) Refresh() { signal(m.refresh) }

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Run moves every known topic until ctx ends, then releases its locks and
// returns once every bucket loop has stopped.
func (m *Mover) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	every := 5 * m.cfg.ScanInterval
	var bo env.Backoff
	bo.Max = every
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-m.refresh:
		}
		wait := every
		topics, err := m.reg.Topics(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			wait = bo.Next()
			m.env.Logger.Warn("redeq: mover cannot list topics", "err", err, "retry_in", wait)
		} else {
			bo.Reset()
			for topic, n := range topics {
				for b := range n {
					addr := keys.Address(topic, b)
					m.mu.Lock()
					_, running := m.loops[addr]
					if !running {
						wake := make(chan struct{}, 1)
						m.loops[addr] = wake
						wg.Go(func() { m.runBucket(ctx, topic, b, wake) })
					}
					m.mu.Unlock()
				}
			}
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
	}
}

// runBucket is the loop of one bucket.
func (m *Mover) runBucket(ctx context.Context, topic string, n int, wake chan struct{}) {
	log := m.env.Logger.With("topic", topic, "bucket", n)
	mu := m.locker.NewMutex(keys.ForBucket(m.cfg.Prefix, topic, n).Lock(), lock.WithExpiry(m.cfg.LockExpiry))
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		if err := mu.Unlock(uctx); err != nil {
			log.Warn("redeq: mover cannot release its lock", "err", err)
		}
	}()
	bo := env.Backoff{Max: 4 * m.cfg.ScanInterval}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var lastTry time.Time
	for ctx.Err() == nil {
		wait, held := m.step(ctx, topic, n, mu, &lastTry, &bo, log)
		if wait == 0 {
			continue // a full batch: more may be due
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
		if !held {
			// Only the holder acts on wake-ups; drop them meanwhile.
			select {
			case <-wake:
			default:
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-wake:
		}
	}
}

// step takes or keeps the lock and, when held, moves one batch. It returns
// how long to wait before the next step (0: go on at once) and whether the
// lock is held.
func (m *Mover) step(ctx context.Context, topic string, n int, mu *lock.Mutex, lastTry *time.Time, bo *env.Backoff, log interface {
	Warn(string, ...any)
	Info(string, ...any)
}) (time.Duration, bool) {
	now := m.env.Clock.Now()
	var err error
	held := mu.Held(now)
	switch {
	case !held && now.Sub(*lastTry) >= m.cfg.LockExpiry/4:
		*lastTry = now
		held, err = mu.TryLock(ctx)
	case !held:
		// Someone else holds the lock: only pick up what it leaves behind.
		var res MoveResult
		if res, err = moveOverdue(ctx, m.rdb, m.cfg.Prefix, topic, n, m.cfg.MoveBatch, 2*m.cfg.ScanInterval); err == nil {
			bo.Reset()
			if res.Moved > 0 {
				log.Warn("redeq: moved jobs the bucket's lock holder left overdue", "jobs", res.Moved)
				if m.onReady != nil {
					m.onReady(topic, n)
				}
			}
			if res.Moved >= m.cfg.MoveBatch {
				return 0, false
			}
			return m.cfg.ScanInterval, false
		}
	case mu.ExtendDue(now):
		held, err = mu.Extend(ctx)
	}
	if err == nil && held {
		var res MoveResult
		res, err = Move(ctx, m.rdb, m.cfg.Prefix, topic, n, m.cfg.MoveBatch)
		if err == nil {
			if bo.Failing() {
				log.Info("redeq: mover recovered")
			}
			bo.Reset()
			if res.Moved > 0 && m.onReady != nil {
				m.onReady(topic, n)
			}
			if res.Moved >= m.cfg.MoveBatch {
				return 0, true
			}
			wait := m.cfg.ScanInterval
			if !res.Next.IsZero() {
				wait = min(wait, max(res.Next.Sub(res.Now), time.Millisecond))
			}
			return wait, true
		}
	}
	if err != nil {
		if ctx.Err() != nil {
			return m.cfg.ScanInterval, held
		}
		wait := bo.Next()
		log.Warn("redeq: mover failed", "err", err, "retry_in", wait)
		return wait, held
	}
	bo.Reset()
	return m.cfg.ScanInterval, false
}

package consumer

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/internal/env"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/rdb"
	"github.com/redeq-go/redeq/lock"
)

var (
	//go:embed recover.lua
	recoverSource string
	recoverScript = redis.NewScript(recoverSource)
	//go:embed silent.lua
	silentSource string
	silentScript = redis.NewScript(silentSource)
	//go:embed forget.lua
	forgetSource string
	forgetScript = redis.NewScript(forgetSource)
)

const (
	modeRecover  = "recover"
	modeRollback = "rollback"
	// recoverBatch bounds the deliveries one recover script call handles.
	recoverBatch = 500
	// silentBatch bounds the silent consumers one reaper pass handles per topic.
	silentBatch = 100
)

// ReapInterval is how often the reaper looks for silent consumers: a fifth
// of ConsumerTimeout, so a crashed consumer's jobs run again within about
// 1.2 x ConsumerTimeout after its last heartbeat (plus HeartbeatInterval
// when it fetched just before it died).
func (g *Group) ReapInterval() time.Duration { return g.cfg.ConsumerTimeout / 5 }

// reapLoop reaps every ReapInterval. After its own calls to Redis failed
// (an outage, a partition), it waits a full ConsumerTimeout of working
// calls before it reaps again: every live consumer was cut off too, and
// must get the chance to heartbeat before anyone counts it as dead.
func (g *Group) reapLoop(ctx context.Context) {
	t := time.NewTimer(g.ReapInterval())
	defer t.Stop()
	var bo env.Backoff
	bo.Max = g.cfg.ConsumerTimeout
	healthySince := g.env.Clock.Now()
	last, wait := healthySince, g.ReapInterval()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if now := g.env.Clock.Now(); now.Sub(last) > wait+2*g.ReapInterval() {
			healthySince = now // this process itself stalled (a pause, a stop)
		}
		wait = g.ReapInterval()
		_, err := g.reap(ctx, g.env.Clock.Now().Sub(healthySince) >= g.cfg.ConsumerTimeout)
		last = g.env.Clock.Now()
		switch {
		case err == nil:
			bo.Reset()
		case ctx.Err() != nil:
			return
		case errors.Is(err, errStalled):
			healthySince = last
			g.env.Logger.Info("redeq: redis answered late; the reaper waits a ConsumerTimeout before reaping")
		default:
			if errors.Is(err, errUnreachable) {
				healthySince = last
			}
			wait = bo.Next()
			g.env.Failure("redeq: reaper failed", "err", err, "retry_in", wait)
		}
		t.Reset(wait)
	}
}

var (
	// errUnreachable marks a reaper pass that could not read any topic.
	errUnreachable = errors.New("redeq: reaper cannot reach redis")
	// errStalled marks a pass whose look for silent consumers took longer
	// than a ReapInterval: Redis was paused or overloaded, and live
	// consumers' heartbeats may be waiting behind it.
	errStalled = errors.New("redeq: reaper pass stalled")
)

// Reap recovers the in-flight jobs of every consumer silent for longer
// than ConsumerTimeout, in every known topic, and returns how many jobs it
// handed back. Each topic is reaped on its own, under its own lock: a topic
// whose Redis node fails does not hold up the others.
func (g *Group) Reap(ctx context.Context) (int, error) { return g.reap(ctx, true) }

func (g *Group) reap(ctx context.Context, act bool) (int, error) {
	start := g.env.Clock.Now()
	topics, err := g.reg.Topics(ctx)
	if topics == nil {
		return 0, fmt.Errorf("%w: %w", errUnreachable, err)
	}
	var errs []error
	if err != nil {
		errs = append(errs, fmt.Errorf("reaper: %w", err)) // some topics unreadable: reap the rest
	}
	if len(topics) == 0 {
		return 0, errors.Join(errs...)
	}
	names := make([]string, 0, len(topics))
	calls := make([]rdb.Call, 0, len(topics))
	for t := range topics {
		if g.reaps != nil && !g.reaps(t) {
			continue // another client reaps it
		}
		names = append(names, t)
		calls = append(calls, rdb.Call{
			Keys: []string{keys.ForTopic(g.cfg.Prefix, t).Consumers()},
			Args: []any{g.cfg.ConsumerTimeout.Milliseconds(), silentBatch},
		})
	}
	if len(calls) == 0 {
		return 0, errors.Join(errs...)
	}
	// Each command carries its own reply or error (a cluster splits the
	// pipeline per node): read them one by one.
	cmds := rdb.RunPipelined(ctx, g.rdb, silentScript, calls)
	stalled := g.env.Clock.Now().Sub(start) > g.ReapInterval()
	if stalled {
		act = false
	}
	total, failed := 0, 0
	for i, cmd := range cmds {
		silent, err := cmd.StringSlice()
		if err != nil {
			failed++
			errs = append(errs, fmt.Errorf("reaper %s: %w", names[i], err))
			continue
		}
		var others []string
		for _, cid := range silent {
			if cid != g.cid {
				others = append(others, cid)
			}
		}
		if len(others) == 0 || !act {
			continue
		}
		n, err := g.reapTopic(ctx, names[i], topics[names[i]], others)
		total += n
		if err != nil {
			errs = append(errs, err)
		}
	}
	if failed == len(cmds) {
		return total, fmt.Errorf("%w: %w", errUnreachable, errors.Join(errs...))
	}
	if stalled && len(errs) == 0 {
		return total, errStalled
	}
	return total, errors.Join(errs...)
}

// reapTopic recovers the deliveries of the silent consumers cids of topic,
// bucket by bucket, then forgets each consumer that is still silent and
// whose every bucket was recovered in full.
func (g *Group) reapTopic(ctx context.Context, topic string, buckets int, cids []string) (int, error) {
	tk := keys.ForTopic(g.cfg.Prefix, topic)
	mu := g.locker.NewMutex(tk.ReaperLock(), lock.WithExpiry(g.cfg.LockExpiry))
	held, err := mu.TryLock(ctx)
	if err != nil || !held {
		if err != nil {
			return 0, fmt.Errorf("reaper %s: %w", topic, err)
		}
		return 0, nil // another client reaps this topic now
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = mu.Unlock(uctx)
	}()
	total := 0
	var errs []error
	for _, cid := range cids {
		clean, recovered := true, 0
		for b := range buckets {
			n, busy, err := g.recoverList(ctx, topic, b, cid, modeRecover)
			recovered += n
			if err != nil {
				errs = append(errs, err)
				clean = false
			} else if busy {
				clean = false // it fetched lately: alive, or not quiet long enough yet
			}
		}
		total += recovered
		g.returned(topic, recovered, true)
		if recovered > 0 {
			g.env.Logger.Info("redeq: recovered the jobs of a silent consumer", "topic", topic, "consumer", cid, "jobs", recovered)
		}
		if clean {
			err := forgetScript.Run(ctx, g.rdb, []string{tk.Consumers()}, cid, g.cfg.ConsumerTimeout.Milliseconds()).Err()
			if err != nil {
				errs = append(errs, fmt.Errorf("reaper %s: %w", topic, err))
			}
		}
	}
	return total, errors.Join(errs...)
}

// recoverList empties one in-flight set of consumer cid in bucket b of
// topic, in bounded script calls, and returns the deliveries handled. In
// recover mode it does nothing, and reports busy, while the set holds a
// delivery fetched within the last ConsumerTimeout.
func (g *Group) recoverList(ctx context.Context, topic string, b int, cid, mode string) (n int, busy bool, err error) {
	k := keys.ForBucket(g.cfg.Prefix, topic, b)
	for {
		v, err := recoverScript.Run(ctx, g.rdb,
			[]string{k.InFlight(cid), k.Ready(), k.Pool(), k.Scheduled(), k.Dead(), k.Reasons(), k.State(), k.Errors()},
			mode, recoverBatch, g.cfg.MaxRecoveries, g.cfg.DeadRetention,
			keys.ReadyChannel(g.cfg.Prefix), keys.WakeChannel(g.cfg.Prefix), keys.Address(topic, b),
			cid, g.cfg.ConsumerTimeout.Milliseconds()).Int64Slice()
		if err != nil {
			return n, false, fmt.Errorf("%s %s of %s: %w", mode, keys.Address(topic, b), cid, err)
		}
		if len(v) != 4 {
			return n, false, fmt.Errorf("%s %s: bad reply %v", mode, keys.Address(topic, b), v)
		}
		n += int(v[0])
		if v[2] > 0 {
			g.env.Logger.Warn("redeq: jobs recovered too often sent to the dead set", "topic", topic, "bucket", b, "jobs", v[2])
		}
		if v[3] == 1 {
			return n, true, nil
		}
		if v[1] == 0 {
			return n, false, nil
		}
	}
}

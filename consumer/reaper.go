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
	//go:embed gone.lua
	goneSource string
	goneScript = redis.NewScript(goneSource)
)

const (
	modeRecover  = "recover"
	modeRollback = "rollback"
	// recoverBatch bounds the deliveries one recover script call handles.
	recoverBatch = 500
	// maxMembers bounds the consumers of a topic one reaper pass reads.
	maxMembers = 1000
	// aliveChunk bounds the consumer ids one heartbeat read sends.
	aliveChunk = 500
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
	names := make([]string, 0, len(topics))
	for t := range topics {
		if g.reaps == nil || g.reaps(t) {
			names = append(names, t)
		}
	}
	if len(names) == 0 {
		return 0, errors.Join(errs...)
	}
	members, failed, err := g.members(ctx, names)
	if err != nil {
		errs = append(errs, err)
	}
	if failed == len(names) {
		return 0, fmt.Errorf("%w: %w", errUnreachable, errors.Join(errs...))
	}
	silent, err := g.silent(ctx, members)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", errUnreachable, errors.Join(append(errs, err)...))
	}
	if g.env.Clock.Now().Sub(start) > g.ReapInterval() {
		return 0, errors.Join(append(errs, errStalled)...) // heartbeats may be waiting behind the reads
	}
	total := 0
	for i, topic := range names {
		var found []member
		for _, m := range members[i] {
			if silent(m) {
				found = append(found, m)
			}
		}
		if len(found) == 0 || !act {
			continue
		}
		n, err := g.reapTopic(ctx, topic, topics[topic], found)
		total += n
		if err != nil {
			errs = append(errs, err)
		}
	}
	return total, errors.Join(errs...)
}

// member is a consumer of a topic, as its consumer set records it.
type member struct {
	cid    string
	joined float64 // when it joined, unix ms (Redis clock)
}

// members reads the consumer sets of topics (this consumer left out), in
// one pipeline; failed counts the topics that could not be read.
func (g *Group) members(ctx context.Context, topics []string) (out [][]member, failed int, err error) {
	pipe := g.rdb.Pipeline()
	cmds := make([]*redis.ZSliceCmd, len(topics))
	for i, t := range topics {
		cmds[i] = pipe.ZRangeWithScores(ctx, keys.ForTopic(g.cfg.Prefix, t).Consumers(), 0, maxMembers-1)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	out = make([][]member, len(topics))
	var errs []error
	for i, cmd := range cmds {
		zs, err := cmd.Result()
		if err != nil {
			failed++
			errs = append(errs, fmt.Errorf("reaper %s: %w", topics[i], err))
			continue
		}
		for _, z := range zs {
			if cid, _ := z.Member.(string); cid != g.cid {
				out[i] = append(out[i], member{cid, z.Score})
			}
		}
	}
	return out, failed, errors.Join(errs...)
}

// silent reads the heartbeats of every consumer in members and returns
// whether a member is silent: its last heartbeat is older than
// ConsumerTimeout, or it has none (a reaper forgot it, or the entry was
// lost) and it joined longer ago than that.
func (g *Group) silent(ctx context.Context, members [][]member) (func(member) bool, error) {
	seen := map[string]int64{}
	var cids []string
	for _, ms := range members {
		for _, m := range ms {
			if _, ok := seen[m.cid]; !ok {
				seen[m.cid] = 0
				cids = append(cids, m.cid)
			}
		}
	}
	if len(cids) == 0 {
		return func(member) bool { return false }, nil
	}
	var cut int64
	alive := keys.Alive(g.cfg.Prefix)
	for from := 0; from < len(cids); from += aliveChunk {
		chunk := cids[from:min(len(cids), from+aliveChunk)]
		args := make([]any, 0, len(chunk)+1)
		args = append(args, g.cfg.ConsumerTimeout.Milliseconds())
		for _, cid := range chunk {
			args = append(args, cid)
		}
		v, err := silentScript.Run(ctx, g.rdb, []string{alive}, args...).Int64Slice()
		if err != nil {
			return nil, fmt.Errorf("reaper: heartbeats: %w", err)
		}
		if len(v) != len(chunk)+1 {
			return nil, fmt.Errorf("reaper: heartbeats: bad reply %v", v)
		}
		cut = v[0]
		for i, cid := range chunk {
			seen[cid] = v[i+1]
		}
	}
	return func(m member) bool {
		switch seen[m.cid] {
		case 1:
			return true
		case 2:
			return m.joined < float64(cut)
		}
		return false
	}, nil
}

// reapTopic recovers the deliveries of the silent consumers found of
// topic, bucket by bucket, then forgets each consumer whose every bucket
// was recovered in full. It first takes the consumer out of the alive set,
// while it is still silent: if it comes back, its heartbeat finds itself
// gone and it joins its topics again.
func (g *Group) reapTopic(ctx context.Context, topic string, buckets int, found []member) (int, error) {
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
	timeout := g.cfg.ConsumerTimeout.Milliseconds()
	for _, m := range found {
		gone, err := goneScript.Run(ctx, g.rdb, []string{keys.Alive(g.cfg.Prefix)}, m.cid, timeout).Int64()
		if err != nil {
			errs = append(errs, fmt.Errorf("reaper %s: %w", topic, err))
			continue
		}
		if gone == 0 {
			continue // it heartbeat again since the look
		}
		clean, recovered := true, 0
		for b := range buckets {
			n, busy, err := g.recoverList(ctx, topic, b, m.cid, modeRecover)
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
			g.env.Logger.Info("redeq: recovered the jobs of a silent consumer", "topic", topic, "consumer", m.cid, "jobs", recovered)
		}
		if clean {
			err := forgetScript.Run(ctx, g.rdb, []string{tk.Consumers()}, m.cid, int64(m.joined)).Err()
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

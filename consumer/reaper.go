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
)

const (
	modeRecover  = "recover"
	modeRollback = "rollback"
	// recoverBatch bounds the ids one recover script call handles.
	recoverBatch = 500
	// silentBatch bounds the silent consumers one reaper pass handles per topic.
	silentBatch = 100
)

// ReapInterval is how often the reaper looks for silent consumers: a fifth
// of ConsumerTimeout, so a crashed consumer's jobs run again within about
// 1.2 x ConsumerTimeout after its last heartbeat.
func (g *Group) ReapInterval() time.Duration { return g.cfg.ConsumerTimeout / 5 }

func (g *Group) reapLoop(ctx context.Context) {
	t := time.NewTimer(g.ReapInterval())
	defer t.Stop()
	var bo env.Backoff
	bo.Max = g.cfg.ConsumerTimeout
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		wait := g.ReapInterval()
		if _, err := g.Reap(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			wait = bo.Next()
			g.env.Logger.Warn("redeq: reaper failed", "err", err, "retry_in", wait)
		} else {
			bo.Reset()
		}
		t.Reset(wait)
	}
}

// Reap recovers the in-flight jobs of every consumer silent for longer
// than ConsumerTimeout, in every known topic, and returns how many jobs it
// handed back. Each topic is reaped under a lock; finding nobody silent
// costs one pipelined round trip.
func (g *Group) Reap(ctx context.Context) (int, error) {
	topics, err := g.reg.Topics(ctx)
	if err != nil {
		return 0, err
	}
	if len(topics) == 0 {
		return 0, nil
	}
	names := make([]string, 0, len(topics))
	calls := make([]rdb.Call, 0, len(topics))
	for t := range topics {
		names = append(names, t)
		calls = append(calls, rdb.Call{
			Keys: []string{keys.ForTopic(g.cfg.Prefix, t).Consumers()},
			Args: []any{g.cfg.ConsumerTimeout.Milliseconds(), silentBatch},
		})
	}
	cmds := rdb.RunPipelined(ctx, g.rdb, silentScript, calls)
	if err := rdb.NoReply(cmds); err != nil {
		return 0, fmt.Errorf("reaper: %w", err)
	}
	total := 0
	var unread []error // topics whose reply was lost: reaped next pass
	for i, cmd := range cmds {
		silent, err := cmd.StringSlice()
		if err != nil {
			unread = append(unread, fmt.Errorf("reaper %s: %w", names[i], err))
			continue
		}
		var others []string
		for _, cid := range silent {
			if cid != g.cid {
				others = append(others, cid)
			}
		}
		if len(others) == 0 {
			continue
		}
		n, err := g.reapTopic(ctx, names[i], topics[names[i]], others)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, errors.Join(unread...)
}

func (g *Group) reapTopic(ctx context.Context, topic string, buckets int, cids []string) (int, error) {
	tk := keys.ForTopic(g.cfg.Prefix, topic)
	mu := g.locker.NewMutex(tk.ReaperLock(), lock.WithExpiry(g.cfg.LockExpiry))
	held, err := mu.TryLock(ctx)
	if err != nil || !held {
		return 0, err // another client reaps this topic now
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = mu.Unlock(uctx)
	}()
	total := 0
	for _, cid := range cids {
		clean := true
		for b := range buckets {
			n, err := g.recoverList(ctx, topic, b, cid, modeRecover)
			total += n
			if err != nil {
				g.env.Logger.Warn("redeq: reaper cannot recover", "topic", topic, "bucket", b, "consumer", cid, "err", err)
				clean = false
			}
		}
		if clean {
			if err := g.rdb.ZRem(ctx, tk.Consumers(), cid).Err(); err != nil {
				return total, fmt.Errorf("reaper %s: %w", topic, err)
			}
			if total > 0 {
				g.env.Logger.Info("redeq: recovered the jobs of a silent consumer", "topic", topic, "consumer", cid, "jobs", total)
			}
		}
	}
	return total, nil
}

// recoverList empties one in-flight list of consumer cid in bucket b of
// topic, in bounded script calls, and returns the ids handled.
func (g *Group) recoverList(ctx context.Context, topic string, b int, cid, mode string) (int, error) {
	k := keys.ForBucket(g.cfg.Prefix, topic, b)
	total := 0
	for {
		v, err := recoverScript.Run(ctx, g.rdb,
			[]string{k.InFlight(cid), k.Ready(), k.Pool(), k.Scheduled(), k.Dead(), k.Reasons()},
			mode, recoverBatch, g.cfg.MaxRecoveries, g.cfg.DeadRetention,
			keys.ReadyChannel(g.cfg.Prefix), keys.WakeChannel(g.cfg.Prefix), keys.Address(topic, b)).Int64Slice()
		if err != nil {
			return total, fmt.Errorf("%s %s of %s: %w", mode, keys.Address(topic, b), cid, err)
		}
		if len(v) != 3 {
			return total, fmt.Errorf("%s %s: bad reply %v", mode, keys.Address(topic, b), v)
		}
		total += int(v[0])
		if v[2] > 0 {
			g.env.Logger.Warn("redeq: jobs recovered too often sent to the dead set", "topic", topic, "bucket", b, "jobs", v[2])
		}
		if v[1] == 0 {
			return total, nil
		}
	}
}

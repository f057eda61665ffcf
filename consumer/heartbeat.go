package consumer

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/script"
)

var (
	//go:embed heartbeat.lua
	heartbeatSource string
	heartbeatScript = script.New(heartbeatSource)
)

// heartbeat records that this consumer is alive, with the topics it
// listens to: one call, whatever their number. When the call says the
// consumer (re)joined (its first heartbeat, or the first after a reaper
// forgot it), it joins its topics' consumer sets too, and keeps trying at
// each heartbeat until that works; other heartbeats do not write them.
// Fetches wait only for the first call (heard): a topic whose consumer set
// cannot be written holds up nothing but its Stats.
func (g *Group) heartbeat(ctx context.Context) error {
	if len(g.listeners) == 0 {
		return nil
	}
	sent := g.env.Clock.Now()
	v, err := heartbeatScript.Run(ctx, g.rdb, g.aliveKeys(), g.cid, g.topicList, g.cfg.ConsumerTimeout.Milliseconds(), g.info).Int64Slice()
	if err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	if len(v) != 2 {
		return fmt.Errorf("heartbeat: bad reply %v", v)
	}
	g.heardAt.Store(int64(sent.Sub(g.base)))
	if joined := v[1]; joined != g.joined.Load() {
		if err := g.join(ctx, joined); err != nil {
			return err
		}
		g.joined.Store(joined)
	}
	return nil
}

// aliveKeys are the keys of the heartbeat and reaper scripts.
func (g *Group) aliveKeys() []string {
	return []string{keys.Alive(g.cfg.Prefix), keys.AliveTopics(g.cfg.Prefix)}
}

// join records this consumer in the consumer set of every topic it
// listens to, for Stats and List, with the time the heartbeat gave (see
// forget.lua).
func (g *Group) join(ctx context.Context, at int64) error {
	pipe := g.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, len(g.listeners))
	for i, l := range g.listeners {
		cmds[i] = pipe.ZAdd(ctx, keys.ForTopic(g.cfg.Prefix, l.Topic()).Consumers(), redis.Z{Score: float64(at), Member: g.cid})
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	var errs []error
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil {
			errs = append(errs, fmt.Errorf("join %s: %w", g.listeners[i].Topic(), err))
		}
	}
	return errors.Join(errs...)
}

// heard reports whether a heartbeat sent within the last two thirds of a
// ConsumerTimeout got through. Runners fetch only then: a consumer cut
// off from Redis (or stopped) long enough for a reaper to forget it is
// back in the alive set (at that heartbeat) before it takes more jobs, and
// joins its topics again right after, so that no fetch
// lands in an in-flight set that no reaper watches. The time is counted
// from when the heartbeat was sent, before Redis recorded it, so it is
// never shorter than what a reaper sees. A heartbeat runs every third of
// ConsumerTimeout at most, so a live consumer passes with a third to spare.
func (g *Group) heard() bool {
	return g.env.Clock.Now().Sub(g.base)-time.Duration(g.heardAt.Load()) < g.cfg.ConsumerTimeout*2/3
}

func (g *Group) heartbeatLoop(ctx context.Context) {
	t := time.NewTicker(g.cfg.HeartbeatInterval)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := g.heartbeat(ctx); err != nil {
			if ctx.Err() == nil {
				g.env.Failure("redeq: heartbeat failed", "err", err)
			}
			failing = true
		} else if failing {
			g.env.Logger.Info("redeq: heartbeat recovered")
			failing = false
		}
	}
}

package consumer

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/internal/keys"
)

var (
	//go:embed heartbeat.lua
	heartbeatSource string
	heartbeatScript = redis.NewScript(heartbeatSource)
)

// aliveRetention is how long an entry of the alive set outlives its last
// heartbeat: far longer than any ConsumerTimeout, so that only entries no
// reaper will ever look at again (a client that died before it joined its
// topics) are dropped by it.
const aliveRetention = 24 * time.Hour

// heartbeat records that this consumer is alive: one call, whatever the
// number of topics it listens to. The first time, and whenever it finds
// that a reaper forgot it (it looked silent for longer than
// ConsumerTimeout, then came back), it joins every topic it listens to
// again, so that the reapers watch its in-flight sets.
func (g *Group) heartbeat(ctx context.Context) error {
	if len(g.listeners) == 0 {
		return nil
	}
	sent := g.env.Clock.Now()
	v, err := heartbeatScript.Run(ctx, g.rdb, []string{keys.Alive(g.cfg.Prefix)}, g.cid, aliveRetention.Milliseconds()).Int64Slice()
	if err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	if len(v) != 2 {
		return fmt.Errorf("heartbeat: bad reply %v", v)
	}
	if v[0] == 1 {
		g.joined.Store(false)
	}
	if !g.joined.Load() {
		if err := g.join(ctx, v[1]); err != nil {
			return err
		}
		g.joined.Store(true)
	}
	g.heardAt.Store(sent.UnixNano())
	return nil
}

// heard reports whether a heartbeat sent within the last two thirds of a
// ConsumerTimeout got through. Runners fetch only then: a consumer cut
// off from Redis long enough for a reaper to forget it joins its topics
// again (at that heartbeat) before it takes more jobs, so that no fetch
// lands in an in-flight set that no reaper watches. The time is counted
// from when the heartbeat was sent, before Redis recorded it, so it is
// never shorter than what a reaper sees. A heartbeat runs every third of
// ConsumerTimeout at most, so a live consumer passes with a third to spare.
func (g *Group) heard() bool {
	return g.env.Clock.Now().Sub(time.Unix(0, g.heardAt.Load())) < g.cfg.ConsumerTimeout*2/3
}

// join records this consumer in the consumer set of every topic it
// listens to, with the Redis time now as its join time.
func (g *Group) join(ctx context.Context, now int64) error {
	pipe := g.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, len(g.listeners))
	for i, l := range g.listeners {
		cmds[i] = pipe.ZAdd(ctx, keys.ForTopic(g.cfg.Prefix, l.Topic()).Consumers(), redis.Z{Score: float64(now), Member: g.cid})
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

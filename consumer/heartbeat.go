package consumer

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/rdb"
)

var (
	//go:embed heartbeat.lua
	heartbeatSource string
	heartbeatScript = redis.NewScript(heartbeatSource)
)

// heartbeat records in one pipeline that this consumer is alive in every
// topic it listens to.
func (g *Group) heartbeat(ctx context.Context) error {
	if len(g.listeners) == 0 {
		return nil
	}
	calls := make([]rdb.Call, len(g.listeners))
	for i, l := range g.listeners {
		calls[i] = rdb.Call{Keys: []string{keys.ForTopic(g.cfg.Prefix, l.Topic()).Consumers()}, Args: []any{g.cid}}
	}
	cmds := rdb.RunPipelined(ctx, g.rdb, heartbeatScript, calls)
	if err := rdb.NoReply(cmds); err != nil {
		return fmt.Errorf("heartbeat: %w", err)
	}
	var errs []error
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil {
			errs = append(errs, fmt.Errorf("heartbeat %s: %w", g.listeners[i].Topic(), err))
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

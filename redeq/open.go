package redeq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/pool"
)

// OpenPingTimeout bounds Open's first PING when ctx has no earlier
// deadline: a Sentinel-backed client asks unreachable Sentinels again and
// again until its context ends.
const OpenPingTimeout = 10 * time.Second

// Open starts a client from one file. It loads the settings at path with
// config.Load (REDEQ_* variables override them; an empty path reads the
// environment only), builds the Redis client the redis section describes
// (config.RedisConfig.NewClient), checks that Redis answers a PING within
// ctx and OpenPingTimeout, and returns New's client over it. An
// unreachable Redis is an error naming its address, and nothing is left
// open.
//
// The client owns that Redis connection: Shutdown closes it once the
// client's own work is done, so after Shutdown, Add, Get and Delete fail
// with redis.ErrClosed (a client from New leaves its connection to the
// caller and keeps working).
//
// The schedules of the file's schedules section are put (PutSchedule)
// before Open returns: each instance of a service puts the same ones, which
// changes nothing once they are there. A bad schedule is ErrInvalidSchedule
// naming the file and its key ("redeq.yaml: schedules[1]: ..."), found
// before Open connects, and nothing is written.
func Open(ctx context.Context, path string) (*Client, error) {
	if ctx == nil {
		return nil, pool.ErrNilContext
	}
	cfg, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	from := path
	if from == "" {
		from = "the environment"
	}
	return open(ctx, cfg, from, path, "")
}

// OpenSection is Open for a service's own YAML file that holds redeq's
// settings, the redis section included, under key ("redeq", or
// "jobs.redeq"; see config.LoadSection). The rest of the file is the
// service's own. Its schedules (key.schedules) are put as Open puts them.
func OpenSection(ctx context.Context, path, key string) (*Client, error) {
	if ctx == nil {
		return nil, pool.ErrNilContext
	}
	cfg, err := config.LoadSection(path, key)
	if err != nil {
		return nil, err
	}
	return open(ctx, cfg, path+" ("+key+")", path, key+".")
}

// open builds the Redis client cfg describes, pings it and returns New's
// client over it, owning the connection, with cfg's schedules put; from
// names where cfg came from, path and section the file and the key of its
// section ("" or "jobs.redeq.").
func open(ctx context.Context, cfg config.Config, from, path, section string) (*Client, error) {
	if cfg.Redis.IsZero() {
		return nil, fmt.Errorf("redeq: %s names no Redis: set redis.url or redis.addrs (or REDEQ_REDIS_URL)", from)
	}
	scheds := make([]Schedule, len(cfg.Schedules))
	where := func(i int) string { return fmt.Sprintf("%s: %sschedules[%d]", path, section, i) }
	for i, sc := range cfg.Schedules {
		scheds[i] = scheduleOf(sc)
		if _, err := compile(scheds[i], cfg.MaxBodyBytes); err != nil {
			return nil, fmt.Errorf("%s: %w", where(i), err)
		}
	}
	rdb, err := cfg.Redis.NewClient()
	if err != nil {
		return nil, fmt.Errorf("redeq: %s: %w", from, err)
	}
	pctx, cancel := context.WithTimeout(ctx, OpenPingTimeout)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, fmt.Errorf("redeq: redis at %s (from %s) does not answer: %w", cfg.Redis.Address(), from, err)
	}
	c, err := New(rdb, cfg)
	if err != nil {
		_ = rdb.Close()
		return nil, err
	}
	c.ownsRedis = true
	for i, s := range scheds {
		if err := c.PutSchedule(ctx, s); err != nil {
			_ = c.Shutdown(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("%s: %w", where(i), err)
		}
	}
	return c, nil
}

// scheduleOf is the Schedule a config file declares; config validated it.
func scheduleOf(sc config.Schedule) Schedule {
	s := Schedule{Name: sc.Name, Topic: sc.Topic, Spec: sc.Spec, TimeZone: sc.TimeZone,
		CatchUp: CatchUp(max(config.CatchUpOf(sc.CatchUp), 0)), CatchUpWindow: sc.CatchUpWindow,
		Headers: sc.Headers, MaxRetries: sc.MaxRetries, RetryIntervals: sc.RetryIntervals}
	if sc.Body != "" {
		s.Body = []byte(sc.Body)
	}
	return s
}

// closeOwnRedis closes the Redis client Open created, once Shutdown has
// stopped everything that uses it.
func (c *Client) closeOwnRedis() {
	if !c.ownsRedis {
		return
	}
	if err := c.rdb.Close(); err != nil && !errors.Is(err, redis.ErrClosed) {
		c.env.Logger.Warn("redeq: closing the redis client", "err", err)
	}
}

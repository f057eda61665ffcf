package redeq

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/consumer"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/pool"
)

// Bounds of Consumers.
const (
	// ConsumersListed is the most consumers Consumers returns: those that
	// heartbeat most recently.
	ConsumersListed = 1000
	// RunningListed is the most deliveries Consumers lists per consumer
	// and bucket, and per consumer in all: the longest running.
	RunningListed = 10
)

// ConsumerInfo is one consumer, a started client with listeners, as its
// heartbeats record it.
type ConsumerInfo struct {
	ID   string // the consumer id (Client.ConsumerID)
	Name string // config.Config.ClientName, else its host name; "" from a client that records none
	Host string // its host name
	PID  int    // its process id; 0 when not recorded
	// Started is when it joined its topics, by the Redis clock: its first
	// heartbeat, or its first after a reaper forgot it.
	Started time.Time
	// LastHeartbeat is its last heartbeat, by the Redis clock.
	LastHeartbeat time.Time
	// HeartbeatAge is how long ago LastHeartbeat was when Consumers read
	// it, by the Redis clock.
	HeartbeatAge time.Duration
	// Timeout is its ConsumerTimeout: silent longer, it is presumed dead
	// and a reaper recovers its jobs.
	Timeout time.Duration
	// Silent reports that its last heartbeat is older than Timeout: it
	// died or is cut off, and waits for a reaper.
	Silent bool
	// Format is the newest format of the job state it reads (see
	// Client.UpgradeFormat); "" from a consumer of an older version.
	Format string
	// Topics are the topics it listens to, sorted.
	Topics []string
	// InFlight is how many deliveries it holds.
	InFlight int64
	// Running are its longest running deliveries, longest first: at most
	// RunningListed.
	Running []RunningJob
}

// RunningJob is one delivery a consumer holds.
type RunningJob struct {
	Topic, ID string
	// Since is when the consumer fetched it, by the Redis clock.
	Since time.Time
	// For is how long it had run when Consumers read it, by the Redis
	// clock.
	For time.Duration
}

// Consumers returns the consumers of this client's prefix that heartbeat
// (and silent ones a reaper has not yet forgotten), sorted by name, then
// id: at most ConsumersListed, the most recent heartbeats. Cost: three
// round trips (the server's clock, the alive set, the consumers' fields)
// and one pipeline of two reads per consumer and bucket of its topics.
func (c *Client) Consumers(ctx context.Context) ([]ConsumerInfo, error) {
	if ctx == nil {
		return nil, pool.ErrNilContext
	}
	now, err := c.timeOn(ctx, keys.Alive(c.cfg.Prefix))
	if err != nil {
		return nil, fmt.Errorf("consumers: %w", err)
	}
	alive, err := c.rdb.ZRevRangeWithScores(ctx, keys.Alive(c.cfg.Prefix), 0, ConsumersListed-1).Result()
	if err != nil {
		return nil, fmt.Errorf("consumers: %w", err)
	}
	if len(alive) == 0 {
		return []ConsumerInfo{}, nil
	}
	out := make([]ConsumerInfo, len(alive))
	fields := make([]*redis.SliceCmd, len(alive))
	pipe := c.rdb.Pipeline()
	for i, z := range alive {
		cid, _ := z.Member.(string)
		hb := time.UnixMilli(int64(z.Score))
		out[i] = ConsumerInfo{ID: cid, LastHeartbeat: hb, HeartbeatAge: max(now.Sub(hb), 0)}
		fields[i] = pipe.HMGet(ctx, keys.AliveTopics(c.cfg.Prefix), cid, keys.AliveTimeout(cid), keys.AliveJoined(cid), keys.AliveInfo(cid))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("consumers: %w", err)
	}
	type read struct {
		ci     int
		topic  string
		card   *redis.IntCmd
		oldest *redis.ZSliceCmd
	}
	var reads []read
	pipe = c.rdb.Pipeline()
	for i := range out {
		ci := &out[i]
		v := fields[i].Val()
		str := func(j int) string { s, _ := v[j].(string); return s }
		if ms, err := strconv.ParseInt(str(1), 10, 64); err == nil {
			ci.Timeout = time.Duration(ms) * time.Millisecond
			ci.Silent = now.Sub(ci.LastHeartbeat) > ci.Timeout
		}
		if ms, err := strconv.ParseInt(str(2), 10, 64); err == nil {
			ci.Started = time.UnixMilli(ms)
		}
		if info, ok := consumer.ParseInfo(str(3)); ok {
			ci.Name, ci.Host, ci.PID, ci.Format = info.Name, info.Host, info.PID, info.Format
		}
		for _, line := range strings.Split(str(0), "\n") {
			topic, n, ok := keys.ParseAddress(line)
			if !ok || n < 1 || n > config.MaxConcurrency {
				continue
			}
			ci.Topics = append(ci.Topics, topic)
			for b := range n {
				k := keys.ForBucket(c.cfg.Prefix, topic, b).InFlight(ci.ID)
				reads = append(reads, read{i, topic, pipe.ZCard(ctx, k), pipe.ZRangeWithScores(ctx, k, 0, RunningListed-1)})
			}
		}
		slices.Sort(ci.Topics)
	}
	if len(reads) > 0 {
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("consumers: %w", err)
		}
	}
	for _, r := range reads {
		ci := &out[r.ci]
		ci.InFlight += r.card.Val()
		for _, z := range r.oldest.Val() {
			m, _ := z.Member.(string)
			_, id, ok := strings.Cut(m, ":") // "<token>:<id>"
			if !ok {
				continue
			}
			since := time.UnixMilli(int64(z.Score))
			ci.Running = append(ci.Running, RunningJob{Topic: r.topic, ID: id, Since: since, For: max(now.Sub(since), 0)})
		}
	}
	for i := range out {
		ci := &out[i]
		slices.SortStableFunc(ci.Running, func(a, b RunningJob) int { return a.Since.Compare(b.Since) })
		if len(ci.Running) > RunningListed {
			ci.Running = ci.Running[:RunningListed]
		}
	}
	slices.SortFunc(out, func(a, b ConsumerInfo) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.ID, b.ID))
	})
	return out, nil
}

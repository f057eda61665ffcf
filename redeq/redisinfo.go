package redeq

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/pool"
)

// RedisScanBudget is the most keys RedisInfo's scan examines per server
// (SCAN COUNT 1000 steps, matching keys only sent back). Past it the
// count of the prefix's keys is an estimate.
const RedisScanBudget = 100_000

// RedisServer is what one Redis server (a master, on a cluster) reports.
type RedisServer struct {
	Addr            string // its address, as the client dials it
	Version         string // redis_version
	Mode            string // redis_mode: standalone, cluster or sentinel
	UsedMemory      int64  // used_memory, bytes
	PeakMemory      int64  // used_memory_peak, bytes
	MaxMemory       int64  // maxmemory, bytes; 0: no limit
	MaxMemoryPolicy string // maxmemory_policy
	Clients         int64  // connected_clients
	Uptime          time.Duration
	Keys            int64 // every key of the database on it (DBSIZE)
	// PrefixKeys counts its keys under this client's prefix: exact when
	// Exact, else estimated from the share of matching keys in the part
	// scanned (RedisScanBudget).
	PrefixKeys int64
	Exact      bool
	Scanned    int64 // keys the scan examined
}

// RedisInfo describes the Redis deployment a client uses.
type RedisInfo struct {
	Servers []RedisServer // the server, or each master of a cluster, by address
	// PrefixKeys is the sum of the servers' PrefixKeys; Exact when each
	// of theirs is.
	PrefixKeys int64
	Exact      bool
	UsedMemory int64 // the sum of the servers'
}

// RedisInfo reads INFO and DBSIZE from the server, or from every master
// of a cluster, and counts the keys under this client's prefix with a
// SCAN bounded by RedisScanBudget per server. A replica or Sentinel in
// front answers as its master would; go-redis's Ring is read as one
// server. It writes nothing.
func (c *Client) RedisInfo(ctx context.Context) (RedisInfo, error) {
	if ctx == nil {
		return RedisInfo{}, pool.ErrNilContext
	}
	var (
		mu  sync.Mutex
		out RedisInfo
	)
	read := func(ctx context.Context, rdb redis.UniversalClient, addr string) error {
		s, err := c.readServer(ctx, rdb, addr)
		if err != nil {
			return err
		}
		mu.Lock()
		out.Servers = append(out.Servers, s)
		mu.Unlock()
		return nil
	}
	var err error
	switch r := c.rdb.(type) {
	case *redis.ClusterClient:
		err = r.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return read(ctx, m, m.Options().Addr) })
	case *redis.Client:
		err = read(ctx, r, r.Options().Addr)
	default:
		err = read(ctx, c.rdb, "")
	}
	if err != nil {
		return RedisInfo{}, fmt.Errorf("redis info: %w", err)
	}
	out.Exact = true
	for _, s := range out.Servers {
		out.PrefixKeys += s.PrefixKeys
		out.UsedMemory += s.UsedMemory
		out.Exact = out.Exact && s.Exact
	}
	slices.SortFunc(out.Servers, func(a, b RedisServer) int { return strings.Compare(a.Addr, b.Addr) })
	return out, nil
}

func (c *Client) readServer(ctx context.Context, rdb redis.UniversalClient, addr string) (RedisServer, error) {
	info, err := rdb.Info(ctx).Result()
	if err != nil {
		return RedisServer{}, err
	}
	f := parseInfo(info)
	num := func(k string) int64 { n, _ := strconv.ParseInt(f[k], 10, 64); return n }
	s := RedisServer{
		Addr: addr, Version: f["redis_version"], Mode: f["redis_mode"],
		UsedMemory: num("used_memory"), PeakMemory: num("used_memory_peak"), MaxMemory: num("maxmemory"),
		MaxMemoryPolicy: f["maxmemory_policy"], Clients: num("connected_clients"),
		Uptime: time.Duration(num("uptime_in_seconds")) * time.Second,
	}
	if s.Keys, err = rdb.DBSize(ctx).Result(); err != nil {
		return RedisServer{}, err
	}
	s.PrefixKeys, s.Scanned, s.Exact, err = c.countPrefixKeys(ctx, rdb, s.Keys)
	return s, err
}

// countPrefixKeys counts the keys of rdb under the prefix: those that
// start with "prefix:" and the hash-tagged "{prefix:...". It examines at
// most RedisScanBudget keys; past that it estimates from the share of
// matching keys in those examined and the server's key count.
func (c *Client) countPrefixKeys(ctx context.Context, rdb redis.UniversalClient, total int64) (found, scanned int64, exact bool, err error) {
	p := c.cfg.Prefix + ":"
	match := "*" + globEscape(p) + "*"
	var cursor uint64
	for {
		var ks []string
		ks, cursor, err = rdb.Scan(ctx, cursor, match, 1000).Result()
		if err != nil {
			return 0, 0, false, err
		}
		scanned += 1000 // COUNT is a hint: the keys examined, not returned
		for _, k := range ks {
			if strings.HasPrefix(k, p) || strings.HasPrefix(k, "{"+p) {
				found++
			}
		}
		if cursor == 0 {
			return found, min(scanned, max(total, found)), true, nil
		}
		if scanned >= RedisScanBudget {
			if scanned < total {
				found = found * total / scanned
			}
			return found, scanned, false, nil
		}
	}
}

// globEscape escapes the characters SCAN's MATCH treats as a pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// parseInfo reads the "field:value" lines of an INFO reply.
func parseInfo(s string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimRight(line, "\r")
		if line == "" || line[0] == '#' {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = v
		}
	}
	return out
}

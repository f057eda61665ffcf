package testutil

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
)

// Backend is one Redis deployment under test.
type Backend struct {
	Name string // "miniredis", "redis" or "cluster"
	// New returns a fresh client to the deployment, closed at the end of
	// the test; separate clients stand for separate services.
	New func(t testing.TB) redis.UniversalClient
	// Addrs is what a child process needs to connect.
	Addrs []string
	// Mini is the embedded server, nil for real ones.
	Mini *miniredis.Miniredis
}

// Real reports whether the backend is a real redis-server.
func (b Backend) Real() bool { return b.Mini == nil }

// Backends returns every deployment this run can reach: miniredis, plus
// the server at REDIS_ADDR and the cluster at REDIS_CLUSTER_ADDRS when they
// are set. Under REDEQ_REQUIRE_SERVER (CI) an unset variable fails the
// test: a run that silently drops the real servers proves nothing about
// them.
func Backends(t testing.TB) []Backend {
	t.Helper()
	requireEnv(t, "REDIS_ADDR", "REDIS_CLUSTER_ADDRS")
	mini := miniredis.RunT(t)
	require.NoError(t, AddBitfield(mini), "miniredis BITFIELD")
	out := []Backend{{
		Name:  "miniredis",
		Addrs: []string{mini.Addr()},
		Mini:  mini,
		New: func(t testing.TB) redis.UniversalClient {
			// miniredis runs Lua slowly, slower still under -race: give it
			// room rather than provoke go-redis's timeout retries.
			c := redis.NewClient(&redis.Options{Addr: mini.Addr(), ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
			t.Cleanup(func() { c.Close() })
			return c
		},
	}}
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		out = append(out, Backend{
			Name:  "redis",
			Addrs: []string{addr},
			New: func(t testing.TB) redis.UniversalClient {
				c := redis.NewClient(&redis.Options{Addr: addr})
				t.Cleanup(func() { c.Close() })
				return c
			},
		})
	}
	if addrs := os.Getenv("REDIS_CLUSTER_ADDRS"); addrs != "" {
		seeds := strings.Split(addrs, ",")
		out = append(out, Backend{
			Name:  "cluster",
			Addrs: seeds,
			New: func(t testing.TB) redis.UniversalClient {
				c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: seeds})
				t.Cleanup(func() { c.Close() })
				return c
			},
		})
	}
	return out
}

// requireEnv fails the test when REDEQ_REQUIRE_SERVER is set and one of
// the variables naming a deployment is not.
func requireEnv(t testing.TB, names ...string) {
	t.Helper()
	if os.Getenv(RequireServerEnv) == "" {
		return
	}
	for _, n := range names {
		if os.Getenv(n) == "" {
			t.Fatalf("%s is not set and %s is: the tests of that deployment would not run (source .ci/redis.sh && redis_up)", n, RequireServerEnv)
		}
	}
}

// RealBackends returns the deployments that are real redis-servers. When
// there is none the test is skipped, visibly; under REDEQ_REQUIRE_SERVER it
// fails instead (see Backends).
func RealBackends(t testing.TB) []Backend {
	t.Helper()
	var out []Backend
	for _, b := range Backends(t) {
		if b.Real() {
			out = append(out, b)
		}
	}
	if len(out) == 0 {
		t.Skip("no real Redis: set REDIS_ADDR and REDIS_CLUSTER_ADDRS (source .ci/redis.sh && redis_up)")
	}
	return out
}

// Cluster returns the Redis Cluster at REDIS_CLUSTER_ADDRS. Without one the
// test is skipped, visibly; under REDEQ_REQUIRE_SERVER it fails instead.
func Cluster(t testing.TB) Backend {
	t.Helper()
	for _, b := range Backends(t) {
		if b.Name == "cluster" {
			return b
		}
	}
	t.Skip("no Redis Cluster: set REDIS_CLUSTER_ADDRS (source .ci/redis.sh && redis_up)")
	return Backend{}
}

// Prefix returns a key prefix no other test uses.
func Prefix(t testing.TB) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "rq" + hex.EncodeToString(b[:])
}

// Fast returns the default settings with short intervals, so that
// waiting for background work takes milliseconds.
func Fast() config.Config {
	cfg := config.Default()
	cfg.ScanInterval = 100 * time.Millisecond
	cfg.PollTimeout = 200 * time.Millisecond
	cfg.HeartbeatInterval = 100 * time.Millisecond
	cfg.ConsumerTimeout = 600 * time.Millisecond
	cfg.LockExpiry = 2 * time.Second
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.RetryIntervals = []time.Duration{50 * time.Millisecond}
	return cfg
}

// Config returns Fast settings under a fresh prefix, logging warnings to
// the test log.
func Config(t testing.TB) config.Config {
	cfg := Fast()
	cfg.Prefix = Prefix(t)
	cfg.Logger = Logger(t)
	return cfg
}

// Logger writes warnings and errors to the test log until the test's
// cleanup: a line a goroutine writes after it (a loop winding down) is
// dropped, as t.Log then would race with the test's end.
func Logger(t testing.TB) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct {
	t    testing.TB
	mu   sync.Mutex
	done bool // the test's cleanup ran
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return len(p), nil
	}
	defer func() { _ = recover() }() // a log line after the test ended
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Keys returns, sorted, every key under prefix, on every master of a cluster.
func Keys(t testing.TB, c redis.UniversalClient, prefix string) []string {
	t.Helper()
	ctx := context.Background()
	var mu sync.Mutex
	var out []string
	scan := func(ctx context.Context, n *redis.Client) error {
		iter := n.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			mu.Lock()
			out = append(out, iter.Val())
			mu.Unlock()
		}
		return iter.Err()
	}
	switch cc := c.(type) {
	case *redis.ClusterClient:
		require.NoError(t, cc.ForEachMaster(ctx, scan))
	case *redis.Client:
		require.NoError(t, scan(ctx, cc))
	default:
		t.Fatalf("unsupported client %T", c)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Dump returns every key under prefix with a digest of its value, to
// assert that a rejected call wrote nothing.
func Dump(t testing.TB, c redis.UniversalClient, prefix string) map[string]string {
	t.Helper()
	ctx := context.Background()
	out := map[string]string{}
	for _, k := range Keys(t, c, prefix) {
		typ, err := c.Type(ctx, k).Result()
		require.NoError(t, err)
		var v any
		switch typ {
		case "hash":
			v, err = c.HGetAll(ctx, k).Result()
		case "zset":
			v, err = c.ZRangeWithScores(ctx, k, 0, -1).Result()
		case "list":
			v, err = c.LRange(ctx, k, 0, -1).Result()
		case "set":
			var m []string
			m, err = c.SMembers(ctx, k).Result()
			slices.Sort(m)
			v = m
		default:
			v, err = c.Get(ctx, k).Result()
		}
		require.NoError(t, err)
		out[k] = typ + ":" + strings.TrimSpace(fmtAny(v))
	}
	return out
}

func fmtAny(v any) string {
	return strings.ReplaceAll(strings.TrimSpace(fmt.Sprint(v)), "\n", " ")
}

package benchdrain

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/redeq"
)

// Client returns a connection to the server at REDIS_ADDR and a redeq
// client with 16 workers on a prefix of its own, both closed when b ends;
// it skips b without REDIS_ADDR (a drain on miniredis measures miniredis).
func Client(b *testing.B) (*redis.Client, *redeq.Client) {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		b.Skip("REDIS_ADDR not set: a drain on miniredis measures miniredis")
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	b.Cleanup(func() { _ = rdb.Close() })
	cfg := config.Default()
	cfg.Prefix = fmt.Sprintf("drainbench%d", time.Now().UnixNano())
	cfg.Workers = 16
	c, err := redeq.New(rdb, cfg)
	if err != nil {
		b.Fatal(err)
	}
	return rdb, c
}

// Run adds b.N due jobs to c (each with headers, when not nil), then
// starts c and times it until it has handled them all. Beside the time per
// job it reports the CPU time per job of this process (client-cpu-ns/op)
// and of the Redis server (redis-cpu-ns/op): on a shared machine the time
// per job varies several fold from run to run, the CPU time much less, and
// what an integration adds shows in the client's.
func Run(b *testing.B, rdb *redis.Client, c *redeq.Client, headers map[string]string) {
	ctx := context.Background()
	var done atomic.Int64
	if err := c.Register(redeq.ListenerFunc("drain", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		ch.Ack()
		done.Add(1)
		return nil
	})); err != nil {
		b.Fatal(err)
	}
	jobs := make([]*redeq.Job, b.N)
	for i := range jobs {
		jobs[i] = &redeq.Job{Topic: "drain", ID: fmt.Sprint(i), Headers: headers}
	}
	if err := c.AddBatch(ctx, jobs); err != nil {
		b.Fatal(err)
	}
	redis0 := redisCPU(b, rdb)
	b.ResetTimer()
	cpu0 := cpuTime()
	if err := c.Start(ctx); err != nil {
		b.Fatal(err)
	}
	for done.Load() < int64(b.N) {
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "client-cpu-ns/op")
	b.ReportMetric(float64(redisCPU(b, rdb)-redis0)/float64(b.N), "redis-cpu-ns/op")
	if err := c.Shutdown(ctx); err != nil {
		b.Fatal(err)
	}
}

// redisCPU is the CPU time the server has used (INFO cpu).
func redisCPU(b *testing.B, rdb *redis.Client) time.Duration {
	info, err := rdb.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total time.Duration
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			total += time.Duration(f * float64(time.Second))
		}
	}
	return total
}

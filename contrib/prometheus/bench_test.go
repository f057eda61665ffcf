package redeqprom_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/config"
	redeqprom "github.com/redeq-go/redeq/contrib/prometheus"
	"github.com/redeq-go/redeq/redeq"
)

// BenchmarkDrain drains b.N due jobs with a no-op handler, 16 workers, on
// the server at REDIS_ADDR: without instrumentation, and with the
// Collector observing.
func BenchmarkDrain(b *testing.B) {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		b.Skip("REDIS_ADDR not set: a drain on miniredis measures miniredis")
	}
	for _, on := range []bool{false, true} {
		b.Run(map[bool]string{false: "off", true: "prometheus"}[on], func(b *testing.B) {
			rdb := redis.NewClient(&redis.Options{Addr: addr})
			defer func() { _ = rdb.Close() }()
			cfg := config.Default()
			cfg.Prefix = fmt.Sprintf("prombench%d", time.Now().UnixNano())
			cfg.Workers = 16
			c, err := redeq.New(rdb, cfg)
			if err != nil {
				b.Fatal(err)
			}
			if on {
				if _, err := redeqprom.Register(c, prometheus.NewRegistry(), redeqprom.Options{}); err != nil {
					b.Fatal(err)
				}
			}
			drain(b, c)
		})
	}
}

func drain(b *testing.B, c *redeq.Client) {
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
		jobs[i] = &redeq.Job{Topic: "drain", ID: fmt.Sprint(i)}
	}
	if err := c.AddBatch(ctx, jobs); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	if err := c.Start(ctx); err != nil {
		b.Fatal(err)
	}
	for done.Load() < int64(b.N) {
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	if err := c.Shutdown(ctx); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkDelivery is what the Collector adds to one delivery, without
// Redis.
func BenchmarkDelivery(b *testing.B) {
	col := redeqprom.New(nil, redeqprom.Options{})
	job := &redeq.Job{Topic: "t", ID: "42"}
	b.ReportAllocs()
	for b.Loop() {
		col.JobAdded(job.Topic)
		col.JobDelivered(job, time.Millisecond)
		col.JobDone(job, redeq.OutcomeAck, time.Millisecond, nil)
	}
}

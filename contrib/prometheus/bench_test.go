package redeqprom_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/config"

	redeqprom "github.com/redeq-go/redeq/contrib/prometheus"
	"github.com/redeq-go/redeq/redeq"
	"github.com/redeq-go/redeq/redeqtest/benchdrain"
)

// BenchmarkDrain drains b.N due jobs with a no-op handler, 16 workers, on
// the server at REDIS_ADDR: without instrumentation, and with the
// Collector observing.
func BenchmarkDrain(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(map[bool]string{false: "off", true: "prometheus"}[on], func(b *testing.B) {
			rdb, c := benchdrain.Client(b)
			if on {
				if _, err := redeqprom.Register(c, prometheus.NewRegistry(), redeqprom.Options{}); err != nil {
					b.Fatal(err)
				}
			}
			benchdrain.Run(b, rdb, c, nil)
		})
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

// BenchmarkScrape is one uncached scrape of a prefix with 100 or 1000
// topics (one scheduled job each) on the server at REDIS_ADDR: the
// gauges of ModeAll, and those plus the history counters of ModeExporter.
func BenchmarkScrape(b *testing.B) {
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		b.Skip("REDIS_ADDR is not set")
	}
	for _, topics := range []int{100, 1000} {
		for _, mode := range []redeqprom.Mode{redeqprom.ModeAll, redeqprom.ModeExporter} {
			b.Run(fmt.Sprintf("topics=%d/mode=%s", topics, map[redeqprom.Mode]string{redeqprom.ModeAll: "all", redeqprom.ModeExporter: "exporter"}[mode]), func(b *testing.B) {
				rdb := redis.NewClient(&redis.Options{Addr: addr})
				b.Cleanup(func() { _ = rdb.Close() })
				cfg := config.Default()
				cfg.Prefix = fmt.Sprintf("promscrape%d", time.Now().UnixNano())
				c, err := redeq.New(rdb, cfg)
				if err != nil {
					b.Fatal(err)
				}
				ctx := context.Background()
				jobs := make([]*redeq.Job, topics)
				for i := range jobs {
					jobs[i] = &redeq.Job{Topic: fmt.Sprint("topic", i), ID: "1", Delay: time.Hour}
				}
				if err := c.AddBatch(ctx, jobs); err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() {
					for _, j := range jobs {
						_, _ = c.Delete(ctx, j.Topic, j.ID)
					}
				})
				reg := prometheus.NewRegistry()
				if _, err := redeqprom.Register(c, reg, redeqprom.Options{Mode: mode, CacheFor: time.Nanosecond, Timeout: time.Minute}); err != nil {
					b.Fatal(err)
				}
				for b.Loop() {
					if _, err := reg.Gather(); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

package redeqprom_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

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

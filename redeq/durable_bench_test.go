package redeq_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// BenchmarkDurable: the cost of WaitReplicas 1 on a master and its
// replica (started by the benchmark): Add from one goroutine (the
// latency of one call) and from 16 goroutines, and a
// drain of 1,000 due jobs by one client (8 workers), each without and
// with the option, side by side so that a busy machine slows both.
//
//	go test -run '^$' -bench BenchmarkDurable -benchtime 2s -count 5 ./redeq
func BenchmarkDurable(b *testing.B) {
	pair := testutil.StartPair(b)
	newClient := func(b *testing.B, replicas int) *redeq.Client {
		cfg := testutil.Config(b)
		cfg.WaitReplicas = replicas
		c, err := redeq.New(pair.Master.Client(nil), cfg)
		if err != nil {
			b.Fatal(err)
		}
		return c
	}
	for _, replicas := range []int{0, 1} {
		b.Run(fmt.Sprintf("add-1/wait-replicas-%d", replicas), func(b *testing.B) {
			c := newClient(b, replicas)
			ctx := context.Background()
			i := 0
			for b.Loop() {
				i++
				if err := c.Add(ctx, &redeq.Job{Topic: "bench", ID: fmt.Sprint("s-", i), Body: body100, Delay: time.Hour}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	for _, replicas := range []int{0, 1} {
		b.Run(fmt.Sprintf("add-16/wait-replicas-%d", replicas), func(b *testing.B) {
			benchDurableAdd(b, newClient(b, replicas))
		})
	}
	for _, replicas := range []int{0, 1} {
		b.Run(fmt.Sprintf("drain-1000/wait-replicas-%d", replicas), func(b *testing.B) {
			benchDurableDrain(b, newClient(b, replicas))
		})
	}
}

func benchDurableAdd(b *testing.B, c *redeq.Client) {
	ctx := context.Background()
	var n atomic.Int64
	b.SetParallelism(max(1, 16/runtime.GOMAXPROCS(0)))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := c.Add(ctx, &redeq.Job{Topic: "bench", ID: fmt.Sprint("p-", n.Add(1)), Body: body100, Delay: time.Hour}); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// benchDurableDrain: ns/op is the time to run and ack 1,000 due jobs.
func benchDurableDrain(b *testing.B, c *redeq.Client) {
	const size = 1000
	ctx := context.Background()
	var acked atomic.Int64
	if err := c.Register(redeq.ListenerFunc("drain", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		ch.Ack()
		acked.Add(1)
		return nil
	})); err != nil {
		b.Fatal(err)
	}
	if err := c.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = c.Shutdown(context.Background()) })
	round := 0
	for b.Loop() {
		b.StopTimer()
		round++
		// Due now, held back by a pause until the timer runs.
		if err := c.Pause(ctx, "drain"); err != nil {
			b.Fatal(err)
		}
		jobs := make([]*redeq.Job, size)
		for i := range jobs {
			jobs[i] = &redeq.Job{Topic: "drain", ID: fmt.Sprintf("d-%d-%d", round, i), Body: body100}
		}
		if err := c.AddBatch(ctx, jobs); err != nil {
			b.Fatal(err)
		}
		target := acked.Load() + size
		b.StartTimer()
		if err := c.Resume(ctx, "drain"); err != nil {
			b.Fatal(err)
		}
		for acked.Load() < target {
			time.Sleep(time.Millisecond)
		}
	}
	b.ReportMetric(float64(size*b.N)/b.Elapsed().Seconds(), "jobs/s")
}

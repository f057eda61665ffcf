package redeq_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// benchClient returns a client on the real server at REDIS_ADDR, else on
// an embedded miniredis (whose figures say little about speed).
func benchClient(b *testing.B) *redeq.Client {
	cfg := testutil.Config(b)
	rdb := benchBackend(b).New(b)
	c, err := redeq.New(rdb, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cleanPrefix(b, rdb, cfg.Prefix) })
	return c
}

// benchBackend is the real server at REDIS_ADDR, else an embedded
// miniredis.
func benchBackend(b *testing.B) testutil.Backend {
	be := testutil.Backends(b)[0]
	for _, x := range testutil.Backends(b) {
		if x.Name == "redis" {
			be = x
		}
	}
	return be
}

func cleanPrefix(b *testing.B, rdb redis.UniversalClient, prefix string) {
	for _, k := range testutil.Keys(b, rdb, prefix) {
		rdb.Unlink(context.Background(), k)
	}
}

var body100 = []byte(strings.Repeat("x", 100))

// BenchmarkAdd: one delayed job with a 100-byte body per Add.
func BenchmarkAdd(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		if err := c.Add(ctx, &redeq.Job{Topic: "bench", ID: fmt.Sprint("a-", i), Body: body100, Delay: time.Hour}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAddWithDeadline: BenchmarkAdd with the ctx of a request, which
// can end (a deadline 5 s on): Add then returns when it ends, so the call
// to Redis runs off the caller's goroutine.
func BenchmarkAddWithDeadline(b *testing.B) {
	c := benchClient(b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := c.Add(rctx, &redeq.Job{Topic: "bench", ID: fmt.Sprint("d-", i), Body: body100, Delay: time.Hour})
		cancel()
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAddWithDeadlineCut: BenchmarkAddWithDeadline on a client
// whose ContextTimeoutEnabled makes go-redis end a call at its ctx's
// deadline: the call then runs on the caller's goroutine.
func BenchmarkAddWithDeadlineCut(b *testing.B) {
	cfg := testutil.Config(b)
	rdb := benchBackend(b).New(b)
	cut := redis.NewClient(&redis.Options{Addr: rdb.(*redis.Client).Options().Addr, ContextTimeoutEnabled: true})
	b.Cleanup(func() { cut.Close() })
	c, err := redeq.New(cut, cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cleanPrefix(b, rdb, cfg.Prefix) })
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := c.Add(rctx, &redeq.Job{Topic: "bench", ID: fmt.Sprint("c-", i), Body: body100, Delay: time.Hour})
		cancel()
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAddParallel: Add from GOMAXPROCS x 8 goroutines.
func BenchmarkAddParallel(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	var n atomic.Int64
	b.SetParallelism(8)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := c.Add(ctx, &redeq.Job{Topic: "bench", ID: fmt.Sprint("p-", n.Add(1)), Body: body100, Delay: time.Hour}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkAddBatch: AddBatch of 100 jobs; ns/op is per batch.
func BenchmarkAddBatch(b *testing.B) {
	c := benchClient(b)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	jobs := make([]*redeq.Job, 100)
	for b.Loop() {
		for k := range jobs {
			i++
			jobs[k] = &redeq.Job{Topic: "bench", ID: fmt.Sprint("b-", i), Body: body100, Delay: time.Hour}
		}
		if err := c.AddBatch(ctx, jobs); err != nil {
			b.Fatal(err)
		}
	}
}

// Quickstart: add a few delayed jobs, look at what is stored, run them with
// a listener, and shut down cleanly.
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/examples/internal/demo"
	"github.com/redeq-go/redeq/redeq"
)

// greeter is the listener of topic "greet".
type greeter struct {
	start time.Time
	wg    *sync.WaitGroup
}

func (greeter) Topic() string { return "greet" }

func (g greeter) OnJob(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
	fmt.Printf("%6s  ran job %s: %s\n", time.Since(g.start).Round(10*time.Millisecond), job.ID, job.Body)
	ch.Ack()
	g.wg.Done()
	return nil
}

func main() {
	ctx := context.Background()
	rdb, closeRedis := demo.Redis()
	defer closeRedis()

	cfg := config.Default()
	cfg.Prefix = "quickstart"
	c, err := redeq.New(rdb, cfg)
	demo.Check(err)

	var wg sync.WaitGroup
	start := time.Now()
	demo.Check(c.Register(greeter{start: start, wg: &wg}))
	demo.Check(c.Start(ctx))

	for i, d := range []time.Duration{300 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond} {
		id := fmt.Sprintf("hello-%d", i)
		_, _ = c.Delete(ctx, "greet", id) // a rerun against a real server starts clean
		wg.Add(1)
		demo.Check(c.Add(ctx, &redeq.Job{Topic: "greet", ID: id, Body: []byte(fmt.Sprintf("due after %v", d)), Delay: d}))
	}
	st, err := c.Stats(ctx, "greet")
	demo.Check(err)
	fmt.Printf("stored: %d jobs, %d scheduled\n", st.Pool, st.Scheduled)
	job, err := c.Get(ctx, "greet", "hello-1")
	demo.Check(err)
	fmt.Printf("job %s is %s, due %s after it was created\n", job.ID, job.State, job.RunAt.Sub(job.CreatedAt))

	wg.Wait()
	demo.Check(c.Shutdown(ctx))
	st, err = c.Stats(ctx, "greet")
	demo.Check(err)
	fmt.Printf("done: %d jobs left\n", st.Pool)
}

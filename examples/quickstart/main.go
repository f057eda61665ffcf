// Quickstart: a typed handler with logging middleware, a few delayed jobs,
// a look at what is stored, and Run until the work is done.
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/examples/internal/demo"
	"github.com/redeq-go/redeq/redeq"
)

// Greeting is the payload of topic "greet", stored as JSON.
type Greeting struct {
	Name string `json:"name"`
}

// logged is middleware: it sees every job (with its headers) before the
// handler, and the handler's error after.
func logged(next redeq.Handler) redeq.Handler {
	return func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		start := time.Now()
		err := next(ctx, job, ch)
		slog.Info("job", "topic", job.Topic, "id", job.ID, "request", job.Headers["request-id"], "took", time.Since(start), "err", err)
		return err
	}
}

func main() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rdb, closeRedis := demo.Redis()
	defer closeRedis()

	cfg := config.Default()
	cfg.Prefix = "quickstart"
	c, err := redeq.New(rdb, cfg)
	demo.Check(err)
	demo.Check(c.Use(logged))

	// A typed handler: nil acks the job, an error retries it.
	var wg sync.WaitGroup
	start := time.Now()
	demo.Check(c.Register(redeq.Typed("greet", func(ctx context.Context, g Greeting) error {
		fmt.Printf("%6s  hello, %s\n", time.Since(start).Round(10*time.Millisecond), g.Name)
		wg.Done()
		return nil
	})))

	for i, name := range []string{"Ada", "Grace", "Barbara"} {
		id := fmt.Sprintf("hello-%d", i)
		_, _ = c.Delete(ctx, "greet", id) // a rerun against a real server starts clean
		wg.Add(1)
		delay := time.Duration(300-100*i) * time.Millisecond
		_, err := redeq.AddTyped(ctx, c, "greet", id, Greeting{Name: name}, delay)
		demo.Check(err)
	}
	// A job with headers (a request id, a trace context, a tenant): they
	// travel with the job, and middleware reads them.
	_, _ = c.Delete(ctx, "greet", "with-headers")
	wg.Add(1)
	demo.Check(c.Add(ctx, &redeq.Job{Topic: "greet", ID: "with-headers", Body: []byte(`{"name":"Edsger"}`),
		Delay: 50 * time.Millisecond, Headers: map[string]string{"request-id": "r-42"}}))
	job, err := c.Get(ctx, "greet", "hello-1")
	demo.Check(err)
	fmt.Printf("job %s is %s, due %s after it was created\n", job.ID, job.State, job.RunAt.Sub(job.CreatedAt))

	// Run serves until ctx is done or SIGINT/SIGTERM, then shuts down
	// gracefully; here ctx ends once every greeting ran.
	go func() { wg.Wait(); cancel() }()
	demo.Check(c.Run(ctx))

	st, err := c.Stats(context.Background(), "greet")
	demo.Check(err)
	fmt.Printf("done: %d jobs left\n", st.Pool)
}

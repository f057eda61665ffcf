package redeq_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/dashboard"
	"github.com/redeq-go/redeq/redeq"
)

// closeOrder is the listener of topic "order.close".
type closeOrder struct{ done chan string }

func (closeOrder) Topic() string { return "order.close" }

func (l closeOrder) OnJob(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
	ch.Ack()
	l.done <- "closed order " + string(job.Body)
	return nil
}

// A service adds a job that closes an unpaid order after a delay, deletes
// the job of an order paid in time, and runs the rest with a listener.
func Example() {
	srv := miniredis.NewMiniRedis() // any redis.UniversalClient will do
	if err := srv.Start(); err != nil {
		panic(err)
	}
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()

	ctx := context.Background()
	c, err := redeq.New(rdb, config.Default())
	if err != nil {
		panic(err)
	}
	l := closeOrder{done: make(chan string)}
	if err := c.Register(l); err != nil {
		panic(err)
	}
	if err := c.Start(ctx); err != nil {
		panic(err)
	}

	for _, id := range []string{"41", "42"} {
		err := c.Add(ctx, &redeq.Job{Topic: "order.close", ID: id, Body: []byte(id), Delay: 50 * time.Millisecond})
		if err != nil {
			panic(err)
		}
	}
	paid, err := c.Delete(ctx, "order.close", "41")
	fmt.Println("deleted the job of order", string(paid.Body), err)

	fmt.Println(<-l.done)
	fmt.Println("shutdown:", c.Shutdown(ctx)) // applies the handler's ack
	_, err = c.Get(ctx, "order.close", "42")
	fmt.Println("job 42 gone:", errors.Is(err, redeq.ErrJobNotFound))
	// Output:
	// deleted the job of order 41 <nil>
	// closed order 42
	// shutdown: <nil>
	// job 42 gone: true
}

// closeOrderPayload is the README's payload bound to its topic.
type closeOrderPayload struct {
	OrderID string `json:"order_id"`
}

func (closeOrderPayload) Topic() string { return "order.close" }

// A payload type names its topic: AddFor adds it there, TypedFor listens
// to it, and a typed call of another topic is refused. Handlers read their
// job (id, attempt, headers) from their context.
func ExampleAddFor() {
	srv := miniredis.NewMiniRedis()
	if err := srv.Start(); err != nil {
		panic(err)
	}
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	c, err := redeq.New(rdb, config.Default())
	if err != nil {
		panic(err)
	}
	done := make(chan struct{})
	err = c.Register(redeq.TypedFor(func(ctx context.Context, o closeOrderPayload) error {
		job, _ := redeq.JobFromContext(ctx)
		fmt.Printf("closing order %s (job %s, attempt %d, tenant %s)\n", o.OrderID, job.ID, job.Attempt, job.Headers["tenant"])
		close(done)
		return nil
	}))
	if err != nil {
		panic(err)
	}
	if err := c.Start(ctx); err != nil {
		panic(err)
	}
	id, err := redeq.AddFor(ctx, c, "order-42", closeOrderPayload{"42"}, 10*time.Millisecond, redeq.WithHeader("tenant", "acme"))
	fmt.Println("added", id, err)
	_, err = redeq.AddTyped(ctx, c, "mail.send", "1", closeOrderPayload{}, 0)
	fmt.Println(errors.Is(err, redeq.ErrInvalidJob))
	<-done
	fmt.Println("shutdown:", c.Shutdown(ctx))
	// Output:
	// added order-42 <nil>
	// true
	// closing order 42 (job order-42, attempt 0, tenant acme)
	// shutdown: <nil>
}

// The README's snippets, kept here so that they compile as written (the
// one of "Testing your service" is TestUnpaidOrderCloses in redeqtest).
// They are not run: they need a Redis at localhost:6379.

type CloseOrder struct {
	OrderID string `json:"order_id"`
}

func (CloseOrder) Topic() string { return "order.close" } // CloseOrder is now a redeq.Payload

func closeIfUnpaid(ctx context.Context, id string) error { return nil }

func readmeMiddleware(next redeq.Handler) redeq.Handler { return next }

// The README's section "Use".
func Example_readme() {
	ctx := context.Background()
	logging, tracing := readmeMiddleware, readmeMiddleware

	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"}) // any redis.UniversalClient: TLS, ACL, Sentinel, Cluster
	c, err := redeq.New(rdb, config.Default())                     // or redeq.Open(ctx, "redeq.yaml"): config and connection in one file

	c.Use(logging, tracing) // middleware: func(redeq.Handler) redeq.Handler, sees every job and its Headers

	// A typed handler: the body is decoded from JSON; nil acks, an error retries
	// (on the interval list, then FinalRetry, then the dead set).
	c.Register(redeq.Typed("order.close", func(ctx context.Context, o CloseOrder) error {
		return closeIfUnpaid(ctx, o.OrderID)
	}, redeq.WithRetry(5, time.Minute, 5*time.Minute), redeq.WithWorkers(16)))

	id, err := redeq.AddTyped(ctx, c, "order.close", "42", CloseOrder{"42"}, 30*time.Minute) // returns the id ("" assigns a UUID)
	c.Delete(ctx, "order.close", id)                                                         // paid in time: it will not run

	// The typed producers' snippet.
	c.Register(redeq.TypedFor(func(ctx context.Context, o CloseOrder) error {
		job, _ := redeq.JobFromContext(ctx) // its id, attempt, headers
		return closeIfUnpaid(ctx, job.ID)
	}))
	id, err = redeq.AddFor(ctx, c, "42", CloseOrder{"42"}, 30*time.Minute)
	_, err = redeq.AddTyped(ctx, c, "mail.send", "1", CloseOrder{"42"}, 0) // ErrInvalidJob: bound to order.close

	// The periodic jobs' snippet.
	c.PutSchedule(ctx, redeq.Schedule{Name: "digest", Topic: "mail.digest",
		Spec: "0 8 * * *", TimeZone: "Europe/Paris", CatchUp: redeq.CatchUpLatest})

	// The dashboard's snippet.
	http.Handle("/redeq/", dashboard.New(c, dashboard.Options{
		Path: "/redeq", Token: os.Getenv("REDEQ_DASHBOARD_TOKEN"), ReadOnly: true,
	}))

	err = c.Run(ctx) // start; on ctx done or SIGINT/SIGTERM shut down gracefully
	_ = err
}

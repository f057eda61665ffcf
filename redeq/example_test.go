package redeq_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/config"
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

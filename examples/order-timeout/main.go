// Order timeout: every new order gets a job that closes it if it is still
// unpaid after a delay; paying deletes the job.
//
//	go run ./examples/order-timeout -timeout 500ms
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sync"
	"time"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/examples/internal/demo"
	"github.com/redeq-go/redeq/redeq"
)

const topic = "order.close"

// orders is the service's own state.
type orders struct {
	mu     sync.Mutex
	status map[string]string
	closed chan string
}

func (o *orders) Topic() string { return topic }

// OnJob closes the order if it is still unpaid. Closing is idempotent, as
// a handler should be: redeq delivers at least once.
func (o *orders) OnJob(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
	id := string(job.Body)
	o.mu.Lock()
	if o.status[id] == "unpaid" {
		o.status[id] = "closed"
	}
	o.mu.Unlock()
	ch.Ack()
	o.closed <- id
	return nil
}

func main() {
	timeout := flag.Duration("timeout", 500*time.Millisecond, "how long an order may stay unpaid (30m in production)")
	flag.Parse()
	ctx := context.Background()
	rdb, closeRedis := demo.Redis()
	defer closeRedis()

	cfg := config.Default()
	cfg.Prefix = "order-demo"
	c, err := redeq.New(rdb, cfg)
	demo.Check(err)
	o := &orders{status: map[string]string{}, closed: make(chan string, 10)}
	demo.Check(c.Register(o))
	demo.Check(c.Start(ctx))

	ids := []string{"1001", "1002", "1003"}
	for _, id := range ids {
		o.mu.Lock()
		o.status[id] = "unpaid"
		o.mu.Unlock()
		_, _ = c.Delete(ctx, topic, id)
		demo.Check(c.Add(ctx, &redeq.Job{Topic: topic, ID: id, Body: []byte(id), Delay: *timeout}))
		fmt.Printf("order %s placed; closes in %v unless paid\n", id, *timeout)
	}

	// Order 1002 is paid in time: its job is deleted and never runs.
	o.mu.Lock()
	o.status["1002"] = "paid"
	o.mu.Unlock()
	_, err = c.Delete(ctx, topic, "1002")
	demo.Check(err)
	fmt.Println("order 1002 paid; its timeout job deleted")

	for range 2 {
		fmt.Printf("order %s closed: still unpaid after %v\n", <-o.closed, *timeout)
	}
	demo.Check(c.Shutdown(ctx))
	_, err = c.Get(ctx, topic, "1002")
	fmt.Println("job of order 1002 gone:", errors.Is(err, redeq.ErrJobNotFound))
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, id := range ids {
		fmt.Printf("order %s: %s\n", id, o.status[id])
	}
}

// Callback retry: call a partner back until it answers, on the schedule
// 1m, 5m, 10m, 30m, 1h; when every retry failed, FinalRetry raises an alert.
// -scale shortens the schedule for a demo (default: 1m becomes 60ms).
//
//	go run ./examples/callback-retry
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"time"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/examples/internal/demo"
	"github.com/redeq-go/redeq/redeq"
)

// partner answers the callback of "order-7" on its fourth call, and never
// answers "order-9".
type partner struct {
	start time.Time
	done  chan string
}

func (partner) Topic() string { return "partner.callback" }

func (p partner) OnJob(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
	at := time.Since(p.start).Round(10 * time.Millisecond)
	if job.ID == "order-7" && job.Attempt == 3 {
		fmt.Printf("%6v  %s: call %d answered\n", at, job.ID, job.Attempt+1)
		ch.Ack()
		p.done <- job.ID
		return nil
	}
	fmt.Printf("%6v  %s: call %d failed\n", at, job.ID, job.Attempt+1)
	return errors.New("partner did not answer")
}

// FinalRetry runs once when the schedule is exhausted.
func (p partner) FinalRetry(ctx context.Context, job *redeq.Job) {
	fmt.Printf("%6v  %s: gave up after %d calls, alerting a human\n", time.Since(p.start).Round(10*time.Millisecond), job.ID, job.Attempt)
	p.done <- job.ID
}

func main() {
	scale := flag.Duration("scale", time.Millisecond, "what one second of the schedule lasts (time.Second for real)")
	flag.Parse()
	ctx := context.Background()
	rdb, closeRedis := demo.Redis()
	defer closeRedis()

	var schedule []time.Duration
	for _, d := range []time.Duration{time.Minute, 5 * time.Minute, 10 * time.Minute, 30 * time.Minute, time.Hour} {
		schedule = append(schedule, time.Duration(d.Seconds())*(*scale))
	}
	cfg := config.Default()
	cfg.Prefix = "callback-demo"
	c, err := redeq.New(rdb, cfg)
	demo.Check(err)
	p := partner{start: time.Now(), done: make(chan string, 2)}
	demo.Check(c.Register(p))
	demo.Check(c.Start(ctx))
	fmt.Println("retry schedule:", schedule)
	for _, id := range []string{"order-7", "order-9"} {
		_, _ = c.Delete(ctx, "partner.callback", id)
		demo.Check(c.Add(ctx, &redeq.Job{Topic: "partner.callback", ID: id,
			MaxRetries: len(schedule), RetryIntervals: schedule}))
	}
	<-p.done
	<-p.done
	demo.Check(c.Shutdown(ctx))
	dead, err := c.DeadJobs(ctx, "partner.callback", 10)
	demo.Check(err)
	for _, j := range dead {
		fmt.Printf("dead: %s after %d attempts\n", j.ID, j.Attempt)
	}
}

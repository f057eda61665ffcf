// Periodic: a schedule adds one job per tick to its topic, exactly once
// across every instance of the service. Here two clients stand for two
// instances: both put the same schedule at start-up (the second put
// changes nothing) and both run it; each tick runs once.
//
//	go run ./examples/periodic -ticks 3
package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/examples/internal/demo"
	"github.com/redeq-go/redeq/redeq"
)

const topic = "orders.sweep"

func main() {
	n := flag.Int("ticks", 3, "how many ticks to wait for")
	flag.Parse()
	ctx := context.Background()
	rdb, closeRedis := demo.Redis()
	defer closeRedis()

	sweep := redeq.Schedule{
		Name:  "sweep-unpaid",
		Topic: topic,
		Spec:  "@every 1s", // "*/5 * * * *" for every 5 minutes, "0 8 * * *" with TimeZone "Europe/Paris" ...
		Body:  []byte("close the orders unpaid for 30 minutes"),
	}
	next, err := redeq.NextTicks(sweep, time.Now(), 3)
	demo.Check(err)
	fmt.Println("next ticks:", len(next))

	ran := make(chan string, 16)
	var instances []*redeq.Client
	for i := range 2 {
		cfg := config.Default()
		cfg.Prefix = "periodic-demo"
		c, err := redeq.New(rdb, cfg)
		demo.Check(err)
		demo.Check(c.PutSchedule(ctx, sweep)) // every instance, at start-up
		if i == 0 {
			demo.Check(c.Register(redeq.ListenerFunc(topic, func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
				name, tick, _ := redeq.TickOf(job)
				ch.Ack()
				ran <- fmt.Sprintf("%s ran the tick of %s", name, tick.Format("15:04:05"))
				return nil
			})))
		}
		demo.Check(c.Start(ctx))
		instances = append(instances, c)
	}
	for range *n {
		<-ran
		fmt.Println("sweep-unpaid ran its tick once")
	}
	infos, err := instances[0].Schedules(ctx)
	demo.Check(err)
	for _, in := range infos {
		fmt.Printf("%s: %s, paused %v, skipped %d\n", in.Name, in.Spec, in.Paused, in.Skipped)
	}
	demo.Check(instances[0].DeleteSchedule(ctx, sweep.Name))
	for _, c := range instances {
		demo.Check(c.Shutdown(ctx))
	}
}

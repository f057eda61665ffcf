// Broadcast: three instances of a service each cache prices; a broadcast
// job tells every running instance to drop its cache at a set time.
//
//	go run ./examples/broadcast
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

// instance is one running copy of the service.
type instance struct {
	name string
	wg   *sync.WaitGroup
}

func (i instance) Topics() []string { return []string{"cache.invalidate"} }

func (i instance) OnBroadcast(ctx context.Context, job *redeq.Job) {
	fmt.Printf("%s: dropping cache %q\n", i.name, job.Body)
	i.wg.Done()
}

func main() {
	ctx := context.Background()
	rdb, closeRedis := demo.Redis()
	defer closeRedis()
	cfg := config.Default()
	cfg.Prefix = "broadcast-demo"

	var wg sync.WaitGroup
	var clients []*redeq.Client
	for n := range 3 {
		c, err := redeq.New(rdb, cfg) // in production: one per process
		demo.Check(err)
		demo.Check(c.RegisterBroadcast(instance{name: fmt.Sprintf("instance-%d", n+1), wg: &wg}))
		demo.Check(c.Start(ctx))
		clients = append(clients, c)
	}
	wg.Add(3)
	_, _ = clients[0].Delete(ctx, "cache.invalidate", "prices")
	demo.Check(clients[0].Add(ctx, &redeq.Job{Topic: "cache.invalidate", ID: "prices",
		Body: []byte("prices"), Broadcast: true, Delay: 200 * time.Millisecond}))
	fmt.Println("broadcast scheduled in 200ms")
	wg.Wait()
	for _, c := range clients {
		demo.Check(c.Shutdown(ctx))
	}
	fmt.Println("every instance got it once")
}

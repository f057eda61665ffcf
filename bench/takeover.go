package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/bucket"
	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/redeq"
)

// takeoverChild is the -child name of a process that only moves: a
// started redeq client with no listener, which prints its id.
const takeoverChild = "redeq-mover"

// takeoverConfig is the configuration of both clients of the takeover
// measurement: the defaults, one bucket per topic.
func takeoverConfig() config.Config {
	cfg := config.Default()
	cfg.Concurrency = 1
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	return cfg
}

// runMoverChild runs the child of the takeover measurement until killed.
func runMoverChild(rdb redis.UniversalClient) {
	c, err := redeq.New(rdb, takeoverConfig())
	if err != nil {
		fail("%v", err)
	}
	if err := c.Start(context.Background()); err != nil {
		fail("%v", err)
	}
	fmt.Println("id", c.ConsumerID())
	select {}
}

// takeover: a client that owns a bucket, and holds its mover's lock, is
// killed with SIGKILL; jobs then added to that bucket, due 100 ms later,
// are moved by the surviving client once it sees the owner gone (after
// LiveFor, 2.5 ScanIntervals) and runs it without waiting for the dead
// owner's lock to expire. The figure is the time from the kill to the
// last of 10 such jobs running; redeq only.
func (b *bench) takeover() {
	const rounds, jobs = 3, 10
	fmt.Printf("takeover of a bucket whose owner was killed (%d rounds, %d jobs due 100 ms after the kill)\n", rounds, jobs)
	var took []float64
	for round := range rounds {
		b.flush()
		sc, kill := b.startChild(takeoverChild)
		ownerID := ""
		for ownerID == "" && sc.Scan() {
			ownerID, _ = strings.CutPrefix(sc.Text(), "id ")
		}
		if ownerID == "" {
			fail("mover child printed no id")
		}
		go func() {
			for sc.Scan() { // keep the pipe drained until the kill
			}
		}()
		rdb := b.newClient()
		b.cleanup.add(func() { rdb.Close() })
		survivor, err := redeq.New(rdb, takeoverConfig())
		if err != nil {
			fail("%v", err)
		}
		name := ""
		for i := 0; name == ""; i++ {
			if n := fmt.Sprintf("takeover-%d-%d", round, i); bucket.Owner([]string{ownerID, survivor.ConsumerID()}, keys.Address(n, 0)) == ownerID {
				name = n
			}
		}
		ran := make(chan string, jobs)
		if err := survivor.Register(redeq.ListenerFunc(name, func(_ context.Context, job *redeq.Job, ch *redeq.Channel) error {
			ch.Ack()
			ran <- job.ID
			return nil
		})); err != nil {
			fail("%v", err)
		}
		// Records the topic; the child moves it once both announced.
		if err := survivor.Add(b.ctx, &redeq.Job{Topic: name, ID: "later", Delay: time.Hour}); err != nil {
			fail("%v", err)
		}
		if err := survivor.Start(b.ctx); err != nil {
			fail("%v", err)
		}
		stop := b.cleanup.add(func() { _ = survivor.Shutdown(context.Background()) })
		lock := keys.ForBucket(config.Default().Prefix, name, 0).Lock()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if v, err := b.admin.PTTL(b.ctx, lock).Result(); err == nil && v > 5*time.Second {
				break // the child holds the lock, far from expiry
			}
			if time.Now().After(deadline) {
				fail("the mover child never held its bucket's lock")
			}
		}
		kill()
		killed := time.Now()
		for i := range jobs {
			if err := survivor.Add(b.ctx, &redeq.Job{Topic: name, ID: fmt.Sprint("j", i), Delay: 100 * time.Millisecond}); err != nil {
				fail("%v", err)
			}
		}
		timeout := time.After(time.Minute)
		for range jobs {
			select {
			case <-ran:
			case <-timeout:
				fail("the jobs of the killed owner's bucket did not run within a minute")
			}
		}
		took = append(took, time.Since(killed).Seconds())
		fmt.Printf("  round %d: the last job ran %.2f s after the kill\n", round+1, took[len(took)-1])
		stop()
	}
	b.res.Rows = append(b.res.Rows, row{Name: "takeover of a killed owner's bucket", Unit: "s", Redeq: median(took), Better: "lower", Solo: true,
		Comment: fmt.Sprintf("median of %d rounds: from SIGKILL of the bucket's owner to the last of %d jobs due 100 ms later running on the other client", rounds, jobs)})
}

// median is the middle value of xs (the mean of the two middle ones when
// even); xs is sorted in place.
func median(xs []float64) float64 {
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

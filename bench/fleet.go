package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/redeq"
)

var (
	fleetClients   = flag.String("clients", "", "idle: measure fleets of these sizes (comma-separated), e.g. 1,10,30, instead of one client")
	fleetTopics    = flag.Int("topics", 100, "idle with -clients: topics")
	fleetBuckets   = flag.Int("buckets", 8, "idle with -clients: buckets per topic")
	fleetListeners = flag.Bool("listeners", false, "idle with -clients: every client listens to every topic")
	fleetWarmup    = flag.Duration("warmup", 10*time.Second, "idle with -clients: start-up time left out of the window")
	fleetWindow    = flag.Duration("window", 30*time.Second, "idle with -clients: measured window")
	fleetScheds    = flag.String("schedules", "0", "idle with -clients: measure each fleet with these numbers of periodic schedules (comma-separated), e.g. 0,100; every client puts them at start, as every instance of a service does")
)

// fleet: N started clients in this process, each with its own connection,
// on T topics x B buckets with no jobs. What Redis executes per second
// (INFO commandstats, script-inner commands included) and the CPU it
// spends, after a warm-up; the figure a deployment of N replicas pays for
// doing nothing.
func (b *bench) fleet() {
	sizes := counts("-clients", *fleetClients, 1)
	scheds := counts("-schedules", *fleetScheds, 0)
	topics, buckets := *fleetTopics, *fleetBuckets
	fmt.Printf("idle fleet: %d topics x %d buckets, listeners %v, no jobs; %v warm-up, %v window\n",
		topics, buckets, *fleetListeners, *fleetWarmup, *fleetWindow)
	for _, n := range sizes {
		for _, k := range scheds {
			b.fleetOne(n, topics, buckets, *fleetListeners, k)
		}
	}
}

// counts parses a comma-separated list of numbers of at least least.
func counts(flagName, list string, least int) []int {
	var out []int
	for _, s := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < least {
			fail("%s: bad number %q", flagName, s)
		}
		out = append(out, n)
	}
	return out
}

// fleetSchedule is the i-th schedule of an idle fleet: hourly, so that no
// tick falls in the window and what is measured is the schedules' passes.
func fleetSchedule(i int, topic string) redeq.Schedule {
	return redeq.Schedule{Name: fmt.Sprintf("idle-sched-%03d", i), Topic: topic, Spec: "@every 1h"}
}

func (b *bench) fleetOne(n, topics, buckets int, listen bool, scheds int) {
	b.flush()
	cfg := config.Default()
	cfg.Concurrency = buckets
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	names := make([]string, topics)
	{
		// Record the topics the way a producer does: add and remove a job.
		rdb := b.newClient()
		c, err := redeq.New(rdb, cfg)
		if err != nil {
			fail("%v", err)
		}
		for i := range names {
			names[i] = fmt.Sprintf("idle-%03d", i)
			if err := c.Add(b.ctx, &redeq.Job{Topic: names[i], ID: "x", Delay: time.Hour}); err != nil {
				fail("%v", err)
			}
			if _, err := c.Delete(b.ctx, names[i], "x"); err != nil {
				fail("%v", err)
			}
		}
		rdb.Close()
	}
	clients := make([]*redeq.Client, n)
	conns := make([]redis.UniversalClient, n)
	for i := range clients {
		conns[i] = redis.NewClient(&redis.Options{Addr: *addr, DB: *db, PoolSize: 16})
		c, err := redeq.New(conns[i], cfg)
		if err != nil {
			fail("%v", err)
		}
		if listen {
			for _, name := range names {
				l := redeqListener{workers: 1, handle: func(context.Context, string, []byte, int) {}}.named(name)
				if err := c.Register(l); err != nil {
					fail("%v", err)
				}
			}
		}
		for k := range scheds {
			if err := c.PutSchedule(b.ctx, fleetSchedule(k, names[k%len(names)])); err != nil {
				fail("%v", err)
			}
		}
		if err := c.Start(b.ctx); err != nil {
			fail("%v", err)
		}
		clients[i] = c
	}
	time.Sleep(*fleetWarmup)
	calls0, byCmd0 := b.commandStats()
	cpu0 := b.serverCPU()
	t0 := time.Now()
	time.Sleep(*fleetWindow)
	calls1, byCmd1 := b.commandStats()
	cpu1 := b.serverCPU()
	secs := time.Since(t0).Seconds()

	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			_ = c.Shutdown(b.ctx)
			conns[i].Close()
		})
	}
	wg.Wait()

	perSec := float64(calls1-calls0-1) / secs // less one INFO
	cpu := (cpu1 - cpu0) / secs * 100
	perBucket := perSec / float64(topics*buckets)
	label := fmt.Sprintf("idle fleet, %d clients, %d x %d buckets", n, topics, buckets)
	if listen {
		label += ", listeners"
	}
	if scheds > 0 {
		label += fmt.Sprintf(", %d schedules", scheds)
	}
	b.res.Rows = append(b.res.Rows,
		row{Name: label + ", executed", Unit: "calls/s", Redeq: perSec, Better: "lower", Solo: true,
			Comment: fmt.Sprintf("%.2f per bucket per second; Redis CPU %.1f%%", perBucket, cpu)})
	fmt.Printf("  %2d clients, %3d schedules: %9.1f calls/s = %5.2f per bucket per s; Redis CPU %5.1f%%\n", n, scheds, perSec, perBucket, cpu)
	type share struct {
		cmd string
		n   float64
	}
	var top []share
	for cmd, v := range byCmd1 {
		if d := float64(v-byCmd0[cmd]) / secs; d >= 0.05*perSec {
			top = append(top, share{cmd, d})
		}
	}
	sort.Slice(top, func(i, j int) bool { return top[i].n > top[j].n })
	for _, s := range top {
		fmt.Printf("      %-12s %9.1f/s\n", s.cmd, s.n)
	}
}

// commandStats returns the calls the server executed (script-inner ones
// included), in total and per command.
func (b *bench) commandStats() (int64, map[string]int64) {
	s, err := b.admin.Info(b.ctx, "commandstats").Result()
	if err != nil {
		fail("info: %v", err)
	}
	var total int64
	by := map[string]int64{}
	for _, line := range strings.Split(s, "\n") {
		name, rest, ok := strings.Cut(line, ":calls=")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
		total += n
		by[strings.TrimPrefix(name, "cmdstat_")] = n
	}
	return total, by
}

// Command bench measures redeq and asynq side by side on one redis-server,
// alternating between them, and prints one table of figures and ratios.
//
//	cd bench && go run . -redis 127.0.0.1:6379
//
// It uses database -db (15 by default) and flushes it between
// measurements: point it at a server with nothing you need in that
// database. Both libraries run with their defaults except the worker count
// (16 for both in the drain, as asked of the comparison).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	addr     = flag.String("redis", "127.0.0.1:6379", "redis-server address")
	db       = flag.Int("db", 15, "database the bench owns and flushes")
	quick    = flag.Bool("quick", false, "smaller sizes, for a fast look")
	jsonOut  = flag.String("json", "../docs/bench-results.json", "where to write the figures")
	svgOut   = flag.String("svg", "../docs/lateness.svg", "where to draw the lateness chart")
	only     = flag.String("only", "", "comma-separated measurements to run (enqueue,memory,drain,lateness,growth,recovery,idle,burst); idle with -clients measures fleets")
	recovery = flag.Duration("recovery-timeout", 4*time.Minute, "how long to wait for a killed consumer's jobs")
	child    = flag.String("child", "", "internal: run as a consumer process of this system")
	which    = flag.String("systems", "redeq,asynq", "systems to measure (a ratio needs both)")
	replot   = flag.Bool("replot", false, "redraw the chart from -json and print its table, measuring nothing")
	cpuprof  = flag.String("cpuprofile", "", "write a CPU profile of the whole run (both systems) here")
)

// sizes of the measurements.
type sizes struct {
	Enqueue, Memory, Drain, Lateness, Growth, Held int
	Spread                                         time.Duration
}

func sizesFor(quick bool) sizes {
	if quick {
		return sizes{Enqueue: 5000, Memory: 20000, Drain: 10000, Lateness: 1000, Growth: 100_000, Held: 20, Spread: 5 * time.Second}
	}
	return sizes{Enqueue: 20000, Memory: 100_000, Drain: 20000, Lateness: 2000, Growth: 1_000_000, Held: 20, Spread: 5 * time.Second}
}

// row is one line of the table: the figure of each system and their ratio.
type row struct {
	Name    string  `json:"name"`
	Unit    string  `json:"unit"`
	Redeq   float64 `json:"redeq"`
	Asynq   float64 `json:"asynq"`
	Better  string  `json:"better"` // "higher" or "lower"
	Solo    bool    `json:"redeq_only,omitempty"`
	Comment string  `json:"comment,omitempty"`
}

type results struct {
	When     time.Time            `json:"when"`
	Server   string               `json:"server"`
	Sizes    sizes                `json:"sizes"`
	Rows     []row                `json:"rows"`
	Lateness map[string][]float64 `json:"lateness_ms"`
}

func main() {
	flag.Parse()
	newClient := func() redis.UniversalClient {
		return redis.NewClient(&redis.Options{Addr: *addr, DB: *db, PoolSize: 64})
	}
	if *child != "" {
		runChild(*child, newClient)
		return
	}
	if *replot {
		var res results
		data, err := os.ReadFile(*jsonOut)
		if err == nil {
			err = json.Unmarshal(data, &res)
		}
		if err != nil {
			fail("read %s: %v", *jsonOut, err)
		}
		printTable(&res)
		if err := os.WriteFile(*svgOut, []byte(latenessSVG(res.Lateness)), 0o644); err != nil {
			fail("write %s: %v", *svgOut, err)
		}
		return
	}
	if *cpuprof != "" {
		f, err := os.Create(*cpuprof)
		if err != nil {
			fail("%v", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fail("%v", err)
		}
		defer pprof.StopCPUProfile()
	}
	ctx := context.Background()
	admin := newClient()
	defer admin.Close()
	if err := admin.Ping(ctx).Err(); err != nil {
		fail("connect to %s: %v", *addr, err)
	}
	info, _ := admin.Info(ctx, "server").Result()
	sz := sizesFor(*quick)
	res := &results{When: time.Now().UTC(), Server: field(info, "redis_version"), Sizes: sz, Lateness: map[string][]float64{}}
	b := &bench{ctx: ctx, admin: admin, newClient: newClient, sz: sz, res: res}

	want := func(name string) bool { return *only == "" || strings.Contains(","+*only+",", ","+name+",") }
	if want("enqueue") {
		b.enqueue()
	}
	if want("memory") {
		b.memory()
	}
	if want("drain") {
		b.drain()
	}
	if want("lateness") {
		b.lateness()
	}
	if want("growth") {
		b.growth()
	}
	if want("recovery") {
		b.recovery()
	}
	if want("idle") {
		b.idle()
	}
	if want("burst") {
		b.burst()
	}
	b.flush()
	printTable(res)
	data, _ := json.MarshalIndent(res, "", "  ")
	if err := os.WriteFile(*jsonOut, data, 0o644); err != nil {
		fail("write %s: %v", *jsonOut, err)
	}
	if len(res.Lateness) > 0 && *svgOut != "" {
		if err := os.WriteFile(*svgOut, []byte(latenessSVG(res.Lateness)), 0o644); err != nil {
			fail("write %s: %v", *svgOut, err)
		}
	}
	fmt.Printf("\nfigures in %s", *jsonOut)
	if len(res.Lateness) > 0 {
		fmt.Printf(", lateness chart in %s", *svgOut)
	}
	fmt.Println()
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
	os.Exit(1)
}

type bench struct {
	ctx       context.Context
	admin     redis.UniversalClient
	newClient func() redis.UniversalClient
	sz        sizes
	res       *results
	round     int
}

// systems returns both systems, in alternating order from one
// measurement to the next, so neither always runs on a warmer server.
func (b *bench) systems() []system {
	var s []system
	if strings.Contains(*which, "redeq") {
		s = append(s, newRedeq(b.newClient))
	}
	if strings.Contains(*which, "asynq") {
		s = append(s, newAsynq(b.newClient))
	}
	b.round++
	if b.round%2 == 0 && len(s) == 2 {
		s[0], s[1] = s[1], s[0]
	}
	return s
}

func (b *bench) flush() {
	if err := b.admin.FlushDB(b.ctx).Err(); err != nil {
		fail("flushdb: %v", err)
	}
	time.Sleep(100 * time.Millisecond) // let lazy frees finish before memory readings
}

func (b *bench) add(name, unit, better, comment string, figures map[string]float64) {
	b.res.Rows = append(b.res.Rows, row{Name: name, Unit: unit, Redeq: figures["redeq"], Asynq: figures["asynq"], Better: better, Comment: comment})
	fmt.Printf("  %-40s redeq %12.1f  asynq %12.1f %s\n", name, figures["redeq"], figures["asynq"], unit)
}

// commands is the number of commands the server has executed, those run
// inside scripts included (INFO commandstats), less the INFO call itself.
func (b *bench) commands() int64 {
	s, err := b.admin.Info(b.ctx, "commandstats").Result()
	if err != nil {
		fail("info: %v", err)
	}
	var total int64
	for _, line := range strings.Split(s, "\n") {
		_, rest, ok := strings.Cut(line, ":calls=")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
		total += n
	}
	return total
}

func (b *bench) usedMemory() int64 {
	s, err := b.admin.Info(b.ctx, "memory").Result()
	if err != nil {
		fail("info: %v", err)
	}
	n, _ := strconv.ParseInt(field(s, "used_memory"), 10, 64)
	return n
}

func field(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

var body100 = []byte(strings.Repeat("x", 100))

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%07d", prefix, i)
	}
	return out
}

// enqueueRate adds n delayed jobs with g goroutines (batch: in batches of
// 100) and returns jobs per second.
func (b *bench) enqueueRate(s system, n, g int, batch bool, prefix string) float64 {
	list := ids(prefix, n)
	at := time.Now().Add(time.Hour)
	var next atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range g {
		wg.Go(func() {
			for {
				if batch {
					i := int(next.Add(100)) - 100
					if i >= n {
						return
					}
					if err := s.EnqueueBatch(b.ctx, list[i:min(i+100, n)], body100, at); err != nil {
						fail("%s enqueue: %v", s.Name(), err)
					}
					continue
				}
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := s.Enqueue(b.ctx, list[i], body100, at); err != nil {
					fail("%s enqueue: %v", s.Name(), err)
				}
			}
		})
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds()
}

func (b *bench) enqueue() {
	fmt.Println("enqueue of delayed jobs, 100-byte body")
	one, sixteen, batch := map[string]float64{}, map[string]float64{}, map[string]float64{}
	for _, s := range b.systems() {
		b.flush()
		one[s.Name()] = b.enqueueRate(s, b.sz.Enqueue/4, 1, false, "e1")
		b.flush()
		sixteen[s.Name()] = b.enqueueRate(s, b.sz.Enqueue, 16, false, "e16")
		b.flush()
		if s.Name() == "redeq" {
			batch[s.Name()] = b.enqueueRate(s, b.sz.Enqueue*2, 1, true, "eb")
		} else {
			batch[s.Name()] = sixteen[s.Name()]
		}
		s.Close()
	}
	b.add("enqueue, 1 goroutine", "jobs/s", "higher", "", one)
	b.add("enqueue, 16 goroutines", "jobs/s", "higher", "", sixteen)
	b.add("enqueue, batch of 100 (redeq AddBatch)", "jobs/s", "higher", "asynq has no batch call: its 16-goroutine figure", batch)
}

func (b *bench) memory() {
	fmt.Printf("memory per pending job, %d jobs, 100-byte body, ids like m-0000001\n", b.sz.Memory)
	per := map[string]float64{}
	for _, s := range b.systems() {
		b.flush()
		before := b.usedMemory()
		b.enqueueRate(s, b.sz.Memory, 16, s.Name() == "redeq", "m")
		time.Sleep(200 * time.Millisecond)
		per[s.Name()] = float64(b.usedMemory()-before) / float64(b.sz.Memory)
		s.Close()
	}
	b.add("memory per pending job", "bytes", "lower", "INFO used_memory delta", per)
}

// drainOnce adds n due jobs with no consumer running, then starts one
// consumer with 16 workers and times it until every job ran. It returns
// jobs per second and commands per job.
func (b *bench) drainOnce(s system, n int) (rate, perJob float64) {
	list := ids("d", n)
	for i := 0; i < n; i += 100 {
		if err := s.EnqueueBatch(b.ctx, list[i:min(i+100, n)], body100, time.Time{}); err != nil {
			fail("%s enqueue: %v", s.Name(), err)
		}
	}
	cnt := newCounter(n)
	before := b.commands()
	start := time.Now()
	stop := s.Consume(16, func(ctx context.Context, id string, body []byte, attempt int) { cnt.add(id) })
	if err := cnt.wait(5 * time.Minute); err != nil {
		fail("%s drain: %v", s.Name(), err)
	}
	elapsed := time.Since(start)
	cmds := b.commands() - before
	stop()
	return float64(n) / elapsed.Seconds(), float64(cmds) / float64(n)
}

func (b *bench) drain() {
	fmt.Printf("drain of %d due jobs, no-op handler, 16 workers, one consumer\n", b.sz.Drain)
	rate, cmds := map[string]float64{}, map[string]float64{}
	for _, s := range b.systems() {
		b.flush()
		rate[s.Name()], cmds[s.Name()] = b.drainOnce(s, b.sz.Drain)
		s.Close()
	}
	b.add("drain", "jobs/s", "higher", "", rate)
	b.add("redis commands per drained job", "cmds", "lower", "INFO commandstats, script-inner commands included", cmds)
}

// Command bench measures redeq and asynq side by side on one redis-server,
// alternating between them, and prints one table of figures and ratios.
//
// One command regenerates every published figure:
//
//	cd bench && go run . -all
//
// starts a dedicated redis-server (no persistence) on a free loopback
// port, runs every measurement, writes ../docs/bench-results.json and
// ../docs/lateness.svg, renders the generated parts of
// ../docs/performance.md and ../README.md from that JSON, and stops the
// server. Against a server of your own, measuring only some things and
// writing no file unless -json is given:
//
//	cd bench && go run . -redis 127.0.0.1:6379 [-quick] [-only drain,lateness]
//
// It uses database -db (15 by default) and flushes it between
// measurements: point it at a server with nothing you need in that
// database. Both libraries run with their defaults except the worker count
// (16 for both); the lateness measurement adds asynq with its polling
// intervals tuned to 100 ms. A measurement that fails prints why, is
// recorded as failed, and the run goes on.
package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/pool"
)

const (
	docsJSON   = "../docs/bench-results.json"
	docsSVG    = "../docs/lateness.svg"
	docsPerf   = "../docs/performance.md"
	docsReadme = "../README.md"
)

var (
	addr     = flag.String("redis", "127.0.0.1:6379", "redis-server address (ignored with -all, which starts its own)")
	db       = flag.Int("db", 15, "database the bench owns and flushes")
	quick    = flag.Bool("quick", false, "smaller sizes, for a fast look")
	all      = flag.Bool("all", false, "start a dedicated redis-server, run every measurement, write the JSON and the chart to docs/ and render the docs from them")
	jsonOut  = flag.String("json", "", "where to write the figures (-all and -render: "+docsJSON+")")
	svgOut   = flag.String("svg", "", "where to draw the lateness chart (-all and -render: "+docsSVG+")")
	only     = flag.String("only", "", "comma-separated measurements to run ("+strings.Join(measurementNames(), ",")+"); idle with -clients measures fleets")
	recovery = flag.Duration("recovery-timeout", 4*time.Minute, "how long to wait for a killed consumer's jobs")
	child    = flag.String("child", "", "internal: run as a consumer process of this system")
	which    = flag.String("systems", "redeq,asynq", "systems to measure (a ratio needs both)")
	render   = flag.Bool("render", false, "measure nothing: redraw the chart and render the docs from the JSON")
	cpuprof  = flag.String("cpuprofile", "", "write a CPU profile of the whole run (both systems) here")
	rounds   = flag.Int("rounds", 0, "interleaved rounds of the enqueue measurement (0: 5, or 3 with -quick)")
	cmdstats = flag.Bool("cmdstats", false, "print each command's calls and Redis µs per drained job over the drain (INFO commandstats, script-inner commands included)")
)

// sizes of the measurements.
type sizes struct {
	Enqueue, Memory, Drain, Lateness, Growth, Held int
	Spread                                         time.Duration
	// Rounds is how many interleaved rounds the enqueue measurement runs.
	Rounds int
	// LatenessRounds is how many rounds the lateness measurement ran (0:
	// a run from before it had rounds, which ran one).
	LatenessRounds int `json:",omitempty"`
}

func sizesFor(quick bool) sizes {
	if quick {
		return sizes{Enqueue: 5000, Memory: 20000, Drain: 10000, Lateness: 1000, Growth: 100_000, Held: 20, Spread: 5 * time.Second, Rounds: 3}
	}
	return sizes{Enqueue: 20000, Memory: 100_000, Drain: 20000, Lateness: 2000, Growth: 1_000_000, Held: 20, Spread: 5 * time.Second, Rounds: 5}
}

// row is one line of the table: the figure of each system. A row whose
// measurement failed carries the reason in Failed and no figures.
type row struct {
	Name       string   `json:"name"`
	Unit       string   `json:"unit"`
	Redeq      float64  `json:"redeq"`
	Asynq      float64  `json:"asynq"`
	AsynqTuned *float64 `json:"asynq_tuned,omitempty"` // asynq with 100 ms polling, where measured
	Better     string   `json:"better"`                // "higher" or "lower"
	Solo       bool     `json:"redeq_only,omitempty"`
	Comment    string   `json:"comment,omitempty"`
	Failed     string   `json:"failed,omitempty"`
}

// results is everything one run measured, and where and how.
type results struct {
	When         time.Time            `json:"when"` // start of the run
	Command      string               `json:"command"`
	Server       string               `json:"server"` // Redis version
	Machine      machine              `json:"machine"`
	Sizes        sizes                `json:"sizes"`
	Measurements []measured           `json:"measurements"`
	Rows         []row                `json:"rows"`
	Ceiling      []ceilingRow         `json:"ceiling,omitempty"`
	Enqueue      []enqueueRound       `json:"enqueue_rounds,omitempty"`
	EnqueueCut   []enqueueRound       `json:"enqueue_cut_rounds,omitempty"` // over clients with ContextTimeoutEnabled
	Overhead     []overheadRound      `json:"overhead_rounds,omitempty"`
	Lateness     map[string][]float64 `json:"lateness_ms"`
}

// measured is one measurement's run: how long it took, the load average
// around it, and why it failed if it did.
type measured struct {
	Name      string  `json:"name"`
	Seconds   float64 `json:"seconds"`
	LoadStart string  `json:"load_start"`
	LoadEnd   string  `json:"load_end"`
	Failed    string  `json:"failed,omitempty"`
	Leftover  string  `json:"leftover,omitempty"` // library goroutines it left running
}

// measurement is one named part of the run.
type measurement struct {
	name string
	run  func(b *bench)
}

var measurements = []measurement{
	{"enqueue", (*bench).enqueue},
	{"memory", (*bench).memory},
	{"drain", (*bench).drain},
	{"ledger", (*bench).ledger},
	{"lateness", (*bench).lateness},
	{"growth", (*bench).growth},
	{"recovery", (*bench).recovery},
	{"takeover", (*bench).takeover},
	{"idle", (*bench).idle},
	{"burst", (*bench).burst},
	{"ceiling", (*bench).ceiling},
	{"overhead", (*bench).overhead},
	{"limits", (*bench).limits},
	{"limitcost", (*bench).limitCost},
	{"scriptcost", (*bench).scriptCost},
	{"loneadd", (*bench).loneAdd},
}

func measurementNames() []string {
	var names []string
	for _, m := range measurements {
		names = append(names, m.name)
	}
	return names
}

func main() {
	flag.Parse()
	if *child != "" {
		runChild(*child, func() redis.UniversalClient {
			return redis.NewClient(&redis.Options{Addr: *addr, DB: *db, PoolSize: 64})
		})
		return
	}
	if *all || *render {
		if *jsonOut == "" {
			*jsonOut = docsJSON
		}
		if *svgOut == "" {
			*svgOut = docsSVG
		}
	}
	if *render {
		res, err := readResults(*jsonOut)
		if err != nil {
			fatal("%v", err)
		}
		printTable(res)
		if err := publish(res); err != nil {
			fatal("%v", err)
		}
		return
	}
	if *all && *only != "" {
		fatal("-all runs every measurement, so that the published figures come from one run; use -only against a server of your own (-redis)")
	}
	if *only != "" {
		for _, name := range strings.Split(*only, ",") {
			if !isMeasurement(name) {
				fatal("-only: unknown measurement %q (known: %s)", name, strings.Join(measurementNames(), ","))
			}
		}
	}
	os.Exit(runMeasurements())
}

// runMeasurements starts the server of a -all run and the CPU profile,
// measures, and stops them again; it returns the exit code.
func runMeasurements() int {
	started := time.Now().UTC()
	if *cpuprof != "" {
		f, err := os.Create(*cpuprof)
		if err != nil {
			fatal("%v", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fatal("%v", err)
		}
		defer pprof.StopCPUProfile()
	}
	if *all {
		srv, err := startServer()
		if err != nil {
			fatal("%v", err)
		}
		atFatal = srv.stop
		defer srv.stop()
		stopOnSignal(srv)
		*addr = srv.addr
		fmt.Printf("dedicated redis-server %s on %s (no persistence)\n", srv.version, srv.addr)
	}
	return measure(started)
}

// measure runs the measurements against *addr and writes the results; it
// returns the exit code (1 when a measurement failed).
func measure(started time.Time) int {
	newClient := func() redis.UniversalClient {
		return redis.NewClient(&redis.Options{Addr: *addr, DB: *db, PoolSize: 64})
	}
	ctx := context.Background()
	admin := newClient()
	defer admin.Close()
	if err := admin.Ping(ctx).Err(); err != nil {
		fatal("connect to %s: %v", *addr, err)
	}
	info, err := admin.Info(ctx, "server").Result()
	if err != nil {
		fatal("info: %v", err)
	}
	sz := sizesFor(*quick)
	if *rounds > 0 {
		sz.Rounds = *rounds
	}
	res := &results{
		When:     started,
		Command:  "cd bench && go run . " + strings.Join(os.Args[1:], " "),
		Server:   field(info, "redis_version"),
		Machine:  thisMachine(),
		Sizes:    sz,
		Lateness: map[string][]float64{},
	}
	b := &bench{ctx: ctx, admin: admin, newClient: newClient, sz: sz, res: res, cleanup: &cleanup{}}
	failed := 0
	for _, m := range measurements {
		if *only != "" && !strings.Contains(","+*only+",", ","+m.name+",") {
			continue
		}
		if !b.run(m) {
			failed++
		}
		// Written after every measurement, so a crash keeps what was measured.
		if *jsonOut != "" {
			if err := writeResults(*jsonOut, res); err != nil {
				fatal("%v", err)
			}
		}
	}
	res.Machine.LoadEnd = loadAvg()
	printTable(res)
	if *jsonOut != "" {
		if err := writeResults(*jsonOut, res); err != nil {
			fatal("%v", err)
		}
		fmt.Printf("\nfigures in %s\n", *jsonOut)
	}
	if *svgOut != "" && len(res.Lateness) > 0 {
		if err := os.WriteFile(*svgOut, []byte(latenessSVG(res.Lateness)), 0o644); err != nil {
			fatal("write %s: %v", *svgOut, err)
		}
		fmt.Printf("lateness chart in %s\n", *svgOut)
	}
	if *all {
		if err := renderDocs(res, docsPerf, docsReadme); err != nil {
			fatal("%v", err)
		}
		fmt.Printf("rendered %s and %s\n", docsPerf, docsReadme)
	}
	if failed > 0 {
		fmt.Fprintf(os.Stderr, "bench: %d measurement(s) failed; their rows say why\n", failed)
		return 1
	}
	return 0
}

func isMeasurement(name string) bool {
	for _, m := range measurements {
		if m.name == name {
			return true
		}
	}
	return false
}

// publish redraws the chart and renders the docs from res (-render).
func publish(res *results) error {
	if len(res.Lateness) > 0 {
		if err := os.WriteFile(*svgOut, []byte(latenessSVG(res.Lateness)), 0o644); err != nil {
			return fmt.Errorf("write %s: %w", *svgOut, err)
		}
	}
	return renderDocs(res, docsPerf, docsReadme)
}

func readResults(path string) (*results, error) {
	var res results
	data, err := os.ReadFile(path)
	if err == nil {
		err = json.Unmarshal(data, &res)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return &res, nil
}

func writeResults(path string, res *results) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(res); err != nil {
		return fmt.Errorf("encode results: %w", err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// failure is what fail panics with: the measurement running stops, is
// recorded as failed, and the run goes on.
type failure struct{ msg string }

func (f failure) Error() string { return f.msg }

// fail ends the current measurement with a reason.
func fail(format string, args ...any) {
	panic(failure{fmt.Sprintf(format, args...)})
}

// atFatal, when set, is called before fatal exits: it stops the server.
var atFatal func()

// fatal ends the whole run.
func fatal(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: "+format+"\n", args...)
	if atFatal != nil {
		atFatal()
	}
	os.Exit(2)
}

type bench struct {
	ctx       context.Context
	admin     redis.UniversalClient
	newClient func() redis.UniversalClient
	sz        sizes
	res       *results
	round     int
	cleanup   *cleanup
}

// run runs one measurement. If it fails, what it started is stopped, the
// reason printed and recorded in a failed row, and run reports false.
func (b *bench) run(m measurement) (ok bool) {
	rec := measured{Name: m.name, LoadStart: loadAvg()}
	start := time.Now()
	defer func() {
		r := recover()
		b.cleanup.run()
		if rec.Leftover = leftover(); rec.Leftover != "" {
			fmt.Fprintf(os.Stderr, "bench: after %s, %s\n", m.name, rec.Leftover)
		}
		rec.Seconds = time.Since(start).Seconds()
		rec.LoadEnd = loadAvg()
		ok = r == nil
		if r != nil {
			var f failure
			if err, isErr := r.(error); isErr && errors.As(err, &f) {
				rec.Failed = f.msg
			} else {
				rec.Failed = fmt.Sprintf("panic: %v\n%s", r, debug.Stack())
			}
			fmt.Fprintf(os.Stderr, "bench: %s failed: %s\n", m.name, rec.Failed)
			b.res.Rows = append(b.res.Rows, row{Name: m.name, Failed: rec.Failed})
		}
		b.res.Measurements = append(b.res.Measurements, rec)
	}()
	m.run(b)
	return true
}

// cleanup holds what a measurement started and must stop even when it
// fails midway: consumers, clients, child processes.
type cleanup struct {
	mu  sync.Mutex
	fns []func()
}

// add registers f and returns it made idempotent, to call early as well.
func (c *cleanup) add(f func()) func() {
	var once sync.Once
	g := func() { once.Do(f) }
	if c == nil {
		return g
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fns = append(c.fns, g)
	return g
}

// run calls what was registered, latest first, and forgets it.
func (c *cleanup) run() {
	c.mu.Lock()
	fns := c.fns
	c.fns = nil
	c.mu.Unlock()
	for i := len(fns) - 1; i >= 0; i-- {
		fns[i]()
	}
}

// systems returns the systems compared (with tuned, asynq tuned for low
// latency too), rotating their order from one measurement to the next, so
// none always runs on a warmer server.
func (b *bench) systems(tuned bool) []system {
	var s []system
	if strings.Contains(*which, "redeq") {
		s = append(s, newRedeq(b.newClient, b.cleanup))
	}
	if strings.Contains(*which, "asynq") {
		s = append(s, newAsynq(b.newClient, b.cleanup, false))
		if tuned {
			s = append(s, newAsynq(b.newClient, b.cleanup, true))
		}
	}
	b.round++
	if len(s) > 1 {
		k := b.round % len(s)
		s = append(s[k:], s[:k]...)
	}
	return s
}

func (b *bench) flush() {
	// Freeing a million jobs takes the server seconds on a loaded machine:
	// the flush waits on a client of its own rather than the admin's
	// read timeout.
	slow := b.admin
	if o, ok := b.admin.(*redis.Client); ok {
		opt := *o.Options()
		opt.ReadTimeout, opt.PoolSize = 2*time.Minute, 1
		c := redis.NewClient(&opt)
		defer c.Close()
		slow = c
	}
	if err := slow.FlushDB(b.ctx).Err(); err != nil {
		fail("flushdb: %v", err)
	}
	time.Sleep(100 * time.Millisecond) // let lazy frees finish before memory readings
}

// add records a row from each system's figure; "asynq-tuned", when
// present, goes beside asynq's.
func (b *bench) add(name, unit, better, comment string, figures map[string]float64) {
	r := row{Name: name, Unit: unit, Redeq: figures["redeq"], Asynq: figures["asynq"], Better: better, Comment: comment}
	tuned := ""
	if v, ok := figures[asynqTuned]; ok {
		r.AsynqTuned = &v
		tuned = fmt.Sprintf("  asynq tuned %12.1f", v)
	}
	b.res.Rows = append(b.res.Rows, r)
	fmt.Printf("  %-40s redeq %12.1f  asynq %12.1f%s %s\n", name, figures["redeq"], figures["asynq"], tuned, unit)
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

// cmdStat is one command's line of INFO commandstats.
type cmdStat struct{ calls, usec int64 }

// commandTimes is INFO commandstats by command (cmdstat_evalsha, ...).
func (b *bench) commandTimes() map[string]cmdStat {
	s, err := b.admin.Info(b.ctx, "commandstats").Result()
	if err != nil {
		fail("info: %v", err)
	}
	out := map[string]cmdStat{}
	for _, line := range strings.Split(s, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var st cmdStat
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "calls":
				st.calls, _ = strconv.ParseInt(v, 10, 64)
			case "usec":
				st.usec, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		out[strings.TrimPrefix(name, "cmdstat_")] = st
	}
	return out
}

// printCommandStats prints what each command cost over a drain of n jobs,
// busiest first: calls and µs per job. A script's usec includes its inner
// commands', which are listed under their own names too.
func printCommandStats(system string, before, after map[string]cmdStat, n int) {
	type line struct {
		name        string
		calls, usec int64
	}
	var lines []line
	for name, a := range after {
		d := line{name, a.calls - before[name].calls, a.usec - before[name].usec}
		if d.calls > 0 {
			lines = append(lines, d)
		}
	}
	sort.Slice(lines, func(i, j int) bool { return lines[i].usec > lines[j].usec })
	fmt.Printf("  commandstats of %s's drain, per job:\n", system)
	for _, l := range lines {
		fmt.Printf("    %-16s %8.3f calls %8.2f µs\n", l.name, float64(l.calls)/float64(n), float64(l.usec)/float64(n))
	}
}

// serverCPU is the CPU time the redis-server process has used, user plus
// system, in seconds (INFO used_cpu_user + used_cpu_sys). Unlike a count
// of commands it charges a batch for its size and a round trip for its
// network work; unlike the commandstats times it does not count a
// script's inner commands twice.
func (b *bench) serverCPU() float64 {
	s, err := b.admin.Info(b.ctx, "cpu").Result()
	if err != nil {
		fail("info: %v", err)
	}
	user, err1 := strconv.ParseFloat(field(s, "used_cpu_user"), 64)
	sys, err2 := strconv.ParseFloat(field(s, "used_cpu_sys"), 64)
	if err1 != nil || err2 != nil {
		fail("info cpu: no used_cpu_user / used_cpu_sys in %q", s)
	}
	return user + sys
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

// firstErr keeps the first error of several goroutines, so that the
// measurement fails on its own goroutine, where run can recover it.
type firstErr struct {
	once sync.Once
	err  error
	bad  atomic.Bool
}

func (f *firstErr) set(err error) {
	f.once.Do(func() { f.err = err; f.bad.Store(true) })
}

func (f *firstErr) failed() bool { return f.bad.Load() }

// check fails the measurement with the first error, once the goroutines
// are done.
func (f *firstErr) check() {
	if f.failed() {
		fail("%v", f.err)
	}
}

// call runs f with a ctx of its own that ends 5 s on, as a request
// handler's does: what a service passes to an enqueue call.
func call(ctx context.Context, f func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return f(ctx)
}

// enqueueRate adds n delayed jobs with g goroutines (batch: in batches of
// 100), each call with a ctx of its own (see call), and returns jobs per
// second.
func (b *bench) enqueueRate(s system, n, g int, batch bool, prefix string) float64 {
	list := ids(prefix, n)
	at := time.Now().Add(time.Hour)
	var next atomic.Int64
	var wg sync.WaitGroup
	var errs firstErr
	start := time.Now()
	for range g {
		wg.Go(func() {
			for !errs.failed() {
				if batch {
					i := int(next.Add(100)) - 100
					if i >= n {
						return
					}
					if err := call(b.ctx, func(ctx context.Context) error {
						return s.EnqueueBatch(ctx, list[i:min(i+100, n)], body100, at)
					}); err != nil {
						errs.set(fmt.Errorf("%s enqueue: %w", s.Name(), err))
					}
					continue
				}
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := call(b.ctx, func(ctx context.Context) error { return s.Enqueue(ctx, list[i], body100, at) }); err != nil {
					errs.set(fmt.Errorf("%s enqueue: %w", s.Name(), err))
				}
			}
		})
	}
	wg.Wait()
	errs.check()
	return float64(n) / time.Since(start).Seconds()
}

func (b *bench) memory() {
	fmt.Printf("memory per pending job, %d jobs, 100-byte body, ids like m-0000001\n", b.sz.Memory)
	per, fresh := map[string]float64{}, map[string]float64{}
	for _, s := range b.systems(false) {
		b.flush()
		before := b.usedMemory()
		b.enqueueRate(s, b.sz.Memory, 16, s.Name() == "redeq", "m")
		time.Sleep(200 * time.Millisecond)
		fresh[s.Name()] = float64(b.usedMemory()-before) / float64(b.sz.Memory)
		// redeq keeps each add run's reply for pool.OpTTL, for a rerun of
		// the run after a lost reply; what a pending job costs is measured
		// once those are gone (both systems wait alike).
		time.Sleep(pool.OpTTL(b.admin) + time.Second)
		per[s.Name()] = float64(b.usedMemory()-before) / float64(b.sz.Memory)
		s.Close()
	}
	b.add("memory per pending job", "bytes", "lower", "INFO used_memory delta, once the add runs' replies kept for reruns expired", per)
	b.add("memory per pending job, right after the adds", "bytes", "lower", "INFO used_memory delta, replies of the add runs (kept 30 s) included", fresh)
}

// drainCost is what draining n due jobs cost.
type drainCost struct {
	rate  float64 // jobs per second
	cmds  float64 // commands Redis executed per job, script-inner included
	cpuUS float64 // Redis CPU per job, microseconds
}

// drainOnce adds n due jobs with no consumer running, then starts one
// consumer with 16 workers and times it until every job ran.
func (b *bench) drainOnce(s system, n int) drainCost {
	list := ids("d", n)
	for i := 0; i < n; i += 100 {
		if err := s.EnqueueBatch(b.ctx, list[i:min(i+100, n)], body100, time.Time{}); err != nil {
			fail("%s enqueue: %v", s.Name(), err)
		}
	}
	cnt := newCounter(n)
	statsBefore := b.commandTimes()
	before, cpuBefore := b.commands(), b.serverCPU()
	start := time.Now()
	stop := s.Consume(16, func(ctx context.Context, id string, body []byte, attempt int) { cnt.add(id) })
	if err := cnt.wait(2 * time.Minute); err != nil {
		fail("%s drain: %v", s.Name(), err)
	}
	elapsed := time.Since(start)
	cmds, cpu := b.commands()-before, b.serverCPU()-cpuBefore
	if *cmdstats {
		printCommandStats(s.Name(), statsBefore, b.commandTimes(), n)
	}
	stop()
	return drainCost{rate: float64(n) / elapsed.Seconds(), cmds: float64(cmds) / float64(n), cpuUS: cpu / float64(n) * 1e6}
}

// drain drains b.sz.Drain due jobs with each system in turn, in
// b.sz.Rounds rounds whose order of the systems alternates (the machine
// is shared and its noise comes and goes). The rate is that of the round
// whose ratio is the median, with every round's ratio beside it; the
// costs are each system's median over the rounds.
func (b *bench) drain() {
	rounds := b.sz.Rounds
	fmt.Printf("drain of %d due jobs, no-op handler, 16 workers, one consumer, %d interleaved rounds\n", b.sz.Drain, rounds)
	var runs []map[string]drainCost
	for r := range rounds {
		got := map[string]drainCost{}
		var order []string
		for _, s := range b.systems(false) {
			b.flush()
			got[s.Name()] = b.drainOnce(s, b.sz.Drain)
			order = append(order, s.Name())
			s.Close()
		}
		runs = append(runs, got)
		fmt.Printf("  round %d (%s): redeq %.0f/s  asynq %.0f/s  Redis CPU per job %.1f/%.1f µs\n", r+1, strings.Join(order, ","),
			got["redeq"].rate, got["asynq"].rate, got["redeq"].cpuUS, got["asynq"].cpuUS)
	}
	// A round's redeq/asynq ratio of rates; with one system, its rate.
	ratio := func(m map[string]drainCost) float64 {
		if m["asynq"].rate == 0 {
			return m["redeq"].rate
		}
		return m["redeq"].rate / m["asynq"].rate
	}
	sorted := slices.Clone(runs)
	slices.SortStableFunc(sorted, func(x, y map[string]drainCost) int { return cmp.Compare(ratio(x), ratio(y)) })
	mid := sorted[(len(sorted)-1)/2]
	var rs []string
	for _, m := range sorted {
		rs = append(rs, fmt.Sprintf("%.2f", ratio(m)))
	}
	medianOf := func(f func(drainCost) float64) map[string]float64 {
		out := map[string]float64{}
		for _, name := range []string{"redeq", "asynq"} {
			var v []float64
			for _, m := range runs {
				if c, ok := m[name]; ok {
					v = append(v, f(c))
				}
			}
			if len(v) > 0 {
				out[name] = median(v)
			}
		}
		return out
	}
	rate := map[string]float64{}
	for name, c := range mid {
		rate[name] = c.rate
	}
	b.add("drain", "jobs/s", "higher", fmt.Sprintf("the round with the median ratio of %d; ratios %s", rounds, strings.Join(rs, ", ")), rate)
	b.add("redis commands per drained job", "cmds", "lower", "INFO commandstats, script-inner commands included, median of the rounds", medianOf(func(c drainCost) float64 { return c.cmds }))
	b.add("Redis CPU per drained job", "µs", "lower", "INFO used_cpu_user + used_cpu_sys delta, median of the rounds", medianOf(func(c drainCost) float64 { return c.cpuUS }))
}

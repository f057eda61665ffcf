package main

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// enqueueRound is what one round of the enqueue measurement found for one
// goroutine count: each system's rate and what a job cost.
type enqueueRound struct {
	Goroutines int      `json:"goroutines"`
	Order      []string `json:"order"` // which system ran first
	// Rate is jobs per second.
	Rate map[string]float64 `json:"rate"`
	// ScriptUS is the server's time in the enqueue script per job, µs
	// (INFO commandstats, cmdstat_evalsha usec / jobs): a run of redeq's
	// script may add many jobs.
	ScriptUS map[string]float64 `json:"script_us"`
	// JobsPerCall is the jobs per EVALSHA call (INFO commandstats,
	// cmdstat_evalsha calls): how many adds a run of the script carried.
	JobsPerCall map[string]float64 `json:"jobs_per_call,omitempty"`
	// ServerUS is the redis-server process's CPU per job, µs
	// (INFO used_cpu_user + used_cpu_sys): the script plus its round trip.
	ServerUS map[string]float64 `json:"server_us"`
	// ClientUS is the bench process's CPU per job, µs (getrusage user +
	// sys): the library's own cost, which shares the machine's cores with
	// the server.
	ClientUS map[string]float64 `json:"client_us"`
	// Idle is the share of the machine's CPU time (all cores) left idle
	// while the system ran: what neither the server nor the client used.
	Idle map[string]float64 `json:"idle"`
}

func (r enqueueRound) ratio() float64 { return r.Rate["redeq"] / r.Rate["asynq"] }

// enqueue measures single-job enqueue from 1 and from 16 goroutines in
// Rounds rounds on the same server, the systems taking turns within each
// round (and which goes first alternating from round to round), so that a
// burst of load from elsewhere on a shared machine spoils a round rather
// than one system's figure. The published figures are those of the round
// with the median ratio, the costs the median over rounds.
func (b *bench) enqueue() {
	n1, n16 := b.sz.Enqueue/4, b.sz.Enqueue
	fmt.Printf("enqueue of delayed jobs, 100-byte body, %d interleaved rounds of %d jobs from 1 goroutine and %d from 16\n",
		b.sz.Rounds, n1, n16)
	// The same two libraries over clients with ContextTimeoutEnabled,
	// with which go-redis ends a call at its ctx's deadline: redeq's lone
	// Add then runs on the caller's goroutine (asynq passes the ctx to
	// go-redis either way).
	cut := *b
	cut.newClient = func() redis.UniversalClient { return cutClient(b.newClient()) }
	systems, cutSystems := b.warmSystems(16), cut.warmSystems(1)
	defer func() {
		for _, s := range append(systems, cutSystems...) {
			s.Close()
		}
	}()
	var rounds, cutRounds []enqueueRound
	for r := range b.sz.Rounds {
		for _, g := range []int{1, 16, -1} {
			n := n1
			if g == 16 {
				n = n16
			}
			order := systems
			if g < 0 {
				order = cutSystems
			}
			if r%2 == 1 {
				order = slices.Clone(order)
				slices.Reverse(order)
			}
			round := enqueueRound{Goroutines: g, Rate: map[string]float64{}, ScriptUS: map[string]float64{},
				JobsPerCall: map[string]float64{}, ServerUS: map[string]float64{}, ClientUS: map[string]float64{},
				Idle: map[string]float64{}}
			for _, s := range order {
				round.Order = append(round.Order, s.Name())
				b.flush()
				before := b.costs()
				round.Rate[s.Name()] = b.enqueueRate(s, n, max(g, 1), false, fmt.Sprintf("e%d", g))
				c := b.costs().since(before)
				round.ScriptUS[s.Name()] = c.scriptUS / float64(n)
				if c.scriptCalls > 0 {
					round.JobsPerCall[s.Name()] = float64(n) / c.scriptCalls
				}
				round.ServerUS[s.Name()] = c.serverS / float64(n) * 1e6
				round.ClientUS[s.Name()] = c.clientS / float64(n) * 1e6
				round.Idle[s.Name()] = c.idleShare()
			}
			if g < 0 {
				round.Goroutines = 1
				fmt.Printf("  round %d,  1 goroutine, ContextTimeoutEnabled: %s\n", r+1, round)
				cutRounds = append(cutRounds, round)
				continue
			}
			fmt.Printf("  round %d, %2d goroutine(s): %s\n", r+1, g, round)
			rounds = append(rounds, round)
		}
	}
	b.res.Enqueue, b.res.EnqueueCut = rounds, cutRounds
	one, sixteen, oneCut := medianRound(rounds, 1), medianRound(rounds, 16), medianRound(cutRounds, 1)
	batch := map[string]float64{"asynq": sixteen.Rate["asynq"]}
	for _, s := range systems {
		if s.Name() == "redeq" {
			b.flush()
			batch["redeq"] = b.enqueueRate(s, b.sz.Enqueue*2, 1, true, "eb")
		}
	}
	note := func(g int) string {
		return fmt.Sprintf("the round with the median ratio of %d; ratios %s", b.sz.Rounds, ratios(rounds, g))
	}
	b.add("enqueue, 1 goroutine", "jobs/s", "higher", note(1), one.Rate)
	b.add("enqueue, 16 goroutines", "jobs/s", "higher", note(16), sixteen.Rate)
	b.add(enqueueCutRow, "jobs/s", "higher",
		fmt.Sprintf("the round with the median ratio of %d; ratios %s", b.sz.Rounds, ratios(cutRounds, 1)), oneCut.Rate)
	b.add("client CPU per enqueued job, 1 goroutine, ContextTimeoutEnabled", "µs", "lower", "the bench process's user + sys time, median of the rounds",
		medianCost(cutRounds, 1, func(r enqueueRound) map[string]float64 { return r.ClientUS }))
	b.add("enqueue, batch of 100 (redeq AddBatch)", "jobs/s", "higher", "asynq has no batch call: its 16-goroutine figure", batch)
	b.add("Redis CPU per enqueued job, 16 goroutines", "µs", "lower", "INFO used_cpu_user + used_cpu_sys delta, median of the rounds",
		medianCost(rounds, 16, func(r enqueueRound) map[string]float64 { return r.ServerUS }))
	b.add("Redis time in the enqueue script per job, 16 goroutines", "µs", "lower", "INFO commandstats, cmdstat_evalsha usec over the jobs, median of the rounds",
		medianCost(rounds, 16, func(r enqueueRound) map[string]float64 { return r.ScriptUS }))
	b.add("jobs per enqueue script call, 16 goroutines", "jobs", "higher", "INFO commandstats, the jobs over cmdstat_evalsha calls, median of the rounds",
		medianCost(rounds, 16, func(r enqueueRound) map[string]float64 { return r.JobsPerCall }))
	b.add("Redis time in the enqueue script per job, 1 goroutine", "µs", "lower", "INFO commandstats, cmdstat_evalsha usec over the jobs, median of the rounds",
		medianCost(rounds, 1, func(r enqueueRound) map[string]float64 { return r.ScriptUS }))
	b.add("client CPU per enqueued job, 16 goroutines", "µs", "lower", "the bench process's user + sys time, median of the rounds",
		medianCost(rounds, 16, func(r enqueueRound) map[string]float64 { return r.ClientUS }))
	b.add("client CPU per enqueued job, 1 goroutine", "µs", "lower", "the bench process's user + sys time, median of the rounds",
		medianCost(rounds, 1, func(r enqueueRound) map[string]float64 { return r.ClientUS }))
	b.add("machine CPU idle while enqueueing, 16 goroutines", "%", "lower", "/proc/stat, all cores, median of the rounds",
		medianCost(rounds, 16, func(r enqueueRound) map[string]float64 {
			return map[string]float64{"redeq": 100 * r.Idle["redeq"], "asynq": 100 * r.Idle["asynq"]}
		}))
}

// warmSystems returns the systems, each having loaded its scripts and
// filled its connection pool by adding 1,000 jobs from g goroutines.
func (b *bench) warmSystems(g int) []system {
	systems := b.systems(false)
	for _, s := range systems {
		b.flush()
		b.enqueueRate(s, 1000, g, false, "w")
	}
	return systems
}

// enqueueCutRow is the row of enqueue from 1 goroutine over clients
// with ContextTimeoutEnabled.
const enqueueCutRow = "enqueue, 1 goroutine, ContextTimeoutEnabled"

// cutClient returns a client with c's address, database and pool size
// and ContextTimeoutEnabled, and closes c. (A copy of c's whole options
// would carry the state go-redis keeps in them, which it then refuses to
// set up a second time.)
func cutClient(c redis.UniversalClient) redis.UniversalClient {
	o := c.(*redis.Client).Options()
	n := redis.NewClient(&redis.Options{Addr: o.Addr, DB: o.DB, PoolSize: o.PoolSize, ContextTimeoutEnabled: true})
	c.Close()
	return n
}

func (r enqueueRound) String() string {
	var b strings.Builder
	for _, name := range r.Order {
		fmt.Fprintf(&b, "%s %7.0f/s (script %5.1f µs, server %5.1f µs, client %5.1f µs per job; %4.1f jobs per script call; CPU idle %2.0f%%)  ",
			name, r.Rate[name], r.ScriptUS[name], r.ServerUS[name], r.ClientUS[name], r.JobsPerCall[name], 100*r.Idle[name])
	}
	if r.Rate["asynq"] > 0 && r.Rate["redeq"] > 0 {
		fmt.Fprintf(&b, "redeq/asynq %.2fx", r.ratio())
	}
	return b.String()
}

// medianRound returns the round of g goroutines whose ratio is the median
// (the lower middle one of an even count).
func medianRound(rounds []enqueueRound, g int) enqueueRound {
	var of []enqueueRound
	for _, r := range rounds {
		if r.Goroutines == g {
			of = append(of, r)
		}
	}
	if len(of) == 0 || of[0].Rate["asynq"] == 0 {
		// One system only: the median of its rates.
		m := medianCost(rounds, g, func(r enqueueRound) map[string]float64 { return r.Rate })
		return enqueueRound{Goroutines: g, Rate: m}
	}
	slices.SortFunc(of, func(a, b enqueueRound) int {
		switch {
		case a.ratio() < b.ratio():
			return -1
		case a.ratio() > b.ratio():
			return 1
		}
		return 0
	})
	return of[(len(of)-1)/2]
}

// medianCost is, for each system, the median over the rounds of g
// goroutines of the figure pick returns.
func medianCost(rounds []enqueueRound, g int, pick func(enqueueRound) map[string]float64) map[string]float64 {
	all := map[string][]float64{}
	for _, r := range rounds {
		if r.Goroutines != g {
			continue
		}
		for name, v := range pick(r) {
			all[name] = append(all[name], v)
		}
	}
	out := map[string]float64{}
	for name, vs := range all {
		slices.Sort(vs)
		out[name] = vs[(len(vs)-1)/2]
	}
	return out
}

// ratios lists the redeq/asynq ratios of the rounds of g goroutines.
func ratios(rounds []enqueueRound, g int) string {
	var out []string
	for _, r := range rounds {
		if r.Goroutines == g && r.Rate["asynq"] > 0 {
			out = append(out, fmt.Sprintf("%.2f", r.ratio()))
		}
	}
	return strings.Join(out, " ")
}

// costs is a reading of what the server and this process have spent.
type costs struct {
	scriptUS    float64 // time in EVALSHA, µs (cmdstat_evalsha usec)
	scriptCalls float64 // EVALSHA calls (cmdstat_evalsha calls)
	serverS     float64 // redis-server CPU, s
	clientS     float64 // this process's CPU, s
	// idle and total are the machine's idle and total CPU time, in
	// clock ticks (/proc/stat; 0 where it cannot be read).
	idle, total float64
}

func (b *bench) costs() costs {
	s, err := b.admin.Info(b.ctx, "commandstats").Result()
	if err != nil {
		fail("info: %v", err)
	}
	var c costs
	if v, ok := strings.CutPrefix(field(s, "cmdstat_evalsha"), "calls="); ok {
		calls, rest, _ := strings.Cut(v, ",usec=")
		usec, _, _ := strings.Cut(rest, ",")
		c.scriptUS, _ = strconv.ParseFloat(usec, 64)
		c.scriptCalls, _ = strconv.ParseFloat(calls, 64)
	}
	c.serverS = b.serverCPU()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		fail("getrusage: %v", err)
	}
	c.clientS = tv(ru.Utime) + tv(ru.Stime)
	c.idle, c.total = machineCPU()
	return c
}

// machineCPU reads the idle and total CPU time of all cores, in clock
// ticks, from /proc/stat; zeros where there is none.
func machineCPU() (idle, total float64) {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	line, _, _ := strings.Cut(string(data), "\n")
	fields := strings.Fields(line)
	if len(fields) < 5 || fields[0] != "cpu" {
		return 0, 0
	}
	for i, f := range fields[1:] {
		v, _ := strconv.ParseFloat(f, 64)
		total += v
		if i == 3 || i == 4 { // idle, iowait
			idle += v
		}
	}
	return idle, total
}

// idleShare is the share of the machine's CPU time left idle over c.
func (c costs) idleShare() float64 {
	if c.total <= 0 {
		return 0
	}
	return c.idle / c.total
}

func tv(t syscall.Timeval) float64 {
	return (time.Duration(t.Sec)*time.Second + time.Duration(t.Usec)*time.Microsecond).Seconds()
}

// since is the cost from before to c.
func (c costs) since(before costs) costs {
	return costs{
		scriptUS:    c.scriptUS - before.scriptUS,
		scriptCalls: c.scriptCalls - before.scriptCalls,
		serverS:     c.serverS - before.serverS,
		clientS:     c.clientS - before.clientS,
		idle:        c.idle - before.idle,
		total:       c.total - before.total,
	}
}

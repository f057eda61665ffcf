package main

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"net"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// The ledger is what each script on a job's hot path costs the server per
// job, beside the client's CPU: the same workload for both systems (jobs
// added from 16 goroutines one call each, due a moment later, then drained
// by one consumer of 16 workers), run twice per system. The first run
// times each script call with the slow log (a threshold of 0 logs every
// command with its execution time, which is what commandstats sums), and
// measures the client's CPU; the second counts each call's commands,
// script-inner included, with MONITOR (which feeds the inner commands
// while the script runs, so it would inflate the first run's times).
// Calls are told apart by their keys: redeq's add runs on a bucket's pool
// and ZSET, the mover on the ZSET and the ready list, the fetch on the
// ready list, the settle on the pool and an in-flight set; asynq's enqueue
// on a task's hash, its forwarder on the scheduled set, its dequeue on the
// pending list, its done on the active list. Anything else (heartbeats,
// leases, polls, plain commands) is "other".

// ledgerPhases are the ledger's rows, in order: each system's script for
// that step of a job's journey.
var ledgerPhases = []struct{ name, redeq, asynq string }{
	{"add", "add.lua", "enqueue"},
	{"move", "move.lua", "forward"},
	{"fetch", "fetch.lua", "dequeue"},
	{"settle", "settle.lua", "done"},
	{"other", "heartbeats, reaper, moves of idle buckets", "heartbeats, leases, polls"},
}

// phaseOf tells which ledger phase a script call on keys (its first two,
// as the server logged them) belongs to.
func phaseOf(system string, keys []string) string {
	k := func(i int) string {
		if i < len(keys) {
			return keys[i]
		}
		return ""
	}
	if system == "redeq" {
		switch {
		case strings.HasSuffix(k(0), ":pool") && strings.HasSuffix(k(1), ":bucket"):
			return "add"
		case strings.HasSuffix(k(0), ":bucket") && strings.HasSuffix(k(1), ":ready"):
			return "move"
		case strings.HasSuffix(k(0), ":ready") && strings.Contains(k(1), ":inflight:"):
			return "fetch"
		case strings.HasSuffix(k(0), ":pool") && strings.Contains(k(1), ":inflight:"):
			return "settle"
		}
		return "other"
	}
	switch {
	case strings.Contains(k(0), ":t:"):
		return "add"
	case strings.HasSuffix(k(0), ":scheduled"):
		return "move"
	case strings.HasSuffix(k(0), ":pending"):
		return "fetch"
	case strings.HasSuffix(k(0), ":active"):
		return "settle"
	}
	return "other"
}

// ledgerCost is one system's ledger: per phase, server µs and commands per
// job, and the client's CPU per job for the adds and for the drain.
type ledgerCost struct {
	us, cmds, calls    map[string]float64
	clientAdd, clientD float64
}

func (b *bench) ledger() {
	n := b.sz.Drain
	fmt.Printf("cost ledger: %d jobs added from 16 goroutines, due 1 s later, drained by 16 workers; per script, from the slow log and MONITOR\n", n)
	costs := map[string]ledgerCost{}
	for _, s := range b.systems(false) {
		c := ledgerCost{us: map[string]float64{}, cmds: map[string]float64{}, calls: map[string]float64{}}
		// Timed run.
		b.flush()
		b.slowlog(true)
		// The log is read (and emptied) after the adds and after the
		// drain: two replies of tens of MB rather than one.
		collect := func() {
			for phase, us := range b.slowlogTimes(s.Name()) {
				c.us[phase] += us / float64(n)
			}
		}
		add, drain := b.ledgerRun(s, n, "l", collect)
		collect()
		c.clientAdd, c.clientD = add/float64(n)*1e6, drain/float64(n)*1e6
		b.slowlog(false)
		// Counted run.
		b.flush()
		stop := b.monitor(s.Name())
		b.ledgerRun(s, n, "m", func() {})
		counts, calls := stop()
		for phase, k := range counts {
			c.cmds[phase] = float64(k) / float64(n)
		}
		for phase, k := range calls {
			if k > 0 {
				c.calls[phase] = float64(n) / float64(k)
			}
		}
		costs[s.Name()] = c
		s.Close()
	}
	pick := func(f func(ledgerCost) float64) map[string]float64 {
		out := map[string]float64{}
		for name, c := range costs {
			out[name] = f(c)
		}
		return out
	}
	for _, p := range ledgerPhases {
		comment := fmt.Sprintf("redeq: %s; asynq: %s", p.redeq, p.asynq)
		b.add("ledger "+p.name+": Redis µs per job", "µs", "lower", comment+"; slow log execution times", pick(func(c ledgerCost) float64 { return c.us[p.name] }))
		b.add("ledger "+p.name+": commands per job", "cmds", "lower", comment+"; MONITOR, script-inner included", pick(func(c ledgerCost) float64 { return c.cmds[p.name] }))
		if p.name != "other" {
			b.add("ledger "+p.name+": jobs per call", "jobs", "higher", comment+"; MONITOR, the jobs over the calls the client sent", pick(func(c ledgerCost) float64 { return c.calls[p.name] }))
		}
	}
	b.add("ledger: client CPU per job, adding", "µs", "lower", "the bench process's user + sys time over the adds", pick(func(c ledgerCost) float64 { return c.clientAdd }))
	b.add("ledger: client CPU per job, draining", "µs", "lower", "the bench process's user + sys time over the drain (move, fetch, handler, settle)", pick(func(c ledgerCost) float64 { return c.clientD }))
}

// ledgerRun adds n jobs from 16 goroutines, due a second after the first
// is added, then drains them with one consumer of 16 workers; it returns
// the client CPU seconds of each part. between runs after the adds, before
// the drain starts (and its time is not counted).
func (b *bench) ledgerRun(s system, n int, prefix string, between func()) (addCPU, drainCPU float64) {
	list := ids(prefix, n)
	at := time.Now().Add(time.Second)
	cpu0 := clientCPU()
	var next sync.WaitGroup
	var errs firstErr
	var i int64
	var mu sync.Mutex
	for range 16 {
		next.Go(func() {
			for !errs.failed() {
				mu.Lock()
				k := i
				i++
				mu.Unlock()
				if k >= int64(n) {
					return
				}
				if err := call(b.ctx, func(ctx context.Context) error { return s.Enqueue(ctx, list[k], body100, at) }); err != nil {
					errs.set(fmt.Errorf("%s enqueue: %w", s.Name(), err))
				}
			}
		})
	}
	next.Wait()
	errs.check()
	cpu1 := clientCPU()
	between()
	time.Sleep(time.Until(at))
	drainFrom := clientCPU() // between's own CPU is not the system's
	cnt := newCounter(n)
	stop := s.Consume(16, func(ctx context.Context, id string, body []byte, attempt int) { cnt.add(id) })
	if err := cnt.wait(2 * time.Minute); err != nil {
		fail("%s drain: %v", s.Name(), err)
	}
	cpu2 := clientCPU()
	stop()
	return cpu1 - cpu0, cpu2 - drainFrom
}

func clientCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		fail("getrusage: %v", err)
	}
	return tv(ru.Utime) + tv(ru.Stime)
}

// slowlog logs every command from now (on) or puts the server's settings
// back (off).
func (b *bench) slowlog(on bool) {
	args := [][]any{{"config", "set", "slowlog-log-slower-than", "10000"}, {"config", "set", "slowlog-max-len", "128"}, {"slowlog", "reset"}}
	if on {
		args = [][]any{{"config", "set", "slowlog-max-len", "1000000"}, {"config", "set", "slowlog-log-slower-than", "0"}, {"slowlog", "reset"}}
	}
	for _, a := range args {
		if err := b.admin.Do(b.ctx, a...).Err(); err != nil {
			fail("%v: %v", a, err)
		}
	}
}

// slowlogTimes sums the execution times, µs, of the script calls the slow
// log holds, by ledger phase, and of the other commands under "other".
func (b *bench) slowlogTimes(system string) map[string]float64 {
	out := map[string]float64{}
	// A reply of tens of MB: a client of its own that waits for it.
	o, ok := b.admin.(*redis.Client)
	if !ok {
		fail("slowlog: the admin client is no *redis.Client")
	}
	opt := *o.Options()
	opt.ReadTimeout, opt.PoolSize = 2*time.Minute, 1
	rc := redis.NewClient(&opt)
	defer rc.Close()
	v, err := rc.Do(b.ctx, "slowlog", "get", "-1").Slice()
	if err != nil {
		fail("slowlog get: %v", err)
	}
	for _, e := range v {
		f, ok := e.([]any)
		if !ok || len(f) < 5 {
			continue
		}
		us, _ := f[2].(int64)
		argv, _ := f[3].([]any)
		var words []string
		for _, a := range argv {
			s, _ := a.(string)
			words = append(words, s)
		}
		// A script's own commands are logged too, by the script's fake
		// client ("?:0"): their time is in the script call's already.
		if peer, _ := f[4].(string); len(f) > 4 && strings.HasPrefix(peer, "?:") {
			continue
		}
		if len(words) == 0 || isAdmin(words) {
			continue
		}
		out[phaseOfCommand(system, words)] += float64(us)
	}
	return out
}

// isAdmin tells the bench's own commands, which no system sent.
func isAdmin(words []string) bool {
	switch strings.ToLower(words[0]) {
	case "slowlog", "config", "info", "flushdb", "monitor", "dbsize":
		return true
	}
	return false
}

// phaseOfCommand is the ledger phase of one command: a script call by its
// keys, anything else "other".
func phaseOfCommand(system string, words []string) string {
	switch strings.ToLower(words[0]) {
	case "evalsha", "eval", "evalsha_ro", "eval_ro":
		if len(words) < 3 {
			return "other"
		}
		nk, err := strconv.Atoi(words[2])
		if err != nil {
			return "other"
		}
		return phaseOf(system, words[3:min(len(words), 3+nk)])
	}
	return "other"
}

// monitor counts, by ledger phase, every command the server runs from now
// until stop, a script's inner commands with their call; stop returns the
// counts, and the calls the clients sent (inner commands not counted).
func (b *bench) monitor(system string) (stop func() (counts, calls map[string]int64)) {
	o, ok := b.admin.(*redis.Client)
	if !ok {
		fail("monitor: the admin client is no *redis.Client")
	}
	conn, err := net.Dial("tcp", o.Options().Addr)
	if err != nil {
		fail("monitor: %v", err)
	}
	r := bufio.NewReaderSize(conn, 1<<20)
	if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
		fail("monitor: %v", err)
	}
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "+OK") {
		fail("monitor: %q %v", line, err)
	}
	counts, sent := map[string]int64{}, map[string]int64{}
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		current := "other" // the phase of the script whose inner commands follow
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			// +1700000000.123456 [15 127.0.0.1:5555] "evalsha" "sha" "2" "k1" ...
			// +1700000000.123457 [15 lua] "hget" ...
			_, rest, ok := strings.Cut(line, " [")
			if !ok {
				continue
			}
			src, rest, ok := strings.Cut(rest, "] ")
			if !ok {
				continue
			}
			words := monitorWords(rest)
			if len(words) == 0 || isAdmin(words) {
				continue
			}
			mu.Lock()
			if strings.HasSuffix(src, " lua") {
				counts[current]++
			} else {
				current = phaseOfCommand(system, words)
				counts[current]++
				sent[current]++
			}
			mu.Unlock()
		}
	}()
	return func() (map[string]int64, map[string]int64) {
		time.Sleep(100 * time.Millisecond) // the last lines of the feed
		conn.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(counts), maps.Clone(sent)
	}
}

// monitorWords splits a MONITOR line's quoted arguments (the first few are
// enough: the command and its keys).
func monitorWords(s string) []string {
	var out []string
	for len(out) < 8 {
		i := strings.IndexByte(s, '"')
		if i < 0 {
			break
		}
		s = s[i+1:]
		var w strings.Builder
		j := 0
		for ; j < len(s); j++ {
			if s[j] == '\\' && j+1 < len(s) {
				j++
				w.WriteByte(s[j])
				continue
			}
			if s[j] == '"' {
				break
			}
			w.WriteByte(s[j])
		}
		out = append(out, w.String())
		if j >= len(s) {
			break
		}
		s = s[j+1:]
	}
	return out
}

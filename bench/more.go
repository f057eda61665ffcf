package main

import (
	"bufio"
	"cmp"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// lateness: jobs spread over Spread, two consumers of 16 workers each; the
// handler records its start minus the job's due time. asynq runs twice:
// with its defaults and tuned for low latency. It runs Rounds rounds, the
// systems taking turns within each and rotating which goes first, so that
// one stall of the shared machine moves one round, not the figure: the
// percentiles and the chart are those of each system's median round by
// p99, while the earliest start and the jobs run early cover every round
// (a job run early in any round is one too many).
func (b *bench) lateness() {
	n, spread, rounds := b.sz.Lateness, b.sz.Spread, b.sz.Rounds
	fmt.Printf("lateness of %d jobs spread over %v, two consumers, %d rounds\n", n, spread, rounds)
	b.res.Sizes.LatenessRounds = rounds
	runs := map[string][][]float64{}
	for r := range rounds {
		for _, s := range b.systems(true) {
			late := b.latenessOnce(s, n, spread, fmt.Sprintf("l%d", r))
			runs[s.Name()] = append(runs[s.Name()], late)
			fmt.Printf("  round %d %-12s p50 %8.1f  p99 %8.1f  max %8.1f ms\n", r+1, s.Name(), pct(late, 50), pct(late, 99), late[len(late)-1])
		}
	}
	stat := map[string]map[string]float64{}
	p99s := map[string]string{}
	for name, rs := range runs {
		mid := medianRun(rs)
		b.res.Lateness[name] = mid
		st := map[string]float64{"min": math.Inf(1), "p50": pct(mid, 50), "p99": pct(mid, 99), "max": mid[len(mid)-1]}
		var list []string
		for _, late := range rs {
			st["min"] = min(st["min"], late[0])
			for _, l := range late {
				if l < 0 {
					st["early"]++
				}
			}
			list = append(list, fmt.Sprintf("%.1f", pct(late, 99)))
		}
		stat[name] = st
		p99s[name] = strings.Join(list, ", ")
	}
	pick := func(k string) map[string]float64 {
		m := map[string]float64{}
		for name, st := range stat {
			m[name] = st[k]
		}
		return m
	}
	b.add("lateness min", "ms", "lower", "every round", pick("min"))
	b.add("lateness p50", "ms", "lower", "the median round by p99", pick("p50"))
	b.add("lateness p99", "ms", "lower", "the median round; the rounds' p99, redeq: "+p99s["redeq"]+"; asynq: "+p99s["asynq"]+"; asynq tuned: "+p99s[asynqTuned], pick("p99"))
	b.add("lateness max", "ms", "lower", "the median round by p99", pick("max"))
	b.add("jobs run early", "jobs", "lower", "every round", pick("early"))
}

// medianRun is the run of rs whose p99 is the median of theirs.
func medianRun(rs [][]float64) []float64 {
	sorted := slices.Clone(rs)
	slices.SortFunc(sorted, func(a, b []float64) int { return cmp.Compare(pct(a, 99), pct(b, 99)) })
	return sorted[len(sorted)/2]
}

// latenessOnce enqueues n jobs of s due over spread from a second on, ids
// prefixed with prefix, and drains them with two consumers of 16 workers:
// the handlers' lateness, ms, sorted.
func (b *bench) latenessOnce(s system, n int, spread time.Duration, prefix string) []float64 {
	b.flush()
	var mu sync.Mutex
	var late []float64
	cnt := newCounter(n)
	handle := func(ctx context.Context, id string, body []byte, attempt int) {
		now := time.Now()
		due, _ := strconv.ParseInt(string(body), 10, 64)
		mu.Lock()
		late = append(late, float64(now.UnixNano()-due)/1e6)
		mu.Unlock()
		cnt.add(id)
	}
	stop1 := s.Consume(16, handle)
	stop2 := s.Consume(16, handle)
	base := time.Now().Add(time.Second)
	list := ids(prefix, n)
	var wg sync.WaitGroup
	var errs firstErr
	for g := range 4 {
		wg.Go(func() {
			for i := g; i < n && !errs.failed(); i += 4 {
				due := base.Add(time.Duration(i) * spread / time.Duration(n))
				if err := s.Enqueue(b.ctx, list[i], []byte(strconv.FormatInt(due.UnixNano(), 10)), due); err != nil {
					errs.set(fmt.Errorf("%s enqueue: %w", s.Name(), err))
				}
			}
		})
	}
	wg.Wait()
	errs.check()
	if err := cnt.wait(spread + time.Minute); err != nil {
		fail("%s lateness: %v", s.Name(), err)
	}
	stop1()
	stop2()
	s.Close()
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(late)
	return late
}

func pct(sorted []float64, p float64) float64 {
	i := int(math.Ceil(p/100*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

// growth: enqueue and drain throughput with Growth jobs pending (due in a
// day), each as a ratio to the same measurement on an empty database.
func (b *bench) growth() {
	fmt.Printf("cost growth: enqueue and drain with %d jobs pending vs none\n", b.sz.Growth)
	addRatio, drainRatio, addFull, drainFull := map[string]float64{}, map[string]float64{}, map[string]float64{}, map[string]float64{}
	for _, s := range b.systems(false) {
		b.flush()
		emptyAdd := b.enqueueRate(s, b.sz.Enqueue, 16, false, "g0")
		b.flush()
		emptyDrain := b.drainOnce(s, b.sz.Drain).rate
		b.flush()
		far := time.Now().Add(24 * time.Hour)
		list := ids("p", b.sz.Growth)
		var wg sync.WaitGroup
		var next int64
		var mu sync.Mutex
		var errs firstErr
		for range 16 {
			wg.Go(func() {
				for !errs.failed() {
					mu.Lock()
					i := int(next)
					next += 100
					mu.Unlock()
					if i >= len(list) {
						return
					}
					if err := s.EnqueueBatch(b.ctx, list[i:min(i+100, len(list))], body100, far); err != nil {
						errs.set(fmt.Errorf("%s prefill: %w", s.Name(), err))
					}
				}
			})
		}
		wg.Wait()
		errs.check()
		fullAdd := b.enqueueRate(s, b.sz.Enqueue, 16, false, "g1")
		fullDrain := b.drainOnce(s, b.sz.Drain).rate
		addFull[s.Name()], drainFull[s.Name()] = fullAdd, fullDrain
		addRatio[s.Name()], drainRatio[s.Name()] = fullAdd/emptyAdd, fullDrain/emptyDrain
		s.Close()
	}
	pending := fmt.Sprintf("%dk pending", b.sz.Growth/1000)
	b.add("enqueue, 16 goroutines, "+pending, "jobs/s", "higher", "", addFull)
	b.add("enqueue "+pending+" / none", "ratio", "higher", "1.0 = no slowdown", addRatio)
	b.add("drain, "+pending, "jobs/s", "higher", "", drainFull)
	b.add("drain "+pending+" / none", "ratio", "higher", "1.0 = no slowdown", drainRatio)
}

// recovery: a consumer process holding jobs is killed with SIGKILL; time
// until another consumer has run every job, and the retries that cost.
func (b *bench) recovery() {
	n := b.sz.Held
	fmt.Printf("recovery after kill -9 of a consumer holding jobs (%d jobs)\n", n)
	took, spent := map[string]float64{}, map[string]float64{}
	comment := "until every held job ran again"
	for _, s := range b.systems(false) {
		b.flush()
		list := ids("r", n)
		if err := s.EnqueueBatch(b.ctx, list, body100, time.Time{}); err != nil {
			fail("%s enqueue: %v", s.Name(), err)
		}
		sc, kill := b.startChild(s.Name())
		held := map[string]bool{}
		for len(held) < 8 && sc.Scan() {
			if id, ok := strings.CutPrefix(sc.Text(), "holding "); ok {
				held[id] = true
			}
		}
		if len(held) < 8 {
			fail("%s child consumer exited holding %d jobs, not 8", s.Name(), len(held))
		}
		time.Sleep(200 * time.Millisecond)
		kill()
		killed := time.Now()
		cnt := newCounter(n)
		var mu sync.Mutex
		maxAttempt := 0
		stop := s.Consume(16, func(ctx context.Context, id string, body []byte, attempt int) {
			mu.Lock()
			maxAttempt = max(maxAttempt, attempt)
			mu.Unlock()
			cnt.add(id)
		})
		if err := cnt.wait(*recovery); err != nil {
			fmt.Printf("  %s: %v\n", s.Name(), err)
			took[s.Name()] = recovery.Seconds()
			comment += fmt.Sprintf("; %s had not run every job after %v, the figure is that bound", s.Name(), *recovery)
		} else {
			took[s.Name()] = time.Since(killed).Seconds()
		}
		stop()
		s.Close()
		spent[s.Name()] = float64(maxAttempt)
	}
	b.add("recovery after kill -9", "s", "lower", comment, took)
	b.add("retries spent by recovered jobs", "retries", "lower", "", spent)
}

// runChild is the consumer process that recovery kills: it holds every job
// it receives and prints "holding <id>".
// startChild starts this program as the -child process name against the
// bench's server, and returns its output and a kill that sends it SIGKILL
// and waits for it (also run by the cleanup when the measurement fails).
func (b *bench) startChild(name string) (*bufio.Scanner, func()) {
	cmd := exec.Command(os.Args[0], "-child", name, "-redis", *addr, "-db", strconv.Itoa(*db))
	out, err := cmd.StdoutPipe()
	if err != nil {
		fail("child stdout: %v", err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		fail("start child: %v", err)
	}
	kill := b.cleanup.add(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	})
	return bufio.NewScanner(out), kill
}

func runChild(name string, newClient func() redis.UniversalClient) {
	if name == takeoverChild {
		runMoverChild(newClient())
	}
	var s system
	if name == "redeq" {
		s = newRedeq(newClient, nil)
	} else {
		s = newAsynq(newClient, nil, name == asynqTuned)
	}
	s.Consume(16, func(ctx context.Context, id string, body []byte, attempt int) {
		fmt.Println("holding", id)
		select {}
	})
	select {}
}

func printTable(res *results) {
	fmt.Printf("\n%-46s %14s %14s %10s  %s\n", "measurement", "redeq", "asynq", "redeq/asynq", "unit")
	for _, r := range res.Rows {
		switch {
		case r.Failed != "":
			fmt.Printf("%-46s FAILED: %s\n", r.Name, firstLine(r.Failed))
		case r.Solo:
			fmt.Printf("%-46s %14.2f %14s %10s   %s (%s)\n", r.Name, r.Redeq, "-", "-", r.Unit, r.Comment)
		default:
			ratio := r.Redeq / r.Asynq
			if r.Asynq == 0 && r.Redeq == 0 {
				ratio = 1
			}
			fmt.Printf("%-46s %14.2f %14.2f %10.2fx  %s (%s is better)\n", r.Name, r.Redeq, r.Asynq, ratio, r.Unit, r.Better)
			if r.AsynqTuned != nil {
				fmt.Printf("%-46s %14s %14.2f %10s  %s\n", "  asynq tuned (100 ms checks)", "", *r.AsynqTuned, "", r.Unit)
			}
		}
	}
	for _, c := range res.Ceiling {
		fmt.Printf("%-46s %14.0f %14.0f (pipelines of 16)  cmds/s\n", "ceiling: "+c.Command, c.Plain, c.Pipelined)
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

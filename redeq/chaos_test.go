package redeq_test

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// chaosEnv selects the chaos test's size: "ci" (reduced, run by .ci/run)
// or "full" (20,000 jobs, for manual runs).
const chaosEnv = "REDEQ_CHAOS"

type chaosSize struct {
	jobs      int
	maxDelay  time.Duration
	killEvery time.Duration
	consumers int
}

// chaosRetries is the consumers' Retry: a job runs at most chaosRetries+1
// times before it goes dead.
const chaosRetries = 3

// chaosConfig is the consumers' settings: short enough to recover quickly
// from kills, long enough that a consumer slowed by the race detector is
// not taken for dead.
func chaosConfig(c *config.Config) {
	c.Concurrency = 4 // fetch, settle and recovery across buckets (and slots)
	c.HeartbeatInterval = 200 * time.Millisecond
	c.ConsumerTimeout = 3 * time.Second
	c.Retry = chaosRetries
	c.RetryIntervals = []time.Duration{50 * time.Millisecond, 100 * time.Millisecond}
	c.Workers = 8
	// A job may be in flight on many killed consumers in a row; the dead
	// set must hold only the jobs whose handler failed (poison jobs have
	// their own test).
	c.MaxRecoveries = 1000
}

// chaosLimitedEnv, set in a chaos child, makes it listen under the limits
// of chaosLimited.
const chaosLimitedEnv = "REDEQ_CHAOS_LIMITED"

// chaosMaxRunning is the most jobs of one tenant running at once in the
// limited chaos run (chaosLimited), over chaosTenants tenants.
const chaosMaxRunning, chaosTenants = 2, 3

// chaosLimited sets the limits of the limited chaos run, through the
// config's listeners section: at most chaosMaxRunning jobs running at once
// per value of the header "tenant", on a topic of one bucket (as limits
// need).
func chaosLimited(c *config.Config) {
	c.Concurrency = 1
	c.Listeners = []config.Listener{{Topic: "chaos", MaxRunning: chaosMaxRunning, LimitKey: "tenant"}}
}

// chaosTenant is the tenant of job i in the limited chaos run.
func chaosTenant(i int) string { return "t" + strconv.Itoa(i%chaosTenants) }

// chaosID names job i; the prefix keeps ids apart from the other values a
// script receives, which the settle probe relies on.
func chaosID(i int) string { return "job-" + strconv.Itoa(i) }

// chaosFails decides, the same way in every process, whether the delivery
// of id at attempt fails: one in ten at random, and every attempt of a
// doomed job.
func chaosFails(id string, attempt int) bool {
	return chaosDoomed(id) || hash32(id+"/"+strconv.Itoa(attempt))%10 == 0
}

// chaosDoomed marks one job in forty as failing on every attempt.
func chaosDoomed(id string) bool { return hash32(id)%40 == 0 }

func hash32(s string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return h.Sum32()
}

// chaosMustDie reports whether id fails on every attempt it gets, and so
// must end in the dead set.
func chaosMustDie(id string) bool {
	for a := 0; a <= chaosRetries; a++ {
		if !chaosFails(id, a) {
			return false
		}
	}
	return true
}

// runChaosChild consumes topic "chaos". For every handler call it prints
//
//	start <id> <attempt> <recoveries> <unix ns>   when the call begins
//	done <id> <unix ns> ok|fail                   just before it returns
//	settled <id> <unix ns>                        once a script that applies
//	                                              outcomes has run for it
//
// The last line comes from a hook on the client: after a script over the
// pool succeeds, each id in its arguments whose handler returned has had
// its outcome applied (or dropped, when the job was no longer this
// consumer's). Before that line, a SIGKILL may swallow the outcome.
func runChaosChild() {
	probe := &settleProbe{returned: map[string]int{}}
	c := childClient(func(c *config.Config) {
		chaosConfig(c)
		if os.Getenv(chaosLimitedEnv) != "" {
			chaosLimited(c)
		}
	}, probe)
	l := newListener("chaos", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		fmt.Printf("start %s %d %d %d\n", job.ID, job.Attempt, job.Recoveries, time.Now().UnixNano())
		time.Sleep(time.Duration(rand.IntN(40)) * time.Millisecond) // work, so kills catch jobs in flight
		if chaosFails(job.ID, job.Attempt) {
			probe.returning(job.ID, "fail")
			return errors.New("chaos")
		}
		ch.Ack()
		probe.returning(job.ID, "ok")
		return nil
	})
	if err := c.Register(l); err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	// Redis may be restarting right now: keep trying, as a service would.
	for c.Start(context.Background()) != nil {
		time.Sleep(200 * time.Millisecond)
	}
	select {}
}

// settleProbe prints "settled" lines for the chaos child.
type settleProbe struct {
	mu       sync.Mutex
	returned map[string]int // handler returned, outcome not yet seen applied
}

func (p *settleProbe) returning(id, result string) {
	p.mu.Lock()
	p.returned[id]++
	fmt.Printf("done %s %d %s\n", id, time.Now().UnixNano(), result)
	p.mu.Unlock()
}

func (p *settleProbe) DialHook(next redis.DialHook) redis.DialHook { return next }

func (p *settleProbe) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err != nil {
			return err
		}
		args := cmd.Args()
		if len(args) < 3 || (cmd.Name() != "evalsha" && cmd.Name() != "eval") {
			return nil
		}
		nkeys, _ := strconv.Atoi(fmt.Sprint(args[2]))
		if len(args) < 3+nkeys {
			return nil
		}
		overPool := false
		for _, k := range args[3 : 3+nkeys] {
			overPool = overPool || strings.HasSuffix(fmt.Sprint(k), ":pool")
		}
		if !overPool {
			return nil
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, a := range args[3+nkeys:] {
			id, ok := a.(string)
			if !ok || p.returned[id] == 0 {
				continue
			}
			if p.returned[id]--; p.returned[id] == 0 {
				delete(p.returned, id)
			}
			fmt.Printf("settled %s %d\n", id, time.Now().UnixNano())
		}
		return nil
	}
}

func (p *settleProbe) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// chaosRun is one handler call, as the child process proc reported it.
type chaosRun struct {
	proc       int
	attempt    int
	recoveries int
	start      time.Time
	done       time.Time // zero: the handler never returned
	settled    time.Time // zero: its outcome was never seen applied
	ok         bool
}

func (r chaosRun) String() string {
	at := func(t time.Time) string {
		if t.IsZero() {
			return "-"
		}
		return t.Format("15:04:05.000")
	}
	result := "fail"
	if r.ok {
		result = "ok"
	}
	return fmt.Sprintf("{proc %d attempt %d rec %d start %s done %s %s settled %s}",
		r.proc, r.attempt, r.recoveries, at(r.start), at(r.done), result, at(r.settled))
}

// chaosScenario is what happens to Redis during a run.
type chaosScenario struct {
	// srv is a server of the test's own, nil on the shared cluster.
	srv *testutil.Server
	// restart kills the server with SIGKILL once and starts it again.
	restart bool
	// outage pauses every client of the server (CLIENT PAUSE ALL) once,
	// for this long.
	outage time.Duration
	// limited runs the consumers under chaosLimited, the jobs spread over
	// chaosTenants tenants: no tenant may ever run more than
	// chaosMaxRunning jobs at once (measured by the handlers' start and
	// return, or the kill of their process).
	limited bool
}

// TestChaos: jobs with delays over consumer processes that are killed with
// SIGKILL every few seconds, handlers that fail deterministically (a hash
// of id and attempt decides), deletes before due time, and on a server of
// the test's own a Redis restart (AOF, appendfsync always) or an outage
// longer than ConsumerTimeout. Nothing may be lost, no deleted job may run,
// exactly the jobs that failed every attempt are dead, and every second run
// of a job is explained by the SIGKILL of the process that ran it before,
// after that run started and before its outcome was applied.
func TestChaos(t *testing.T) {
	t.Parallel()
	var size chaosSize
	switch os.Getenv(chaosEnv) {
	case "ci":
		size = chaosSize{jobs: 3000, maxDelay: 3 * time.Second, killEvery: 700 * time.Millisecond, consumers: 3}
	case "full":
		size = chaosSize{jobs: 20000, maxDelay: 5 * time.Second, killEvery: 2 * time.Second, consumers: 3}
	default:
		t.Skip("set REDEQ_CHAOS=ci (reduced; .ci/run does) or REDEQ_CHAOS=full")
	}
	t.Run("redis-restart", func(t *testing.T) {
		srv := testutil.StartServer(t, "--appendonly", "yes", "--appendfsync", "always")
		be := testutil.Backend{Name: "redis", Addrs: []string{srv.Addr}}
		runChaos(t, size, be, srv.Client(nil), chaosScenario{srv: srv, restart: true})
	})
	t.Run("redis-outage", func(t *testing.T) {
		srv := testutil.StartServer(t, "--appendonly", "yes", "--appendfsync", "always")
		be := testutil.Backend{Name: "redis", Addrs: []string{srv.Addr}}
		var cfg config.Config
		chaosConfig(&cfg)
		runChaos(t, size, be, srv.Client(nil), chaosScenario{srv: srv, outage: cfg.ConsumerTimeout + 2*time.Second})
	})
	t.Run("cluster", func(t *testing.T) {
		// CI's cluster is shared: kills, failures and deletes, no restart.
		be := testutil.Cluster(t)
		runChaos(t, size, be, be.New(t), chaosScenario{})
	})
	t.Run("cluster-limited", func(t *testing.T) {
		// The same under a limit per key value: half the jobs, for the
		// limit slows the run down.
		be := testutil.Cluster(t)
		half := size
		half.jobs /= 2
		runChaos(t, half, be, be.New(t), chaosScenario{limited: true})
	})
}

// chaosPeak is the most runs of rs that ran at once: a run counts from its
// start until its handler returned, or, when it never did, until its
// process was killed (killedAt), or for good.
func chaosPeak(rs []*chaosRun, killedAt map[int]time.Time) (int, time.Time) {
	type event struct {
		at    time.Time
		delta int
	}
	var evs []event
	for _, r := range rs {
		evs = append(evs, event{r.start, 1})
		switch end, killed := killedAt[r.proc]; {
		case !r.done.IsZero():
			evs = append(evs, event{r.done, -1})
		case killed:
			evs = append(evs, event{end, -1})
		}
	}
	// A slot frees after its handler returned, and the next run starts
	// after that: at equal times, the end comes first.
	slices.SortFunc(evs, func(a, b event) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta
	})
	n, peak, at := 0, 0, time.Time{}
	for _, e := range evs {
		if n += e.delta; n > peak {
			peak, at = n, e.at
		}
	}
	return peak, at
}

// runChaos runs the chaos scenario on be.
func runChaos(t *testing.T, size chaosSize, be testutil.Backend, rdb redis.UniversalClient, sc chaosScenario) {
	cfg := testutil.Config(t)
	chaosConfig(&cfg)
	var childEnv []string
	if sc.limited {
		chaosLimited(&cfg)
		childEnv = append(childEnv, chaosLimitedEnv+"=1")
	}
	ctx := context.Background()
	producer, err := redeq.New(rdb, cfg)
	require.NoError(t, err)
	require.NoError(t, producer.Start(ctx)) // moves and reaps; consumes nothing
	t.Cleanup(func() { _ = producer.Shutdown(context.Background()) })

	var mu sync.Mutex
	runs := map[string][]*chaosRun{}
	killedAt := map[int]time.Time{} // process -> when it was dead
	procs := 0
	parse := func(proc int, line string) {
		f := strings.Fields(line)
		ns := func(s string) time.Time { n, _ := strconv.ParseInt(s, 10, 64); return time.Unix(0, n) }
		// last returns the latest run of id on proc that matches.
		last := func(id string, match func(*chaosRun) bool) *chaosRun {
			rs := runs[id]
			for i := len(rs) - 1; i >= 0; i-- {
				if rs[i].proc == proc && match(rs[i]) {
					return rs[i]
				}
			}
			return nil
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case len(f) == 5 && f[0] == "start":
			attempt, _ := strconv.Atoi(f[2])
			rec, _ := strconv.Atoi(f[3])
			runs[f[1]] = append(runs[f[1]], &chaosRun{proc: proc, attempt: attempt, recoveries: rec, start: ns(f[4])})
		case len(f) == 4 && f[0] == "done":
			if r := last(f[1], func(r *chaosRun) bool { return r.done.IsZero() }); r != nil {
				r.done, r.ok = ns(f[2]), f[3] == "ok"
				return
			}
			t.Errorf("process %d: %q without a start", proc, line)
		case len(f) == 3 && f[0] == "settled":
			if r := last(f[1], func(r *chaosRun) bool { return !r.done.IsZero() && r.settled.IsZero() }); r != nil {
				r.settled = ns(f[2])
				return
			}
			t.Errorf("process %d: %q without a returned handler", proc, line)
		default:
			t.Logf("process %d: %s", proc, line)
		}
	}
	start := func() (*child, int) {
		mu.Lock()
		procs++
		proc := procs
		mu.Unlock()
		return startChildKind(t, "chaos", be, cfg.Prefix, "chaos", func(line string) { parse(proc, line) }, childEnv...), proc
	}
	children := make([]*child, size.consumers)
	procOf := make([]int, size.consumers)
	for i := range children {
		children[i], procOf[i] = start()
	}

	// Add the jobs, and delete 5% of them right away, well before due.
	deleted := map[string]time.Time{}
	began := time.Now()
	for i := 0; i < size.jobs; i += 100 {
		batch := make([]*redeq.Job, 0, 100)
		for j := i; j < min(i+100, size.jobs); j++ {
			job := &redeq.Job{Topic: "chaos", ID: chaosID(j), Delay: time.Duration(rand.Int64N(int64(size.maxDelay)))}
			if sc.limited {
				job.Headers = map[string]string{"tenant": chaosTenant(j)}
			}
			batch = append(batch, job)
		}
		require.NoError(t, producer.AddBatch(ctx, batch))
		for _, j := range batch {
			if rand.IntN(20) == 0 && j.Delay > 500*time.Millisecond {
				_, err := producer.Delete(ctx, "chaos", j.ID)
				require.NoError(t, err)
				deleted[j.ID] = time.Now()
			}
		}
	}

	// Kill a consumer every killEvery while jobs fall due; once, halfway
	// through, restart Redis or pause it.
	kills := 0
	var faultAt, faultEnd time.Time // when Redis stopped answering, and when it was back
	for time.Since(began) < size.maxDelay+2*time.Second+sc.outage {
		time.Sleep(size.killEvery)
		k := rand.IntN(len(children))
		at := children[k].kill()
		mu.Lock()
		killedAt[procOf[k]] = at
		mu.Unlock()
		kills++
		children[k], procOf[k] = start()
		if sc.srv == nil || !faultAt.IsZero() || time.Since(began) < size.maxDelay/2 {
			continue
		}
		faultAt = time.Now()
		if sc.restart {
			sc.srv.Kill()
			time.Sleep(500 * time.Millisecond)
			sc.srv.Start()
			faultEnd = time.Now()
			t.Logf("redis killed and restarted at %s", faultAt.Format("15:04:05.000"))
		}
		if sc.outage > 0 {
			admin := sc.srv.Client(nil)
			require.NoError(t, admin.Do(ctx, "CLIENT", "PAUSE", sc.outage.Milliseconds(), "ALL").Err())
			faultEnd = faultAt.Add(sc.outage)
			t.Logf("redis paused for %v (ConsumerTimeout %v) at %s", sc.outage, cfg.ConsumerTimeout, faultAt.Format("15:04:05.000"))
		}
	}

	// Wait until every job that was not deleted ran to success or is dead.
	var st redeq.Stats
	testutil.EventuallyEvery(t, 3*time.Minute, 100*time.Millisecond, "jobs still pending", func() bool {
		st, err = producer.Stats(ctx, "chaos")
		return err == nil && st.Pool == st.Dead
	})
	dead, err := producer.DeadJobs(ctx, "chaos", 10_000)
	require.NoError(t, err)
	gotDead := map[string]*redeq.Job{}
	for _, j := range dead {
		gotDead[j.ID] = j
	}
	// The surviving consumers' last outcomes are applied; wait until their
	// "settled" lines are read too, or the probe is broken.
	alive := map[int]bool{}
	for _, p := range procOf {
		alive[p] = true
	}
	var unseen []string
	testutil.EventuallyEvery(t, 30*time.Second, 50*time.Millisecond, "runs of live consumers whose outcome the settle probe never saw applied "+
		"(does the outcome script still take the pool key and the ids?)", func() bool {
		mu.Lock()
		defer mu.Unlock()
		unseen = unseen[:0]
		for id, rs := range runs {
			for _, r := range rs {
				if alive[r.proc] && r.settled.IsZero() {
					unseen = append(unseen, fmt.Sprintf("%s %v", id, r))
				}
			}
		}
		return len(unseen) == 0
	})
	for _, c := range children {
		c.kill() // every line read: the records are complete
	}

	mu.Lock()
	defer mu.Unlock()
	// applyBy is when an outcome whose handler returned at done has been
	// applied at the latest, unless its process died: a consumer that
	// cannot reach Redis for ConsumerTimeout is taken for dead anyway, and
	// a Redis fault defers the deadline to its end.
	applyBy := func(done time.Time) time.Time {
		by := done.Add(cfg.ConsumerTimeout)
		if !faultAt.IsZero() && done.Before(faultEnd) {
			by = latest(by, faultEnd.Add(cfg.ConsumerTimeout))
		}
		return by
	}
	lost, ranAfterDelete, recovered, duplicates, explained, unexplained := 0, 0, 0, 0, 0, 0
	var maxSettle, maxKillGap time.Duration
	for _, rs := range runs {
		for _, r := range rs {
			if !r.settled.IsZero() {
				maxSettle = max(maxSettle, r.settled.Sub(r.done))
			}
		}
	}
	var wantDead []string
	for i := range size.jobs {
		id := chaosID(i)
		rs := runs[id]
		slices.SortFunc(rs, func(a, b *chaosRun) int { return a.start.Compare(b.start) })
		if at, ok := deleted[id]; ok {
			for _, r := range rs {
				if r.start.After(at) {
					ranAfterDelete++
					t.Logf("deleted job %s ran: %v", id, r)
				}
			}
			continue
		}
		if chaosMustDie(id) {
			wantDead = append(wantDead, id)
		}
		ranOK, wasRecovered := false, false
		for _, r := range rs {
			ranOK = ranOK || r.ok
			wasRecovered = wasRecovered || r.recoveries > 0
		}
		if wasRecovered {
			recovered++
		}
		if !ranOK && gotDead[id] == nil {
			lost++
			t.Logf("lost job %s: runs %v", id, rs)
		}
		// Every run after a successful one is a duplicate. It is explained
		// only when the process of that successful run was killed after
		// the run started and before its outcome was applied (no settled
		// line, and the kill came before applyBy), and the duplicate
		// started after the kill. A Redis restart explains nothing: with
		// appendfsync always, an applied outcome survives it.
		var prev *chaosRun
		for _, r := range rs {
			if prev != nil {
				duplicates++
				kill := killedAt[prev.proc]
				if !kill.IsZero() && prev.start.Before(kill) && prev.settled.IsZero() && r.start.After(kill) &&
					(prev.done.IsZero() || !kill.After(applyBy(prev.done))) {
					explained++
					if !prev.done.IsZero() {
						maxKillGap = max(maxKillGap, kill.Sub(prev.done))
					}
					t.Logf("duplicate of %s explained: process %d was killed at %s, after the run %v started and before its outcome was applied; ran again %v",
						id, prev.proc, kill.Format("15:04:05.000"), prev, r)
				} else {
					unexplained++
					t.Logf("UNEXPLAINED duplicate of %s: after %v ran again %v (process %d killed at %v); all runs %v",
						id, prev, r, prev.proc, kill.Format("15:04:05.000"), rs)
				}
			}
			if r.ok {
				prev = r
			}
		}
	}
	for id, j := range gotDead {
		if !slices.Contains(wantDead, id) {
			t.Errorf("job %s is dead but not every attempt failed: reason %q, runs %v", id, j.Reason, runs[id])
		}
	}
	for _, id := range wantDead {
		j, err := producer.Get(ctx, "chaos", id)
		if !assertNoErr(t, err, "dead job %s", id) {
			continue
		}
		want := fmt.Sprintf("failed %d times; last: chaos", chaosRetries+1)
		if j.State != redeq.StateDead || j.Reason != want {
			t.Errorf("job %s failed every attempt: want dead with reason %q, got %s %q; runs %v", id, want, j.State, j.Reason, runs[id])
		}
	}
	fault := "no Redis fault"
	switch {
	case sc.restart:
		fault = "1 Redis SIGKILL and restart"
	case sc.outage > 0:
		fault = fmt.Sprintf("1 Redis pause of %v (ConsumerTimeout %v)", sc.outage, cfg.ConsumerTimeout)
	}
	t.Logf("chaos on %s: %d jobs (%d deleted, %d to run), %d consumer processes, %d SIGKILLs, %s; "+
		"jobs recovered from silent consumers %d; lost %d; dead %d (expected %d); deleted-then-ran %d; "+
		"duplicates %d (explained by a kill %d, unexplained %d)",
		be.Name, size.jobs, len(deleted), size.jobs-len(deleted), procs, kills, fault,
		recovered, lost, len(gotDead), len(wantDead), ranAfterDelete, duplicates, explained, unexplained)
	t.Logf("longest handler-return-to-settled %v; longest handler-return-to-kill of an explained duplicate %v", maxSettle, maxKillGap)
	if sc.limited {
		byTenant := map[string][]*chaosRun{}
		for i := range size.jobs {
			byTenant[chaosTenant(i)] = append(byTenant[chaosTenant(i)], runs[chaosID(i)]...)
		}
		for tenant, rs := range byTenant {
			peak, at := chaosPeak(rs, killedAt)
			t.Logf("tenant %s: %d runs, at most %d at once (at %s; the limit is %d)", tenant, len(rs), peak, at.Format("15:04:05.000"), chaosMaxRunning)
			require.LessOrEqual(t, peak, chaosMaxRunning, "tenant %s's jobs running at once", tenant)
			require.Equal(t, chaosMaxRunning, peak, "tenant %s reaches its limit", tenant)
		}
		testutil.Eventually(t, 10*time.Second, "every slot is free", func() bool {
			st, err := producer.Stats(ctx, "chaos")
			return err == nil && st.Running == 0 && st.Waiting == 0
		})
	}
	require.Zero(t, lost, "lost jobs")
	require.Zero(t, ranAfterDelete, "deleted jobs that ran")
	require.Len(t, gotDead, len(wantDead), "dead jobs")
	require.Zero(t, unexplained, "unexplained duplicates")
}

// assertNoErr reports err as a test error and returns whether there was none.
func assertNoErr(t *testing.T, err error, format string, args ...any) bool {
	t.Helper()
	if err != nil {
		t.Errorf(format+": %v", append(args, err)...)
		return false
	}
	return true
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

package redeq_test

import (
	"context"
	"fmt"
	"maps"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// Helpers of the fault tests: consumer processes that
// a test kills, stops or lets crash, private servers and clusters to
// pause, and records of what ran.

// The children below are kinds of the test binary run again (see
// TestMain and startChildKind). Their settings come from these
// environment variables, in milliseconds or as numbers; unset ones keep
// the defaults.
const (
	childHoldEnv            = "CHILD_HOLD_MS"          // how long each job runs
	childConsumerTimeoutEnv = "CHILD_CT_MS"            // config.ConsumerTimeout
	childHeartbeatEnv       = "CHILD_HB_MS"            // config.HeartbeatInterval
	childConcurrencyEnv     = "CHILD_CONCURRENCY"      // config.Concurrency
	childMaxRecoveriesEnv   = "CHILD_MAX_RECOVERIES"   // config.MaxRecoveries
	childHoldForever        = childHoldEnv + "=600000" // holds every job it takes
)

func childEnvDur(name string, def time.Duration) time.Duration {
	if v := os.Getenv(name); v != "" {
		ms, err := strconv.Atoi(v)
		if err == nil {
			return time.Duration(ms) * time.Millisecond
		}
	}
	return def
}

// faultChildConfig applies the parent's timing to a child's config.
func faultChildConfig(c *config.Config) {
	c.ConsumerTimeout = childEnvDur(childConsumerTimeoutEnv, c.ConsumerTimeout)
	c.HeartbeatInterval = childEnvDur(childHeartbeatEnv, c.HeartbeatInterval)
	if v := os.Getenv(childConcurrencyEnv); v != "" {
		c.Concurrency, _ = strconv.Atoi(v)
	}
	if v := os.Getenv(childMaxRecoveriesEnv); v != "" {
		c.MaxRecoveries, _ = strconv.Atoi(v)
	}
}

// runSlowChild consumes REDEQ_TEST_TOPIC with 4 workers; each job runs
// CHILD_HOLD_MS, then is acked. It prints "id <cid>", "start <id>" and
// "done <id>".
func runSlowChild() {
	c := childClient(faultChildConfig)
	hold := childEnvDur(childHoldEnv, 5*time.Second)
	l := newListener(os.Getenv("REDEQ_TEST_TOPIC"), func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		fmt.Println("start", job.ID)
		time.Sleep(hold)
		fmt.Println("done", job.ID)
		ch.Ack()
		return nil
	})
	l.workers = 4
	childMust(c.Register(l))
	childMust(c.Start(context.Background()))
	fmt.Println("id", c.ConsumerID())
	select {}
}

// poisonableListener listens to topic with 4 workers. The job "poison"
// kills the process 300ms after it starts; every other job runs hold,
// prints "finished <topic> <id>" and is acked. Each run prints "start
// <topic> <id> <recoveries>" first.
func poisonableListener(topic string, hold time.Duration) *listener {
	l := newListener(topic, func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		fmt.Println("start", job.Topic, job.ID, job.Recoveries)
		if job.ID == "poison" {
			time.Sleep(300 * time.Millisecond)
			os.Exit(3)
		}
		time.Sleep(hold)
		fmt.Println("finished", job.Topic, job.ID)
		ch.Ack()
		return nil
	})
	l.workers = 4
	return l
}

// runTwoTopicsChild listens to topics "a" and "b" (one service, two
// topics) with poisonable listeners; jobs run CHILD_HOLD_MS.
func runTwoTopicsChild() {
	c := childClient(faultChildConfig)
	hold := childEnvDur(childHoldEnv, 3*time.Second)
	for _, topic := range []string{"a", "b"} {
		childMust(c.Register(poisonableListener(topic, hold)))
	}
	childMust(c.Start(context.Background()))
	select {}
}

// runTwoClientsChild is one service process that embeds two redeq
// clients over the same Redis (say, two modules of one binary, each with
// its own settings, as a process may): client X listens to "a", client
// Y to "b", with poisonable listeners; jobs run CHILD_HOLD_MS.
func runTwoClientsChild() {
	hold := childEnvDur(childHoldEnv, 3*time.Second)
	var clients []*redeq.Client
	for _, topic := range []string{"a", "b"} {
		c := childClient(faultChildConfig)
		childMust(c.Register(poisonableListener(topic, hold)))
		clients = append(clients, c)
	}
	for _, c := range clients {
		childMust(c.Start(context.Background()))
	}
	select {}
}

// faultChild is a child process and the lines it printed; lines is closed
// once the child has ended and every line was read.
type faultChild struct {
	*child
	lines chan string
}

// startFaultChild starts a child of kind (see TestMain) with extra
// environment variables ("NAME=value").
func startFaultChild(t *testing.T, kind string, be testutil.Backend, prefix, topic string, extra ...string) *faultChild {
	t.Helper()
	lines := make(chan string, 1024)
	c := startChildKind(t, kind, be, prefix, topic, func(l string) { lines <- l }, extra...)
	go func() {
		<-c.drained // readers of the lines end with the child
		close(lines)
	}()
	return &faultChild{child: c, lines: lines}
}

// expect waits for a line with prefix and returns the rest of it.
func (c *faultChild) expect(t *testing.T, prefix string, within time.Duration) string {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case l, open := <-c.lines:
			if !open {
				t.Fatalf("child ended before it printed %q", prefix)
			}
			if rest, ok := strings.CutPrefix(l, prefix); ok {
				return rest
			}
			t.Logf("child: %s", l)
		case <-deadline:
			t.Fatalf("child printed no %q within %v", prefix, within)
		}
	}
}

// kill kills the child, stopped (SIGSTOP) or not.
func (c *faultChild) kill() {
	_ = c.cmd.Process.Signal(syscall.SIGCONT)
	c.child.kill()
}

// privateServer starts a private redis-server and returns it as a Backend.
func privateServer(t *testing.T, args ...string) (*testutil.Server, testutil.Backend) {
	t.Helper()
	s := testutil.StartServer(t, args...)
	be := testutil.Backend{
		Name:  "redis",
		Addrs: []string{s.Addr},
		New: func(t testing.TB) redis.UniversalClient {
			c := redis.NewClient(&redis.Options{Addr: s.Addr})
			t.Cleanup(func() { c.Close() })
			return c
		},
	}
	return s, be
}

// privateCluster starts a private Redis Cluster and returns it as a
// Backend.
func privateCluster(t *testing.T, masters int) (*testutil.ReplCluster, testutil.Backend) {
	t.Helper()
	rc := testutil.StartCluster(t, masters, 5*time.Second)
	return rc, clusterBackend(rc.Addrs, false)
}

// clusterBackend is the Redis Cluster at addrs as a Backend; with
// ctxTimeouts its clients set ContextTimeoutEnabled.
func clusterBackend(addrs []string, ctxTimeouts bool) testutil.Backend {
	return testutil.Backend{
		Name:  "cluster",
		Addrs: addrs,
		New: func(t testing.TB) redis.UniversalClient {
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: ctxTimeouts})
			t.Cleanup(func() { c.Close() })
			return c
		},
	}
}

// nodeOf returns the address of the master holding key.
func nodeOf(t *testing.T, rdb redis.UniversalClient, key string) string {
	t.Helper()
	cc := rdb.(*redis.ClusterClient)
	m, err := cc.MasterForKey(context.Background(), key)
	require.NoError(t, err)
	return m.Options().Addr
}

// pauseNode pauses the node at addr (CLIENT PAUSE <d> <mode>), undone at
// cleanup.
func pauseNode(t *testing.T, addr string, d time.Duration, mode string) {
	t.Helper()
	pn := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() {
		_ = pn.Do(context.Background(), "CLIENT", "UNPAUSE").Err()
		pn.Close()
	})
	require.NoError(t, pn.Do(context.Background(), "CLIENT", "PAUSE", fmt.Sprint(d.Milliseconds()), mode).Err())
}

// jobRuns records every run of every job across clients.
type jobRuns struct {
	testutil.Recorder
}

func (r *jobRuns) handler(hold time.Duration) func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
	return func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		defer r.Begin(testutil.Run{ID: job.ID, Attempt: job.Attempt, Recoveries: job.Recoveries, Headers: maps.Clone(job.Headers)})()
		time.Sleep(hold)
		ch.Ack()
		return nil
	}
}

// ranAll reports whether the jobs <prefix>0 to <prefix>n-1 and every job
// of also have run.
func (r *jobRuns) ranAll(prefix string, n int, also map[string]bool) bool {
	got := r.Counts()
	for i := range n {
		if got[fmt.Sprint(prefix, i)] == 0 {
			return false
		}
	}
	for id := range also {
		if got[id] == 0 {
			return false
		}
	}
	return true
}

// startHolder starts a "slow" child (with extra settings) that holds every
// job it takes of topic "t", waits within idWithin for it to start, adds
// the jobs k0 to k<jobs-1> (with headers) and returns the child and the
// ids of the 4 it holds (one per worker).
func startHolder(t *testing.T, e *env, idWithin time.Duration, jobs int, headers map[string]string, extra ...string) (*faultChild, map[string]bool) {
	t.Helper()
	ch := startFaultChild(t, "slow", e.be, e.cfg.Prefix, "t", append([]string{childHoldForever}, extra...)...)
	ch.expect(t, "id ", idWithin)
	for i := range jobs {
		require.NoError(t, e.c.Add(context.Background(), &redeq.Job{Topic: "t", ID: fmt.Sprint("k", i), Headers: maps.Clone(headers)}))
	}
	held := map[string]bool{}
	for len(held) < 4 {
		held[strings.TrimSpace(ch.expect(t, "start ", 10*time.Second))] = true
	}
	return ch, held
}

// startSlowConsumers starts n live consumers of topic "t" (the first on
// e.c, the others on clients of their own), 4 workers each, that run each
// job for 1.5 s and record it in runs.
func startSlowConsumers(t *testing.T, e *env, runs *jobRuns, n int) {
	t.Helper()
	for i := range n {
		l := newListener("t", runs.handler(1500*time.Millisecond))
		l.workers = 4
		c := e.c
		if i > 0 {
			c = e.another(t, nil)
		}
		startWith(t, c, l)
	}
}

// poisonBesideB1 adds the job "poison" of topic "a" and the healthy job
// "b1" of topic "b" on a private server (MaxRecoveries 3), and, as a
// supervisor would, starts a child of kind again each time the poison job
// kills it, until the poison job is dead. It logs the crashes and the
// handler starts.
func poisonBesideB1(t *testing.T, kind string, maxRecoveries int) *env {
	t.Helper()
	_, be := privateServer(t)
	ctx := context.Background()
	cfg := testutil.Config(t)
	cfg.MaxRecoveries = maxRecoveries
	e := setup(t, be, cfg)
	require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "a", ID: "poison"}))
	require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "b", ID: "b1"}))
	require.NoError(t, e.c.Start(ctx)) // moves and reaps, consumes nothing

	var mu sync.Mutex
	var starts []string
	deadline := time.Now().Add(45 * time.Second)
	crashes := 0
	for state(t, e.c, "a", "poison") != redeq.StateDead {
		require.True(t, time.Now().Before(deadline), "the poison job never went dead")
		// A supervisor restarts the crashed service.
		c := startFaultChild(t, kind, be, cfg.Prefix, "", childMaxRecoveriesEnv+"="+strconv.Itoa(maxRecoveries), childHoldEnv+"=3000")
		go func() {
			for l := range c.lines {
				if strings.HasPrefix(l, "start ") {
					mu.Lock()
					starts = append(starts, l)
					mu.Unlock()
				}
			}
		}()
		<-c.drained // it dies by the poison job
		c.kill()
		crashes++
		testutil.Eventually(t, 10*time.Second, "poison recovered", func() bool { return state(t, e.c, "a", "poison") != redeq.StateInFlight })
		testutil.Eventually(t, 10*time.Second, "b1 recovered", func() bool { return state(t, e.c, "b", "b1") != redeq.StateInFlight })
	}
	mu.Lock()
	t.Logf("%d crashes; handler starts: %v", crashes, starts)
	mu.Unlock()
	return e
}

// goroutineStacks returns the stack of every goroutine of the process.
func goroutineStacks() []string {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Split(string(buf), "\n\n")
}

// redeqStacks returns the stacks of the goroutines that run redeq code
// other than these tests.
func redeqStacks() []string {
	var out []string
	for _, g := range goroutineStacks() {
		if strings.Contains(g, "github.com/redeq-go/redeq/") && !strings.Contains(g, "redeq/redeq_test.") {
			out = append(out, g)
		}
	}
	return out
}

// redeqGoroutines counts goroutines whose stack runs redeq code, and
// returns the first three stacks.
func redeqGoroutines() (int, string) {
	gs := redeqStacks()
	return len(gs), strings.Join(gs[:min(len(gs), 3)], "\n\n")
}

// redeqFrames lists, per goroutine running redeq code, its redeq frames.
func redeqFrames() string {
	var out []string
	for _, g := range redeqStacks() {
		var fr []string
		for _, l := range strings.Split(g, "\n") {
			if strings.HasPrefix(l, "github.com/redeq-go/redeq/") {
				fr = append(fr, strings.TrimPrefix(l, "github.com/redeq-go/redeq/"))
			}
		}
		out = append(out, "  "+strings.Join(fr, " <- "))
	}
	return strings.Join(out, "\n")
}

// shutdownLogStuck returns c.Shutdown(ctx). When Shutdown has not returned
// after 2.5 s, it logs, after heading, each goroutine stack that stuck
// matches, and keeps waiting.
func shutdownLogStuck(t *testing.T, ctx context.Context, c *redeq.Client, heading string, stuck func(stack string) bool) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- c.Shutdown(ctx) }()
	select {
	case err := <-done:
		return err
	case <-time.After(2500 * time.Millisecond):
		for _, g := range goroutineStacks() {
			if stuck(g) {
				t.Logf("%s:\n%s", heading, g)
			}
		}
		return <-done
	}
}

// setRecoveries rewrites the recovery count in a stored envelope, as if
// the job's consumers had died that many times while it ran.
var setRecoveries = redis.NewScript(`
local e = redis.call('HGET', KEYS[1], ARGV[1])
if not e then return redis.error_reply('no such job') end
local h, rest = string.match(e, '^(1|%d+|%d+|)%d+(.*)$')
redis.call('HSET', KEYS[1], ARGV[1], h .. ARGV[2] .. rest)
return 1`)

// quarantine sets the recovery count of job id of topic.
func quarantine(t *testing.T, rdb redis.UniversalClient, cfg config.Config, topic, id string, recoveries int) {
	t.Helper()
	k := keys.ForBucket(cfg.Prefix, topic, bucketOf(id, cfg.Concurrency))
	require.NoError(t, setRecoveries.Run(context.Background(), rdb, []string{k.Pool()}, id, recoveries).Err())
}

// runCounter counts handler runs per topic.
type runCounter struct {
	mu sync.Mutex
	n  map[string]*atomic.Int64
}

func (c *runCounter) of(topic string) *atomic.Int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]*atomic.Int64{}
	}
	if c.n[topic] == nil {
		c.n[topic] = &atomic.Int64{}
	}
	return c.n[topic]
}

// listener returns a listener of topic with 4 workers whose handler
// counts its run, works for work and acks.
func (c *runCounter) listener(topic string, work time.Duration) *listener {
	l := newListener(topic, func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		c.of(topic).Add(1)
		time.Sleep(work)
		ch.Ack()
		return nil
	})
	l.workers = 4
	return l
}

// recoveriesOf lists the recovery count of each delivery of l.
func recoveriesOf(l *listener) []int {
	var out []int
	for _, d := range l.deliveries() {
		out = append(out, d.job.Recoveries)
	}
	return out
}

// perSecond samples n once a second for d and returns how much it grew in
// each second.
func perSecond(n *atomic.Int64, d time.Duration) []int64 {
	start, last := time.Now(), n.Load()
	var out []int64
	for time.Since(start) < d {
		time.Sleep(time.Second)
		now := n.Load()
		out = append(out, now-last)
		last = now
	}
	return out
}

// bucketNodes returns the address of the cluster node that stores each
// of the n buckets of topic.
func bucketNodes(t *testing.T, e *env, topic string, n int) []string {
	t.Helper()
	nodes := make([]string, n)
	for b := range n {
		nodes[b] = nodeOf(t, e.rdb, keys.ForBucket(e.cfg.Prefix, topic, b).Pool())
	}
	return nodes
}

// earlyBy is how long before due a job started at start, by the wall clock
// the Redis server schedules by; base is a time read before due and
// start were. This machine's wall clock can be stepped while a test runs:
// a step forward makes the server move jobs sooner in elapsed time, which
// is not early by its clock, so the wall clock is compared, not the
// monotonic one; a step back between a job's move and its start makes the
// start read earlier than it was, so what the clock went back since base
// is not counted.
func earlyBy(start, due, base time.Time) time.Duration {
	wall := start.Round(0).Sub(base.Round(0))
	back := max(0, start.Sub(base)-wall) // monotonic minus wall elapsed
	return due.Round(0).Sub(start.Round(0)) - back
}

package redeq_test

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// The test binary doubles as a consumer process that the crash tests kill.
const childEnv = "REDEQ_TEST_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "":
	case "chaos":
		runChaosChild()
		return
	case "mover":
		runMoverChild()
		return
	case schedChaosKind:
		runSchedChaosChild()
		return
	case "poison":
		runPoisonChild()
		return
	case deadPassKind:
		runDeadPassChild()
		return
	case "slow":
		runSlowChild()
		return
	case "twotopics":
		runTwoTopicsChild()
		return
	case "twoclients":
		runTwoClientsChild()
		return
	case limitedKind:
		runLimitedChild()
		return
	case shutdownOrderKind:
		runShutdownOrderChild()
		return
	default:
		runChild()
		return
	}
	// The tests mostly wait (for a poll, a lease, a heartbeat), so by
	// default 8 of them run at once, not GOMAXPROCS; -test.parallel given
	// on the command line wins.
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		_ = flag.Set("test.parallel", "8")
	}
	// go-redis retries a failed dial in a goroutine that sleeps up to a
	// second, after its client is closed: not ours. Shutdown does not
	// wait past its budget for a mover or subscription stuck on a Redis
	// that does not answer; those end within go-redis's timeouts and the
	// movers' one-second unlock, so a goroutine counts as leaked only if
	// it is still there 15 s after the last test.
	code := m.Run()
	if code == 0 {
		deadline := time.Now().Add(15 * time.Second)
		for {
			err := goleak.Find(goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				fmt.Fprintf(os.Stderr, "goleak: Errors on successful test run: %v\n", err)
				code = 1
				break
			}
			time.Sleep(250 * time.Millisecond)
		}
	}
	os.Exit(code)
}

// childClient connects a child process to the deployment its parent named;
// hooks see every command the client sends.
func childClient(mod func(*config.Config), hooks ...redis.Hook) *redeq.Client {
	addrs := strings.Split(os.Getenv("REDEQ_TEST_ADDRS"), ",")
	var rdb redis.UniversalClient
	if os.Getenv("REDEQ_TEST_CLUSTER") != "" {
		rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	} else {
		rdb = redis.NewClient(&redis.Options{Addr: addrs[0]})
	}
	for _, h := range hooks {
		rdb.AddHook(h)
	}
	cfg := testutil.Fast()
	cfg.Prefix = os.Getenv("REDEQ_TEST_PREFIX")
	if mod != nil {
		mod(&cfg)
	}
	c, err := redeq.New(rdb, cfg)
	childMust(err)
	return c
}

// childMust ends a child process that hit err: it prints "error <err>"
// and exits 2.
func childMust(err error) {
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
}

// runChild consumes one topic and never finishes a job: it prints
// "holding <id>" for each job it holds, until it is killed.
func runChild() {
	c := childClient(nil)
	l := newListener(os.Getenv("REDEQ_TEST_TOPIC"), func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		fmt.Println("holding", job.ID)
		select {} // hold the job until killed
	})
	l.workers = 4
	childMust(c.Register(l))
	childMust(c.Start(context.Background()))
	select {}
}

// runPoisonChild consumes one topic with 4 workers: the job "poison" kills
// the process at once; any other job works for a while, then prints
// "finished <id>" and is acked.
func runPoisonChild() {
	c := childClient(func(c *config.Config) { c.MaxRecoveries = 3 })
	l := newListener(os.Getenv("REDEQ_TEST_TOPIC"), func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		if job.ID == "poison" {
			os.Exit(3)
		}
		time.Sleep(300 * time.Millisecond)
		fmt.Println("finished", job.ID)
		ch.Ack()
		return nil
	})
	l.workers = 4
	childMust(c.Register(l))
	childMust(c.Start(context.Background()))
	select {}
}

// runMoverChild starts a client with no listener and a 30s lock expiry,
// prints "started" and then "id <its client id>", and moves jobs until
// killed.
func runMoverChild() {
	c := childClient(func(c *config.Config) { c.LockExpiry = 30 * time.Second })
	for c.Start(context.Background()) != nil {
		time.Sleep(100 * time.Millisecond)
	}
	fmt.Println("started")
	fmt.Println("id", c.ConsumerID())
	select {}
}

// child is a consumer process holding jobs of topic.
type child struct {
	cmd  *exec.Cmd
	held chan string
	// drained is closed when every line the process printed has been read:
	// Wait closes the stdout pipe, so it must not run before that.
	drained chan struct{}
}

// startChild starts a consumer process for topic on be under prefix.
func startChild(t *testing.T, be testutil.Backend, prefix, topic string) *child {
	return startChildKind(t, "hold", be, prefix, topic, nil)
}

// startChildKind starts a child of kind, with extra environment
// variables ("NAME=value"); lines it prints that are not "holding <id>" go
// to onLine (or the test log).
func startChildKind(t *testing.T, kind string, be testutil.Backend, prefix, topic string, onLine func(string), extra ...string) *child {
	t.Helper()
	testutil.FaultTier(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+kind,
		"REDEQ_TEST_ADDRS="+strings.Join(be.Addrs, ","),
		"REDEQ_TEST_PREFIX="+prefix, "REDEQ_TEST_TOPIC="+topic)
	if be.Name == "cluster" {
		cmd.Env = append(cmd.Env, "REDEQ_TEST_CLUSTER=1")
	}
	cmd.Env = append(cmd.Env, extra...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, held: make(chan string, 1024), drained: make(chan struct{})}
	go func() {
		defer close(c.drained)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if id, ok := strings.CutPrefix(sc.Text(), "holding "); ok {
				c.held <- id
			} else if onLine != nil {
				onLine(sc.Text())
			}
		}
	}()
	t.Cleanup(func() { c.kill() })
	return c
}

// kill sends SIGKILL, reads what the process printed up to its death, and
// reaps it. It returns a time when the process was already dead. Killing a
// dead child again is harmless.
func (c *child) kill() time.Time {
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.drained // the pipe reaches EOF once the process is gone
	_ = c.cmd.Wait()
	return time.Now()
}

// isolatedEnv names the one test a child test process runs (see isolated).
const isolatedEnv = "REDEQ_TEST_ISOLATED"

// isolated runs the calling test in a process of its own: this test
// binary, running that test alone. Tests that count the process's
// goroutines, or take the process-wide quarantine slot, then run beside
// the others (t.Parallel) instead of one after another, without seeing
// their goroutines or their quarantined jobs. It returns true in the
// child, where the test goes on; in the parent it waits for the child,
// fails the test if the child failed (its output in the log) and returns
// false.
//
//	if !isolated(t) {
//		return
//	}
func isolated(t *testing.T) bool {
	t.Helper()
	if os.Getenv(isolatedEnv) == t.Name() {
		return true
	}
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1", "-test.timeout=10m")
	cmd.Env = append(os.Environ(), isolatedEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s in a process of its own: %v\n%s", t.Name(), err, out)
	}
	// Its own log lines (figures), not the whole transcript.
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "_test.go:") {
			t.Log(strings.TrimSpace(line))
		}
	}
	return false
}

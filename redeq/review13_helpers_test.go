package redeq_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// Review 13 children: the test binary run again with REDEQ_R13_CHILD set
// becomes a consumer process that a test can SIGSTOP or that kills itself.
// It is dispatched from init, so main_test.go's TestMain is left alone.
const r13ChildEnv = "REDEQ_R13_CHILD"

func init() {
	kind := os.Getenv(r13ChildEnv)
	if kind == "" {
		return
	}
	switch kind {
	case "slow":
		r13SlowChild()
	case "twotopics":
		r13TwoTopicsChild()
	default:
		fmt.Println("error unknown kind", kind)
		os.Exit(2)
	}
	os.Exit(0)
}

func r13EnvDur(name string, def time.Duration) time.Duration {
	if v := os.Getenv(name); v != "" {
		ms, err := strconv.Atoi(v)
		if err == nil {
			return time.Duration(ms) * time.Millisecond
		}
	}
	return def
}

// r13ChildConfig applies the parent's timing to a child's config.
func r13ChildConfig(c *config.Config) {
	c.ConsumerTimeout = r13EnvDur("R13_CT_MS", c.ConsumerTimeout)
	c.HeartbeatInterval = r13EnvDur("R13_HB_MS", c.HeartbeatInterval)
	if v := os.Getenv("R13_CONCURRENCY"); v != "" {
		c.Concurrency, _ = strconv.Atoi(v)
	}
	if v := os.Getenv("R13_MAX_RECOVERIES"); v != "" {
		c.MaxRecoveries, _ = strconv.Atoi(v)
	}
}

// r13SlowChild consumes REDEQ_TEST_TOPIC; each job runs R13_HOLD_MS, then
// is acked. It prints "id <cid>", "start <id>" and "done <id>".
func r13SlowChild() {
	c := childClient(r13ChildConfig)
	hold := r13EnvDur("R13_HOLD_MS", 5*time.Second)
	l := newListener(os.Getenv("REDEQ_TEST_TOPIC"), func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		fmt.Println("start", job.ID)
		time.Sleep(hold)
		fmt.Println("done", job.ID)
		ch.Ack()
		return nil
	})
	l.workers = 4
	if err := c.Register(l); err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	if err := c.Start(context.Background()); err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	fmt.Println("id", c.ConsumerID())
	select {}
}

// r13TwoTopicsChild listens to topics "a" and "b" (one service, two
// topics). The job "poison" of "a" kills the process 300ms after it
// starts; every other job runs R13_HOLD_MS, prints "finished <topic>
// <id>" and is acked.
func r13TwoTopicsChild() {
	c := childClient(r13ChildConfig)
	hold := r13EnvDur("R13_HOLD_MS", 3*time.Second)
	for _, topic := range []string{"a", "b"} {
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
		if err := c.Register(l); err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
	}
	if err := c.Start(context.Background()); err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	select {}
}

// r13Child is a child process and the lines it printed.
type r13Child struct {
	cmd     *exec.Cmd
	lines   chan string
	drained chan struct{}
}

func r13StartChild(t *testing.T, kind string, addrs []string, cluster bool, prefix, topic string, extra ...string) *r13Child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), r13ChildEnv+"="+kind,
		"REDEQ_TEST_ADDRS="+strings.Join(addrs, ","),
		"REDEQ_TEST_PREFIX="+prefix, "REDEQ_TEST_TOPIC="+topic)
	if cluster {
		cmd.Env = append(cmd.Env, "REDEQ_TEST_CLUSTER=1")
	}
	cmd.Env = append(cmd.Env, extra...)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	c := &r13Child{cmd: cmd, lines: make(chan string, 1024), drained: make(chan struct{})}
	go func() {
		defer close(c.drained)
		defer close(c.lines) // readers of the lines end with the child
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() { c.kill() })
	return c
}

// expect waits for a line with prefix and returns the rest of it.
func (c *r13Child) expect(t *testing.T, prefix string, within time.Duration) string {
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

func (c *r13Child) kill() {
	_ = c.cmd.Process.Signal(syscall.SIGCONT)
	_ = c.cmd.Process.Signal(syscall.SIGKILL)
	<-c.drained
	_ = c.cmd.Wait()
}

// r13Server starts a private redis-server and returns it as a Backend.
func r13Server(t *testing.T, args ...string) (*testutil.Server, testutil.Backend) {
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

// r13Cluster starts a private Redis Cluster and returns it as a Backend.
func r13Cluster(t *testing.T, masters int) (*testutil.ReplCluster, testutil.Backend) {
	t.Helper()
	rc := testutil.StartCluster(t, masters, 5*time.Second)
	be := testutil.Backend{
		Name:  "cluster",
		Addrs: rc.Addrs,
		New: func(t testing.TB) redis.UniversalClient {
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.Addrs})
			t.Cleanup(func() { c.Close() })
			return c
		},
	}
	return rc, be
}

// r13Log collects a client's log lines.
type r13Log struct {
	mu    sync.Mutex
	lines []string
}

func (l *r13Log) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, strings.TrimSpace(string(p)))
	return len(p), nil
}

func (l *r13Log) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

package testutil

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RequireServerEnv, when set, makes tests that need a redis-server binary
// fail instead of skip when it is missing. CI sets it.
const RequireServerEnv = "REDEQ_REQUIRE_SERVER"

// FaultTierEnv switches on the fault tier: tests that start redis-servers
// or child processes of their own, kill or stop them, or run for more than
// a second or two.
// `go test ./...` without it is the fast tier a newcomer runs; .ci/run
// sets it.
const FaultTierEnv = "REDEQ_FAULT"

// FaultTier skips the calling test unless the fault tier is on. Every
// helper that starts a private server or a child process calls it, so a
// test that uses one is in the fault tier whether or not it says so.
func FaultTier(t testing.TB) {
	t.Helper()
	if os.Getenv(FaultTierEnv) == "" {
		t.Skipf("fault tier: set %s=1 to run it (.ci/run does)", FaultTierEnv)
	}
}

// Server is a redis-server process a test started, in a folder of its own,
// that the test can stop, kill and start again on the same port.
type Server struct {
	t    testing.TB
	Port int
	Addr string
	Dir  string
	args []string
	cmd  *exec.Cmd
}

// StartServer starts redis-server on a free loopback port with extra
// arguments (such as "--appendonly", "yes"). It belongs to the fault tier
// (FaultTier). Without a redis-server binary the test is skipped, unless
// REDEQ_REQUIRE_SERVER is set.
func StartServer(t testing.TB, args ...string) *Server {
	t.Helper()
	FaultTier(t)
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv(RequireServerEnv) != "" {
			t.Fatalf("redis-server not found and %s is set", RequireServerEnv)
		}
		t.Skip("redis-server not installed; .ci/run installs it")
	}
	s := &Server{t: t, Dir: t.TempDir(), args: args}
	s.startOnFreePort(FreePort)
	t.Cleanup(func() { s.Kill() })
	return s
}

// FreePort returns a loopback port nothing listens on.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Start runs the server (again) and waits until it answers.
func (s *Server) Start() {
	s.t.Helper()
	if err := s.start(); err != nil {
		s.t.Fatal(err)
	}
}

// errPortTaken says another process answered on the server's port: the
// port was free when chosen, and another test binary took it since.
var errPortTaken = errors.New("port taken by another process")

// start runs the server and waits until it, and not another process on
// its port, answers: it compares the process id the server reports.
func (s *Server) start() error {
	args := append([]string{"--bind", "127.0.0.1", "--port", strconv.Itoa(s.Port), "--dir", s.Dir,
		"--save", "", "--logfile", filepath.Join(s.Dir, "redis.log")}, s.args...)
	s.cmd = exec.Command("redis-server", args...)
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	pid := strconv.Itoa(s.cmd.Process.Pid)
	// The server's own password, when its arguments set one: its process
	// id is read after AUTH like any other's.
	c := redis.NewClient(&redis.Options{Addr: s.Addr, Password: s.password(), DialTimeout: 100 * time.Millisecond, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		info, err := c.Info(context.Background(), "server").Result()
		var reply redis.Error
		switch {
		case err == nil && !strings.Contains(info, "process_id:"+pid+"\r\n"):
			s.Kill()
			return fmt.Errorf("redis-server on %s: %w", s.Addr, errPortTaken)
		case err == nil:
			return nil
		case errors.As(err, &reply) && !strings.HasPrefix(err.Error(), "LOADING"):
			// Refused (NOAUTH, WRONGPASS): a server that wants a password
			// this one was not given, so another process's.
			s.Kill()
			return fmt.Errorf("redis-server on %s (%v): %w", s.Addr, err, errPortTaken)
		}
		time.Sleep(20 * time.Millisecond)
	}
	log, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
	s.Kill()
	return fmt.Errorf("redis-server on %s did not start:\n%s", s.Addr, log)
}

// clusterNode reports whether the server at s.Addr is s's own process,
// running with cluster mode on.
func (s *Server) clusterNode() bool {
	if s.cmd == nil || s.cmd.Process == nil {
		return false
	}
	c := redis.NewClient(&redis.Options{Addr: s.Addr, Password: s.password(), DialTimeout: time.Second, ReadTimeout: time.Second, MaxRetries: -1})
	defer c.Close()
	info, err := c.Info(context.Background(), "server", "cluster").Result()
	return err == nil && strings.Contains(info, "process_id:"+strconv.Itoa(s.cmd.Process.Pid)+"\r\n") &&
		strings.Contains(info, "cluster_enabled:1\r\n")
}

// password is the value of a --requirepass among the server's arguments,
// or "".
func (s *Server) password() string {
	for i, a := range s.args {
		if a == "--requirepass" && i+1 < len(s.args) {
			return s.args[i+1]
		}
	}
	return ""
}

// startOnFreePort starts s on a port from pick, and on another one when a
// process of another test binary took the first meanwhile.
func (s *Server) startOnFreePort(pick func(testing.TB) int) {
	s.t.Helper()
	for try := 0; ; try++ {
		s.Port = pick(s.t)
		s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port))
		err := s.start()
		if err == nil {
			return
		}
		if !errors.Is(err, errPortTaken) || try == 4 {
			s.t.Fatal(err)
		}
	}
}

// logTail returns the last lines of the server's log.
func (s *Server) logTail() string {
	log, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
	lines := strings.Split(strings.TrimSpace(string(log)), "\n")
	return strings.Join(lines[max(0, len(lines)-20):], "\n")
}

// Kill stops the server with SIGKILL: no shutdown work, as in a crash.
func (s *Server) Kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGKILL)
		_ = s.cmd.Wait()
		s.cmd = nil
	}
}

// Stop shuts the server down with SIGTERM (it flushes its AOF) and waits.
func (s *Server) Stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		_ = s.cmd.Wait()
		s.cmd = nil
	}
}

// Client returns a client of the server, closed at the end of the test.
func (s *Server) Client(opts *redis.Options) *redis.Client {
	if opts == nil {
		opts = &redis.Options{}
	}
	if opts.Addr == "" {
		opts.Addr = s.Addr
	}
	c := redis.NewClient(opts)
	s.t.Cleanup(func() { c.Close() })
	return c
}

// Ping reports whether the server answers.
func (s *Server) Ping(ctx context.Context) error {
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	return c.Ping(ctx).Err()
}

// String names the server in test logs.
func (s *Server) String() string { return fmt.Sprintf("redis-server %s", s.Addr) }

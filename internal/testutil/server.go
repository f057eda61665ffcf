package testutil

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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
	s := &Server{t: t, Port: FreePort(t), Dir: t.TempDir(), args: args}
	s.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port))
	s.Start()
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
	args := append([]string{"--bind", "127.0.0.1", "--port", strconv.Itoa(s.Port), "--dir", s.Dir,
		"--save", "", "--logfile", filepath.Join(s.Dir, "redis.log")}, s.args...)
	s.cmd = exec.Command("redis-server", args...)
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", s.Addr, 100*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	log, _ := os.ReadFile(filepath.Join(s.Dir, "redis.log"))
	s.t.Fatalf("redis-server on %s did not start:\n%s", s.Addr, log)
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

package main

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// server is the dedicated redis-server of a -all run.
type server struct {
	addr    string
	version string
	dir     string
	cmd     *exec.Cmd
}

// startServer starts redis-server on a free loopback port, without
// persistence, in a temporary folder. A port taken between choosing and
// binding it is retried with another.
func startServer() (*server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("-all starts its own redis-server, and none is on PATH: %w (install it, e.g. apt-get install redis-server)", err)
	}
	var last error
	for range 5 {
		s, err := tryServer(bin)
		if err == nil {
			return s, nil
		}
		last = err
	}
	return nil, last
}

func tryServer(bin string) (*server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("find a free port: %w", err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir, err := os.MkdirTemp("", "redeq-bench-")
	if err != nil {
		return nil, fmt.Errorf("temporary folder: %w", err)
	}
	s := &server{addr: fmt.Sprintf("127.0.0.1:%d", port), dir: dir}
	s.cmd = exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", dir,
		"--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", filepath.Join(dir, "redis.log"))
	// The server dies with the bench, even when the bench is killed.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- s.cmd.Wait() }()
	rdb := redis.NewClient(&redis.Options{Addr: s.addr})
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			os.RemoveAll(dir)
			return nil, fmt.Errorf("redis-server on %s exited (%v):\n%s", s.addr, err, log)
		default:
		}
		info, err := rdb.Info(context.Background(), "server").Result()
		if err == nil {
			s.version = field(info, "redis_version")
			return s, nil
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("redis-server on %s did not answer within 10s: %w", s.addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop shuts the server down and removes its folder.
func (s *server) stop() {
	// No retries: the server closing the connection is SHUTDOWN working.
	rdb := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1})
	_ = rdb.ShutdownNoSave(context.Background()).Err()
	rdb.Close()
	_ = s.cmd.Process.Signal(syscall.SIGKILL) // in case SHUTDOWN did not reach it
	os.RemoveAll(s.dir)
}

// stopOnSignal stops the server when the run is interrupted.
func stopOnSignal(s *server) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-ch
		fmt.Fprintf(os.Stderr, "bench: %v: stopping redis-server %s\n", sig, s.addr)
		s.stop()
		os.Exit(130)
	}()
}

// machine is what the figures were measured on.
type machine struct {
	Nproc     int    `json:"nproc"`
	CPU       string `json:"cpu,omitempty"`
	MemoryGiB int    `json:"memory_gib,omitempty"`
	Go        string `json:"go"`
	LoadStart string `json:"load_start"` // /proc/loadavg when the run started
	LoadEnd   string `json:"load_end,omitempty"`
}

func thisMachine() machine {
	m := machine{Nproc: runtime.NumCPU(), Go: runtime.Version(), LoadStart: loadAvg()}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				m.MemoryGiB = int((kb + 1<<19) >> 20)
			}
		}
	}
	return m
}

// loadAvg is the 1, 5 and 15-minute load average ("" where unknown).
func loadAvg() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(data))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

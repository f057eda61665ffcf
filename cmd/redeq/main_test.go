package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// cliEnv runs the command in process against one backend, under a prefix
// of its own, and gives a client to check the effect.
type cliEnv struct {
	url    string
	prefix string
	c      *redeq.Client
	b      testutil.Backend
}

func newEnv(t *testing.T, b testutil.Backend) *cliEnv {
	t.Helper()
	u := "redis://" + b.Addrs[0]
	if b.Name == "cluster" {
		u += "?addr=" + strings.Join(b.Addrs[1:], "&addr=")
	}
	cfg := testutil.Config(t)
	c, err := redeq.New(b.New(t), cfg)
	require.NoError(t, err)
	return &cliEnv{url: u, prefix: cfg.Prefix, c: c, b: b}
}

// run returns the exit code, standard output and standard error.
func (e *cliEnv) run(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	all := append([]string{"--redis", e.url, "--prefix", e.prefix}, args...)
	code := run(context.Background(), all, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

// ok runs a command that must succeed and returns its output.
func (e *cliEnv) ok(t *testing.T, args ...string) string {
	t.Helper()
	code, out, errs := e.run(t, "", args...)
	require.Equal(t, 0, code, "redeq %v: %s", args, errs)
	return out
}

func (e *cliEnv) job(t *testing.T, topic, id string) *redeq.Job {
	t.Helper()
	j, err := e.c.Get(context.Background(), topic, id)
	require.NoError(t, err)
	return j
}

// TestCLIJobs: add (text, file and standard input bodies), get as text,
// hex, raw and JSON, list with its cursor, stats, topics, reschedule,
// delete, pause and resume; each checked in Redis.
func TestCLIJobs(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := newEnv(t, b)
			ctx := context.Background()
			require.Equal(t, "o1\n", e.ok(t, "add", "--create", "orders", "o1", "--body", "<close>", "--delay", "1h", "--header", "trace=abc"))
			bin := filepath.Join(t.TempDir(), "body.bin")
			require.NoError(t, os.WriteFile(bin, []byte{0, 1, 0xff}, 0o600))
			e.ok(t, "add", "--create", "orders", "o2", "--body", "@"+bin, "--at", time.Now().Add(2*time.Hour).UTC().Format(time.RFC3339))
			code, out, errs := e.run(t, "from stdin", "add", "--create", "orders", "--body", "-", "--delay", "3h")
			require.Equal(t, 0, code, errs)
			gen := strings.TrimSpace(out)
			require.Equal(t, "from stdin", string(e.job(t, "orders", gen).Body))

			j := e.job(t, "orders", "o1")
			require.Equal(t, "<close>", string(j.Body))
			require.Equal(t, "abc", j.Headers["trace"])
			require.WithinDuration(t, time.Now().Add(time.Hour), j.RunAt, time.Minute)
			require.WithinDuration(t, time.Now().Add(2*time.Hour), e.job(t, "orders", "o2").RunAt, time.Minute)

			out = e.ok(t, "get", "orders", "o1")
			require.Regexp(t, `(?m)^state:\s+scheduled$`, out)
			require.Regexp(t, `(?m)^header trace:\s+abc$`, out)
			require.Contains(t, out, "body (7 bytes):\n<close>\n")
			require.Contains(t, e.ok(t, "get", "orders", "o2"), "00 01 ff")
			require.Equal(t, "\x00\x01\xff", e.ok(t, "get", "orders", "o2", "--raw"))
			var got struct {
				ID, State, Body string
				BodyBase64      string `json:"body_base64"`
			}
			require.NoError(t, json.Unmarshal([]byte(e.ok(t, "get", "orders", "o2", "-o", "json")), &got))
			require.Equal(t, "scheduled", got.State)
			require.Equal(t, "AAH/", got.BodyBase64)

			// stats T and stats give one shape: an array of topics.
			var one, all []statsJSON
			require.NoError(t, json.Unmarshal([]byte(e.ok(t, "stats", "orders", "-o", "json")), &one))
			require.Len(t, one, 1)
			st := one[0]
			require.Equal(t, int64(3), st.Scheduled)
			require.Equal(t, int64(3), st.Pool)
			require.NoError(t, json.Unmarshal([]byte(e.ok(t, "stats", "-o", "json")), &all))
			require.Equal(t, one, all)
			require.Regexp(t, `orders\s+3\s+0\s+0\s+0\s+0\s+3`, e.ok(t, "stats"))
			require.Contains(t, e.ok(t, "topics"), "orders")

			// Every job, one page at a time.
			ids := map[string]bool{}
			cursor := ""
			for pages := 0; ; pages++ {
				require.Less(t, pages, 50)
				var page struct {
					Jobs []jobJSON
					Next string
				}
				require.NoError(t, json.Unmarshal([]byte(e.ok(t, "list", "orders", "scheduled", "--limit", "1", "--cursor", cursor, "-o", "json")), &page))
				for _, j := range page.Jobs {
					ids[j.ID] = true
				}
				if cursor = page.Next; cursor == "" {
					break
				}
			}
			require.Equal(t, map[string]bool{"o1": true, "o2": true, gen: true}, ids)
			require.Contains(t, e.ok(t, "list", "orders", "scheduled"), "o1")

			e.ok(t, "reschedule", "orders", "o1", "--in", "0s")
			require.WithinDuration(t, time.Now(), e.job(t, "orders", "o1").RunAt, time.Minute)
			at := time.Now().Add(5 * time.Hour).UTC().Truncate(time.Second)
			e.ok(t, "reschedule", "orders", "o2", "--at", at.Format(time.RFC3339))
			require.True(t, at.Equal(e.job(t, "orders", "o2").RunAt.Truncate(time.Second)), "due %v", e.job(t, "orders", "o2").RunAt)

			e.ok(t, "delete", "orders", "o2")
			_, err := e.c.Get(ctx, "orders", "o2")
			require.ErrorIs(t, err, redeq.ErrJobNotFound)

			e.ok(t, "pause", "orders")
			s, err := e.c.Stats(ctx, "orders")
			require.NoError(t, err)
			require.True(t, s.Paused)
			e.ok(t, "resume", "orders")
			s, err = e.c.Stats(ctx, "orders")
			require.NoError(t, err)
			require.False(t, s.Paused)
		})
	}
}

// TestCLIRequeue: a job parked in un_ack and a dead one go back to their
// buckets.
func TestCLIRequeue(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := newEnv(t, b)
			ctx := context.Background()
			e.ok(t, "add", "--create", "orders", "park")
			e.ok(t, "add", "--create", "orders", "fail")
			w, err := redeq.New(b.New(t), e.c.Config())
			require.NoError(t, err)
			require.NoError(t, w.Register(redeq.ListenerFunc("orders", func(_ context.Context, j *redeq.Job, _ *redeq.Channel) error {
				if j.ID == "fail" {
					return redeq.SkipRetry(errors.New("boom"))
				}
				return nil
			})))
			require.NoError(t, w.Start(ctx))
			t.Cleanup(func() { _ = w.Shutdown(context.Background()) })
			waitState(t, e.c, "park", redeq.StateUnAck)
			waitState(t, e.c, "fail", redeq.StateDead)
			require.NoError(t, w.Shutdown(ctx))

			require.Contains(t, e.ok(t, "list", "orders", "dead"), "boom")
			code, _, _ := e.run(t, "", "requeue", "unack", "orders", "fail")
			require.Equal(t, 1, code, "fail is dead, not parked")
			e.ok(t, "requeue", "dead", "orders", "fail")
			e.ok(t, "requeue", "unack", "orders", "park", "--in", "1h")
			require.Contains(t, []redeq.State{redeq.StateScheduled, redeq.StateReady}, e.job(t, "orders", "fail").State)
			park := e.job(t, "orders", "park")
			require.Equal(t, redeq.StateScheduled, park.State)
			require.WithinDuration(t, time.Now().Add(time.Hour), park.RunAt, time.Minute)
		})
	}
}

// TestCLIStatsShowsLimits: stats shows a topic's global limits, the jobs
// holding their slots and those waiting for one, as a table and as JSON;
// a topic without limits shows none.
func TestCLIStatsShowsLimits(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := newEnv(t, b)
			ctx := context.Background()
			for _, id := range []string{"a", "b", "c"} {
				e.ok(t, "add", "--create", "calls", id)
			}
			e.ok(t, "add", "--create", "orders", "o")
			hold := make(chan struct{})
			w, err := redeq.New(b.New(t), e.c.Config())
			require.NoError(t, err)
			require.NoError(t, w.Register(redeq.ListenerFunc("calls", func(ctx context.Context, _ *redeq.Job, ch *redeq.Channel) error {
				select {
				case <-hold:
				case <-ctx.Done():
				}
				ch.Ack()
				return nil
			}, redeq.WithMaxRunning(1), redeq.WithRateLimit(50, time.Second))))
			require.NoError(t, w.Start(ctx))
			t.Cleanup(func() { _ = w.Shutdown(context.Background()) })
			t.Cleanup(func() { close(hold) }) // before the Shutdown: the handler ends
			testutil.Eventually(t, 10*time.Second, "one call runs", func() bool {
				s, err := e.c.Stats(ctx, "calls")
				return err == nil && s.Running == 1 && s.Waiting == 2
			})
			var all []statsJSON
			require.NoError(t, json.Unmarshal([]byte(e.ok(t, "stats", "-o", "json")), &all))
			got := map[string]statsJSON{}
			for _, s := range all {
				got[s.Topic] = s
			}
			require.Equal(t, int64(1), got["calls"].Running)
			require.Equal(t, int64(2), got["calls"].Waiting)
			require.Equal(t, &limitsJSON{MaxRunning: 1, Rate: 50, Per: "1s"}, got["calls"].Limits)
			require.Nil(t, got["orders"].Limits)
			out := e.ok(t, "stats")
			require.Regexp(t, `RUNNING\s+WAITING\s+LIMITS`, out)
			require.Regexp(t, `(?m)^calls\s.*\s1\s+2\s+max 1, 50/1s$`, out)
			require.Regexp(t, `(?m)^orders\s.*\s0\s+0\s+-$`, out)
		})
	}
}

// serverTime is the clock of the Redis server that holds topic "orders"'s
// keys, by TIME.
func serverTime(t *testing.T, b testutil.Backend) time.Time {
	t.Helper()
	rdb := b.New(t)
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		// The master of the topic's keys, whose clock their scripts read.
		node, err := cc.MasterForKey(context.Background(), "{orders}")
		require.NoError(t, err)
		now, err := node.Time(context.Background()).Result()
		require.NoError(t, err)
		return now
	}
	now, err := rdb.Time(context.Background()).Result()
	require.NoError(t, err)
	return now
}

// TestCLIRescheduleInCountsOnTheServersClock: reschedule --in D makes a
// job due D from now by the Redis server's clock, however far this
// machine's clock is from it (here the server's is 10 minutes ahead, on
// miniredis); a negative --in is refused and changes nothing.
func TestCLIRescheduleInCountsOnTheServersClock(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := newEnv(t, b)
			if b.Mini != nil {
				b.Mini.SetTime(time.Now().Add(10 * time.Minute))
			}
			e.ok(t, "add", "--create", "orders", "o1", "--delay", "1h")
			before := serverTime(t, b)
			e.ok(t, "reschedule", "orders", "o1", "--in", "5m")
			after := serverTime(t, b)
			j := e.job(t, "orders", "o1")
			require.Equal(t, redeq.StateScheduled, j.State)
			require.False(t, j.RunAt.Before(before.Add(5*time.Minute).Truncate(time.Millisecond)),
				"due %v, before the server's %v + 5m", j.RunAt, before)
			require.False(t, j.RunAt.After(after.Add(5*time.Minute+time.Millisecond)), "due %v, after the server's %v + 5m", j.RunAt, after)

			code, _, errs := e.run(t, "", "reschedule", "orders", "o1", "--in", "-1h")
			require.Equal(t, 2, code)
			require.Contains(t, errs, "--in -1h0m0s: want 0 or more")
			require.Equal(t, j.RunAt, e.job(t, "orders", "o1").RunAt, "a refused reschedule changes nothing")
			code, _, errs = e.run(t, "", "requeue", "dead", "orders", "--all", "--in", "-1m")
			require.Equal(t, 2, code, errs)
			require.Contains(t, errs, "--in -1m0s: want 0 or more")
		})
	}
}

func waitState(t *testing.T, c *redeq.Client, id string, want redeq.State) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		j, err := c.Get(context.Background(), "orders", id)
		if err == nil && j.State == want {
			return
		}
		require.True(t, time.Now().Before(deadline), "job %s never became %s (last: %v %v)", id, want, j, err)
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCLIExitCodes: 2 for a command line that makes no sense, 3 for a
// job or topic that is not there, 1 for other failures; nothing written.
func TestCLIExitCodes(t *testing.T) {
	e := newEnv(t, testutil.Backends(t)[0])
	e.ok(t, "add", "--create", "orders", "1", "--delay", "1h")
	for _, tc := range []struct {
		want int
		args []string
	}{
		{2, []string{"list"}},
		{2, []string{"nosuchcommand"}},
		{2, []string{"get", "orders", "1", "--nosuchflag"}},
		{2, []string{"stats", "-o", "yaml"}},
		{2, []string{"list", "orders", "bogus"}},
		{2, []string{"add", "--create", "orders", "2", "--delay", "1h", "--at", "2030-01-01T00:00:00Z"}},
		{2, []string{"add", "--create", "orders", "2", "--at", "tomorrow"}},
		{2, []string{"add", "--create", "orders", "2", "--delay", "-1h"}},
		{2, []string{"reschedule", "orders", "1"}},
		{2, []string{"requeue", "limbo", "orders", "1"}},
		{3, []string{"get", "orders", "nope"}},
		{3, []string{"delete", "orders", "nope"}},
		{3, []string{"stats", "nosuchtopic"}},
		{3, []string{"pause", "nosuchtopic"}},
		{1, []string{"add", "--create", "orders", "1"}}, // exists
	} {
		code, _, errs := e.run(t, "", tc.args...)
		require.Equal(t, tc.want, code, "redeq %v: %s", tc.args, errs)
		require.NotEmpty(t, errs, "redeq %v says why", tc.args)
	}
	_, err := e.c.Get(context.Background(), "orders", "2")
	require.ErrorIs(t, err, redeq.ErrJobNotFound, "a refused add writes nothing")

	var out, errb bytes.Buffer
	require.Equal(t, 2, run(context.Background(), []string{"topics"}, nil, &out, &errb), "no Redis given")
	require.Contains(t, errb.String(), "--redis")
	require.Equal(t, 1, run(context.Background(), []string{"--redis", "redis://127.0.0.1:1", "topics"}, nil, &out, &errb), "unreachable")
}

// TestCLIConfigFile: --config reads the connection and the prefix from the
// file redeq.Open reads.
func TestCLIConfigFile(t *testing.T) {
	e := newEnv(t, testutil.Backends(t)[0])
	e.ok(t, "add", "--create", "orders", "1", "--delay", "1h")
	path := filepath.Join(t.TempDir(), "redeq.yaml")
	require.NoError(t, os.WriteFile(path, []byte(fmt.Sprintf("prefix: %s\nredis:\n  url: %s\n", e.prefix, e.url)), 0o600))
	_, err := config.Load(path)
	require.NoError(t, err)
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"--config", path, "get", "orders", "1"}, nil, &out, &errb)
	require.Equal(t, 0, code, errb.String())
	require.Regexp(t, `(?m)^id:\s+1$`, out.String())
}

// syncBuffer is written by the command's goroutine and read by the test.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestCLIDashboard: the dashboard command serves the pages, asks for its
// token, and stops cleanly when interrupted.
func TestCLIDashboard(t *testing.T) {
	e := newEnv(t, testutil.Backends(t)[0])
	e.ok(t, "add", "--create", "orders", "1", "--delay", "1h")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncBuffer
	codec := make(chan int, 1)
	go func() {
		codec <- run(ctx, []string{"--redis", e.url, "--prefix", e.prefix, "dashboard", "--addr", "127.0.0.1:0", "--token", "tok", "--read-only"}, nil, &out, &errb)
	}()
	re := regexp.MustCompile(`dashboard on (http://\S+)`)
	var base string
	deadline := time.Now().Add(10 * time.Second)
	for base == "" {
		select {
		case code := <-codec:
			t.Fatalf("dashboard exited with %d: %s", code, errb.String())
		default:
		}
		if m := re.FindStringSubmatch(out.String()); m != nil {
			base = m[1]
		}
		require.True(t, time.Now().Before(deadline), "the dashboard never said where it listens")
		time.Sleep(10 * time.Millisecond)
	}
	resp, err := http.Get(base)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	req, _ := http.NewRequest(http.MethodGet, base, nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, string(body), `data-topic="orders"`)
	require.Contains(t, string(body), "read-only")
	http.DefaultClient.CloseIdleConnections()

	cancel()
	select {
	case code := <-codec:
		require.Equal(t, 0, code, errb.String())
	case <-time.After(10 * time.Second):
		t.Fatal("the dashboard did not stop")
	}
}

// TestCLISentinel connects through a Sentinel (--redis lists Sentinels,
// --sentinel names the master) to a master the test starts.
func TestCLISentinel(t *testing.T) {
	master := testutil.StartServer(t)
	port := testutil.FreePort(t)
	conf := filepath.Join(t.TempDir(), "sentinel.conf")
	require.NoError(t, os.WriteFile(conf, []byte(fmt.Sprintf(
		"bind 127.0.0.1\nport %d\nsentinel monitor orders-master 127.0.0.1 %d 1\n", port, master.Port)), 0o600))
	cmd := exec.Command("redis-server", conf, "--sentinel")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	sentinel := redis.NewSentinelClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = sentinel.Close() })
	require.Eventually(t, func() bool {
		a, err := sentinel.GetMasterAddrByName(context.Background(), "orders-master").Result()
		return err == nil && len(a) == 2
	}, 10*time.Second, 20*time.Millisecond, "sentinel up")

	prefix := testutil.Config(t).Prefix
	cli := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		all := append([]string{"--redis", addr, "--sentinel", "orders-master", "--prefix", prefix}, args...)
		code := run(context.Background(), all, nil, &out, &errb)
		return code, out.String(), errb.String()
	}
	code, _, errs := cli("add", "--create", "orders", "42", "--delay", "1h")
	require.Equal(t, 0, code, errs)
	code, out, errs := cli("get", "orders", "42")
	require.Equal(t, 0, code, errs)
	require.Regexp(t, `(?m)^id:\s+42$`, out)
	// The job is on the master the Sentinel named.
	direct := redis.NewClient(&redis.Options{Addr: master.Addr})
	t.Cleanup(func() { _ = direct.Close() })
	c, err := redeq.New(direct, func() config.Config { cfg := testutil.Config(t); cfg.Prefix = prefix; return cfg }())
	require.NoError(t, err)
	job, err := c.Get(context.Background(), "orders", "42")
	require.NoError(t, err)
	require.Equal(t, "42", job.ID)

	code, _, errs = cli("--cluster", "topics")
	require.Equal(t, 2, code, "--cluster with --sentinel is a usage error: %s", errs)
}

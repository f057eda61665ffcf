// Command shots regenerates the dashboard's screenshots in docs/ and
// measures the pages and a bulk action on 100,000 jobs, on a real
// redis-server of its own:
//
//	cd dashboard/browsertest && go run ./shots
//
// It starts redis-server (no persistence) on a free loopback port, seeds
// five topics as an on-call engineer meets them (one with work no
// consumer runs, retries, dead and un-acked jobs, 100,000 scheduled jobs
// of a bad import), serves the dashboard on loopback, takes the pictures
// with headless Chromium (/usr/bin/chromium, or $CHROMIUM), times the
// pages and the bulk actions, and prints the figures as a Markdown table
// for docs/operations.md. -redis ADDR uses a server of your own instead
// (database 15 of it is flushed); -docs DIR writes the pictures elsewhere.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/dashboard"
	"github.com/redeq-go/redeq/redeq"
)

var (
	addr  = flag.String("redis", "", "redis-server to use (database 15 is flushed); default: start one")
	docs  = flag.String("docs", "../../docs", "where the pictures go")
	jobs  = flag.Int("jobs", 100_000, "scheduled jobs of the bulk topic")
	quiet = flag.Bool("q", false, "no progress on standard error")
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "shots:", err)
		os.Exit(1)
	}
}

func say(f string, a ...any) {
	if !*quiet {
		fmt.Fprintf(os.Stderr, f+"\n", a...)
	}
}

func run() error {
	ctx := context.Background()
	a := *addr
	if a == "" {
		srv, err := startRedis()
		if err != nil {
			return err
		}
		defer srv.stop()
		a = srv.addr
	}
	rdb := redis.NewClient(&redis.Options{Addr: a, DB: 15})
	defer rdb.Close()
	if err := rdb.FlushDB(ctx).Err(); err != nil {
		return err
	}
	version := rdb.InfoMap(ctx, "server").Item("Server", "redis_version")
	cfg := config.Default()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := redeq.New(rdb, cfg)
	if err != nil {
		return err
	}
	if err := seed(ctx, rdb, c, cfg); err != nil {
		return err
	}
	holder, err := holdReports(ctx, rdb, c, cfg)
	if err != nil {
		return err
	}
	defer func() { _ = holder.Shutdown(context.Background()) }()

	h := dashboard.New(c, dashboard.Options{Logger: cfg.Logger})
	ts := httptest.NewServer(h)
	defer ts.Close()

	if err := pictures(ts.URL); err != nil {
		return err
	}
	rows, err := timings(ctx, rdb, c, ts.URL)
	if err != nil {
		return err
	}
	fmt.Printf("Measured by `cd dashboard/browsertest && go run ./shots` on redis-server %s (loopback, no persistence), %s:\n\n", version, time.Now().UTC().Format("2006-01-02"))
	fmt.Println("| what | time | longest Redis command |")
	fmt.Println("|---|---|---|")
	for _, r := range rows {
		fmt.Printf("| %s | %s | %s |\n", r.what, r.took, r.longest)
	}
	return nil
}

// seed writes what the pictures show: order.close, run by a worker with
// a few failures, dead and un-acked jobs; partner.callback retrying;
// reminder.send with ready work and no consumer; bulk.import with
// -jobs scheduled jobs; and a quiet topic.
func seed(ctx context.Context, rdb redis.UniversalClient, c *redeq.Client, cfg config.Config) error {
	say("seeding")
	w, err := redeq.New(rdb, cfg)
	if err != nil {
		return err
	}
	fails := map[string]int{}
	err = w.Register(redeq.ListenerFunc("order.close", func(_ context.Context, j *redeq.Job, ch *redeq.Channel) error {
		n, _ := strconv.Atoi(strings.TrimPrefix(j.ID, "order-"))
		switch {
		case n%17 == 0:
			return redeq.SkipRetry(errors.New("order not found in billing: 404"))
		case n%23 == 0:
			return nil // neither ack nor rejoin: parked in un_ack
		case n%7 == 0 && j.Attempt == 0:
			fails[j.ID]++
			return errors.New("payment service timed out")
		}
		ch.Ack()
		return nil
	}, redeq.WithRetry(3, 10*time.Millisecond)))
	if err != nil {
		return err
	}
	err = w.Register(redeq.ListenerFunc("partner.callback", func(_ context.Context, j *redeq.Job, _ *redeq.Channel) error {
		return fmt.Errorf("partner answered 503 Service Unavailable (attempt %d)", j.Attempt+1)
	}))
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	var batch []*redeq.Job
	for i := range 400 {
		batch = append(batch, &redeq.Job{Topic: "order.close", ID: fmt.Sprintf("order-%d", 1001+i), Body: fmt.Appendf(nil, `{"order":%d}`, 1001+i)})
	}
	for i := range 12 {
		batch = append(batch, &redeq.Job{Topic: "partner.callback", ID: fmt.Sprintf("cb-%d", 501+i), Body: fmt.Appendf(nil, `{"partner":"acme","call":%d}`, 501+i),
			Headers: map[string]string{"tenant": "acme"}, MaxRetries: 5,
			RetryIntervals: []time.Duration{time.Minute, 5 * time.Minute, 10 * time.Minute, 30 * time.Minute, time.Hour}})
	}
	if err := c.AddBatch(ctx, batch); err != nil {
		return err
	}
	if err := waitUntil(30*time.Second, func() bool {
		st, err := c.Stats(ctx, "order.close")
		p, err2 := c.Stats(ctx, "partner.callback")
		return err == nil && err2 == nil && st.Scheduled+st.Ready+st.InFlight == 0 && p.Scheduled == 12
	}); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	if err := w.Shutdown(ctx); err != nil {
		return err
	}
	// Later work of order.close, and the topic nobody consumes: a mover
	// (a client without listeners) makes its jobs ready, then stops.
	batch = batch[:0]
	for i := range 30 {
		batch = append(batch, &redeq.Job{Topic: "order.close", ID: fmt.Sprintf("order-%d", 2001+i), Delay: time.Duration(i+1) * time.Minute})
	}
	for i := range 4162 {
		batch = append(batch, &redeq.Job{Topic: "reminder.send", ID: fmt.Sprintf("rem-%d", i), Body: []byte(`{"meeting":"standup"}`)})
	}
	for i := range 40 {
		batch = append(batch, &redeq.Job{Topic: "invoice.email", ID: fmt.Sprintf("inv-%d", i), Delay: time.Duration(i+1) * time.Hour})
	}
	if err := c.AddBatch(ctx, batch); err != nil {
		return err
	}
	m, err := redeq.New(rdb, cfg)
	if err != nil {
		return err
	}
	if err := m.Start(ctx); err != nil {
		return err
	}
	if err := waitUntil(30*time.Second, func() bool {
		st, err := c.Stats(ctx, "reminder.send")
		return err == nil && st.Ready == 4162
	}); err != nil {
		return fmt.Errorf("mover: %w", err)
	}
	if err := m.Shutdown(ctx); err != nil {
		return err
	}
	say("seeding %d scheduled jobs of bulk.import", *jobs)
	for i := 0; i < *jobs; i += 1000 {
		batch = batch[:0]
		for k := i; k < min(*jobs, i+1000); k++ {
			batch = append(batch, &redeq.Job{Topic: "bulk.import", ID: fmt.Sprintf("imp-%06d", k), Body: []byte(`{"row":1}`), Delay: time.Hour + time.Duration(k)*time.Millisecond})
		}
		if err := c.AddBatch(ctx, batch); err != nil {
			return err
		}
	}
	return nil
}

// holdReports starts the consumer the consumers page shows: a service
// instance named reports-7f9c4 whose handlers of report.build are running
// three jobs, until it shuts down.
func holdReports(ctx context.Context, rdb redis.UniversalClient, c *redeq.Client, cfg config.Config) (*redeq.Client, error) {
	cfg.ClientName = "reports-7f9c4"
	cfg.ShutdownTimeout = 100 * time.Millisecond
	h, err := redeq.New(rdb, cfg)
	if err != nil {
		return nil, err
	}
	err = h.Register(redeq.ListenerFunc("report.build", func(ctx context.Context, _ *redeq.Job, _ *redeq.Channel) error {
		<-ctx.Done() // a long report, until the shutdown
		return ctx.Err()
	}, redeq.WithWorkers(3)))
	if err != nil {
		return nil, err
	}
	if err := h.Start(ctx); err != nil {
		return nil, err
	}
	var batch []*redeq.Job
	for i := range 3 {
		batch = append(batch, &redeq.Job{Topic: "report.build", ID: fmt.Sprintf("report-2026-11-%02d", 28+i)})
	}
	if err := c.AddBatch(ctx, batch); err != nil {
		return nil, err
	}
	if err := waitUntil(30*time.Second, func() bool {
		st, err := c.Stats(ctx, "report.build")
		return err == nil && st.InFlight == 3
	}); err != nil {
		return nil, fmt.Errorf("reports: %w", err)
	}
	return h, nil
}

// pictures takes the screenshots: the overview, the stuck topic, and a
// retrying job's page.
func pictures(base string) error {
	bin := os.Getenv("CHROMIUM")
	if bin == "" {
		bin = "/usr/bin/chromium"
	}
	dir, err := os.MkdirTemp("", "shots-chromium-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), chromedp.ExecPath(bin), chromedp.Headless, chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(dir),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1280, 1000))
	defer cancelA()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, 2*time.Minute)
	defer cancelT()
	for _, p := range []struct{ file, path, wait string }{
		{"dashboard-overview.png", "/", `#topics`},
		{"dashboard-stuck-topic.png", "/topic?t=reminder.send&state=ready", `#jobs`},
		{"dashboard-job.png", "/job?t=partner.callback&id=cb-503", `#state`},
		{"dashboard-consumers.png", "/consumers", `#consumers`},
	} {
		say("picture %s", p.file)
		if err := chromedp.Do(ctx, chromedp.Navigate(base+p.path), chromedp.WaitVisible(chromedp.CSS(p.wait))); err != nil {
			return fmt.Errorf("%s: %w", p.file, err)
		}
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		if err != nil {
			return fmt.Errorf("%s: %w", p.file, err)
		}
		if err := os.WriteFile(filepath.Join(*docs, p.file), png, 0o644); err != nil {
			return err
		}
	}
	return nil
}

type row struct{ what, took, longest string }

// timings measures the pages (median of 20 loads) and the bulk actions
// on the bulk topic's jobs, and for each the longest command the server
// ran meanwhile (its slow log, from 1 ms).
func timings(ctx context.Context, rdb *redis.Client, c *redeq.Client, base string) ([]row, error) {
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	var rows []row
	slow := func() (func() string, error) {
		if err := rdb.ConfigSet(ctx, "slowlog-log-slower-than", "1000").Err(); err != nil {
			return nil, err
		}
		if err := rdb.ConfigSet(ctx, "slowlog-max-len", "100000").Err(); err != nil {
			return nil, err
		}
		if err := rdb.Do(ctx, "SLOWLOG", "RESET").Err(); err != nil {
			return nil, err
		}
		return func() string {
			logs, err := rdb.SlowLogGet(ctx, 100000).Result()
			if err != nil || len(logs) == 0 {
				return "under 1 ms"
			}
			var longest redis.SlowLog
			for _, l := range logs {
				if l.Duration > longest.Duration {
					longest = l
				}
			}
			return fmt.Sprintf("%.1f ms (%s), %d over 1 ms", float64(longest.Duration.Microseconds())/1000, longest.Args[0], len(logs))
		}, nil
	}
	get := func(path string) (time.Duration, error) {
		var ds []time.Duration
		for range 20 {
			t0 := time.Now()
			resp, err := hc.Get(base + path)
			if err != nil {
				return 0, err
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return 0, fmt.Errorf("GET %s: %s", path, resp.Status)
			}
			ds = append(ds, time.Since(t0))
		}
		slices.Sort(ds)
		return ds[len(ds)/2], nil
	}
	for _, p := range []struct{ what, path string }{
		{"overview (5 topics)", "/"},
		{"topic page, 4,162 ready jobs, no consumer", "/topic?t=reminder.send&state=ready"},
		{fmt.Sprintf("topic page, %d scheduled jobs", *jobs), "/topic?t=bulk.import&state=scheduled"},
	} {
		longest, err := slow()
		if err != nil {
			return nil, err
		}
		d, err := get(p.path)
		if err != nil {
			return nil, err
		}
		rows = append(rows, row{p.what + ", median of 20 loads", ms(d), longest()})
	}

	// The dashboard's "Run now all matching" on the bulk topic: the
	// question (it counts them), then its confirmation (it acts).
	resp, err := hc.Get(base + "/topic?t=bulk.import&state=scheduled")
	if err != nil {
		return nil, err
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindSubmatch(page)
	if m == nil {
		return nil, errors.New("no CSRF token on the topic page")
	}
	form := url.Values{"csrf": {string(m[1])}, "t": {"bulk.import"}, "state": {"scheduled"}, "op": {"run"}}
	post := func() (string, time.Duration, error) {
		t0 := time.Now()
		resp, err := hc.PostForm(base+"/bulkall", form)
		if err != nil {
			return "", 0, err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return string(b), time.Since(t0), nil
	}
	longest, err := slow()
	if err != nil {
		return nil, err
	}
	body, d, err := post()
	if err != nil {
		return nil, err
	}
	rows = append(rows, row{fmt.Sprintf("dashboard, \"Run now all matching\": the question, counting %d scheduled jobs", *jobs), ms(d), longest()})
	for _, f := range regexp.MustCompile(`<input type="hidden" name="(sel)" value="([^"]+)">`).FindAllStringSubmatch(body, -1) {
		form.Set(f[1], f[2])
	}
	form.Set("confirm", "1")
	if longest, err = slow(); err != nil {
		return nil, err
	}
	_, d, err = post()
	if err != nil {
		return nil, err
	}
	st, err := c.Stats(ctx, "bulk.import")
	if err != nil {
		return nil, err
	}
	if st.Scheduled+st.Ready != int64(*jobs) {
		return nil, fmt.Errorf("after run now: %+v", st)
	}
	rows = append(rows, row{fmt.Sprintf("dashboard, its confirmation: %d jobs made due now", *jobs), ms(d), longest()})

	// The library, as `redeq delete bulk.import --all --state S --yes`
	// runs it: Select, then DeleteJobs in batches of MaxBulk.
	state := redeq.StateReady
	if st.Scheduled > st.Ready {
		state = redeq.StateScheduled
	}
	if longest, err = slow(); err != nil {
		return nil, err
	}
	t0 := time.Now()
	ids, err := c.Select(ctx, "bulk.import", state, redeq.Filter{}, 0)
	if err != nil {
		return nil, err
	}
	sel := time.Since(t0)
	var done int
	for i := 0; i < len(ids); i += redeq.MaxBulk {
		r, err := c.DeleteJobs(ctx, "bulk.import", state, ids[i:min(len(ids), i+redeq.MaxBulk)])
		if err != nil {
			return nil, err
		}
		done += r.Done
	}
	total := time.Since(t0)
	rows = append(rows, row{fmt.Sprintf("library, Select of %d %s jobs, then DeleteJobs of %d (%s of it in Select)", len(ids), state, done, ms(sel)), ms(total), longest()})
	return rows, nil
}

func ms(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000)
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

func waitUntil(d time.Duration, ok func() bool) error {
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not done after %v", d)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

type server struct {
	addr string
	dir  string
	cmd  *exec.Cmd
}

// startRedis starts redis-server without persistence on a free loopback
// port.
func startRedis() (*server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("no redis-server on PATH (apt-get install redis-server), or give -redis: %w", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir, err := os.MkdirTemp("", "shots-redis-")
	if err != nil {
		return nil, err
	}
	s := &server{addr: fmt.Sprintf("127.0.0.1:%d", port), dir: dir}
	s.cmd = exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", dir, "--save", "", "--appendonly", "no")
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	rdb := redis.NewClient(&redis.Options{Addr: s.addr})
	defer rdb.Close()
	if err := waitUntil(10*time.Second, func() bool { return rdb.Ping(context.Background()).Err() == nil }); err != nil {
		s.stop()
		return nil, fmt.Errorf("redis-server on %s: %w", s.addr, err)
	}
	return s, nil
}

func (s *server) stop() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	_ = os.RemoveAll(s.dir)
}

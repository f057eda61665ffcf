package browsertest

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/redeq-go/redeq/dashboard"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// backends are the deployments a browser test runs on: one cluster run
// adds nothing the pages can show.
func backends(t *testing.T) []testutil.Backend {
	var out []testutil.Backend
	for _, b := range testutil.Backends(t) {
		if b.Name != "cluster" {
			out = append(out, b)
		}
	}
	return out
}

// browser starts a headless Chromium with a fresh profile and returns a
// tab's context, closed at the end of the test.
func browser(t *testing.T) context.Context {
	t.Helper()
	bin := os.Getenv("CHROMIUM")
	if bin == "" {
		bin = "/usr/bin/chromium"
	}
	if _, err := os.Stat(bin); err != nil {
		if os.Getenv("REDEQ_REQUIRE_BROWSER") != "" {
			t.Fatalf("no Chromium at %s and REDEQ_REQUIRE_BROWSER is set: apt-get install -y chromium", bin)
		}
		t.Skipf("no Chromium at %s (apt-get install -y chromium)", bin)
	}
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		// Chromium makes its singleton socket's directory under TMPDIR
		// and leaves it when it is stopped: a directory of the test's
		// own goes with the test (a short one: a socket's path has at
		// most 107 bytes).
		chromedp.Env("TMPDIR=" + shortTempDir(t)),
		chromedp.WindowSize(1280, 720),
	}
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelB := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelB(); cancelA() })
	// The first call starts the browser, bound to ctx (no timeout on it:
	// a test's own deadline bounds it).
	require.NoError(t, chromedp.Do(ctx), "start Chromium")
	return ctx
}

// serve runs a dashboard over a fresh client of b on loopback.
func serve(t *testing.T, b testutil.Backend, opt dashboard.Options) (*redeq.Client, string) {
	t.Helper()
	c, err := redeq.New(b.New(t), testutil.Config(t))
	require.NoError(t, err)
	srv := httptest.NewServer(dashboard.New(c, opt))
	t.Cleanup(srv.Close)
	return c, srv.URL
}

func add(t *testing.T, c *redeq.Client, id, body string, delay time.Duration) {
	t.Helper()
	require.NoError(t, c.Add(context.Background(), &redeq.Job{Topic: "orders", ID: id, Body: []byte(body), Delay: delay}))
}

// TestOverviewCounts: the overview shows the counts Stats returns.
func TestOverviewCounts(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			c, base := serve(t, b, dashboard.Options{})
			for i := range 4 {
				add(t, c, fmt.Sprint("o", i), "x", time.Hour)
			}
			add(t, c, "now", "x", 0)
			st, err := c.Stats(context.Background(), "orders")
			require.NoError(t, err)

			ctx := browser(t)
			require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/")))
			scheduled := text(t, ctx, `tr[data-topic="orders"] td[data-state="scheduled"]`)
			ready := text(t, ctx, `tr[data-topic="orders"] td[data-state="ready"]`)
			dead := text(t, ctx, `tr[data-topic="orders"] td[data-state="dead"]`)
			require.Equal(t, fmt.Sprint(st.Scheduled), strings.TrimSpace(scheduled))
			require.Equal(t, fmt.Sprint(st.Ready), strings.TrimSpace(ready))
			require.Equal(t, "0", strings.TrimSpace(dead))
			require.Equal(t, int64(5), st.Scheduled+st.Ready)
		})
	}
}

// TestSearchFindsJob: typing an id in a topic page's search opens the job.
func TestSearchFindsJob(t *testing.T) {
	b := backends(t)[0]
	c, base := serve(t, b, dashboard.Options{})
	add(t, c, "needle", "hay", time.Hour)
	add(t, c, "other", "x", time.Hour)
	ctx := browser(t)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"/topic?t=orders"),
		chromedp.SendKeys(chromedp.CSS(`input[name="id"]`), "needle"),
		chromedp.Submit(chromedp.CSS(`input[name="id"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#state`)),
	))
	state, body := text(t, ctx, `#state`), text(t, ctx, `#body`)
	require.Equal(t, "scheduled", state)
	require.Equal(t, "hay", body)
}

// TestRequeueDeadThenRuns: the Requeue button of the dead list sends the
// job back, and a started client runs it.
func TestRequeueDeadThenRuns(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			c, base := serve(t, b, dashboard.Options{})
			var runs atomic.Int32
			require.NoError(t, c.Register(redeq.ListenerFunc("orders", func(_ context.Context, _ *redeq.Job, ch *redeq.Channel) error {
				if runs.Add(1) == 1 {
					return redeq.SkipRetry(errors.New("partner down"))
				}
				ch.Ack()
				return nil
			})))
			add(t, c, "call", "x", 0)
			require.NoError(t, c.Start(context.Background()))
			t.Cleanup(func() { _ = c.Shutdown(context.Background()) })
			waitFor(t, "the job to die", func() bool {
				j, err := c.Get(context.Background(), "orders", "call")
				return err == nil && j.State == redeq.StateDead
			})

			ctx := browser(t)
			require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/topic?t=orders&state=dead")))
			reason := text(t, ctx, `tr[data-id="call"] td.reason`)
			require.NoError(t, chromedp.Do(ctx,
				chromedp.Click(chromedp.CSS(`tr[data-id="call"] button[value="requeue-dead"]`)),
				chromedp.WaitVisible(chromedp.CSS(`.msg`)),
			))
			msg := text(t, ctx, `.msg`)
			require.Contains(t, reason, "partner down")
			require.Contains(t, msg, "requeued")
			waitFor(t, "the requeued job to run and be acked", func() bool {
				_, err := c.Get(context.Background(), "orders", "call")
				return errors.Is(err, redeq.ErrJobNotFound)
			})
			require.Equal(t, int32(2), runs.Load())
		})
	}
}

// TestReadOnly: a read-only dashboard shows no action, and a POST sent
// from the page itself is refused.
func TestReadOnly(t *testing.T) {
	b := backends(t)[0]
	c, base := serve(t, b, dashboard.Options{ReadOnly: true})
	add(t, c, "keep", "x", time.Hour)
	ctx := browser(t)
	// The page's own policy forbids fetch; bypassing it stands for a
	// person (or an extension) forging the request in that page.
	_, err := chromedp.Call(ctx, page.SetBypassCSP, page.SetBypassCSPParams{Enabled: true})
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"/job?t=orders&id=keep"),
		chromedp.WaitVisible(chromedp.CSS(`#state`)),
	))
	forms, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('form[method="post"]').length`))
	require.NoError(t, err)
	status, err := chromedp.Run(ctx, chromedp.Evaluate[int](
		// With a well-formed CSRF pair, so that only read-only stands
		// in the way.
		`(() => {
			const tok = 'ab'.repeat(32);
			document.cookie = 'redeq_csrf=' + tok + '; path=/';
			return fetch('/action', {method: 'POST', body: new URLSearchParams({csrf: tok, op: 'delete', t: 'orders', id: 'keep'})}).then(r => r.status);
		})()`,
		chromedp.EvalAwaitPromise))
	require.NoError(t, err)
	require.Zero(t, forms)
	require.Equal(t, 403, status)
	_, err = c.Get(context.Background(), "orders", "keep")
	require.NoError(t, err, "the job must survive")
}

// TestScriptBodyIsText: a body holding a script shows as text, and no
// dialog opens.
func TestScriptBodyIsText(t *testing.T) {
	b := backends(t)[0]
	c, base := serve(t, b, dashboard.Options{})
	const evil = `<script>alert(1)</script><img src=x onerror=alert(2)>`
	add(t, c, "evil", evil, time.Hour)
	add(t, c, "x<script>alert(3)</script>", evil, time.Hour)
	ctx := browser(t)
	var dialogs atomic.Int32
	require.NoError(t, chromedp.Listen(ctx, func(ev any) {
		if _, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			dialogs.Add(1)
		}
	}))
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/job?t=orders&id=evil")))
	body := text(t, ctx, `#body`)
	scripts, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('script, img').length`))
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"/topic?t=orders"),
		chromedp.WaitVisible(chromedp.CSS(`#jobs`)),
	))
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#jobs tr[data-id]').length`))
	require.NoError(t, err)
	require.Equal(t, 2, rows)
	require.Equal(t, evil, body)
	require.Zero(t, scripts)
	require.Zero(t, dialogs.Load())

	if path := os.Getenv("DASHBOARD_SCREENSHOT"); path != "" {
		screenshot(t, ctx, b, c, base, path)
	}
}

// screenshot saves a picture of a topic page with a few jobs, after a
// worker ran some (two failing once) so that the charts have bars.
func screenshot(t *testing.T, ctx context.Context, b testutil.Backend, c *redeq.Client, base, path string) {
	w, err := redeq.New(b.New(t), c.Config())
	require.NoError(t, err)
	var failed sync.Map
	require.NoError(t, w.Register(redeq.ListenerFunc("order.close", func(_ context.Context, j *redeq.Job, ch *redeq.Channel) error {
		if strings.HasSuffix(j.ID, "7") {
			if _, again := failed.LoadOrStore(j.ID, true); !again {
				return errors.New("payment service timed out")
			}
		}
		ch.Ack()
		return nil
	}, redeq.WithRetry(3, 10*time.Millisecond))))
	require.NoError(t, w.Start(context.Background()))
	for i := range 24 {
		require.NoError(t, c.Add(context.Background(), &redeq.Job{Topic: "order.close", ID: fmt.Sprintf("order-%d", 1001+i),
			Body: fmt.Appendf(nil, `{"order":%d}`, 1001+i)}))
	}
	waitFor(t, "the worker to run the due jobs", func() bool {
		st, err := c.Stats(context.Background(), "order.close")
		return err == nil && st.Pool == 0
	})
	require.NoError(t, w.Shutdown(context.Background()))
	for i := range 4 {
		require.NoError(t, c.Add(context.Background(), &redeq.Job{Topic: "order.close", ID: fmt.Sprintf("order-%d", 1041+i),
			Body: fmt.Appendf(nil, `{"order":%d}`, 1041+i), Delay: time.Duration(i+1) * 10 * time.Minute}))
	}
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"/topic?t=order.close"),
		chromedp.WaitVisible(chromedp.CSS(`#jobs`)),
	))
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, png, 0o644))
}

// text returns the visible text of the first element sel matches.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	require.NoError(t, err, sel)
	return s
}

// waitFor waits 20 s at most until ok holds.
func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	testutil.EventuallyEvery(t, 20*time.Second, 20*time.Millisecond, what, ok)
}

// shortTempDir is a fresh directory under the system's temporary one,
// with a name short enough for Chromium's socket paths, removed after t.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cr")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

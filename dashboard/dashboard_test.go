package dashboard_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/dashboard"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// env is a dashboard over one backend, and a browser-like client with a
// cookie jar.
type env struct {
	c   *redeq.Client
	srv *httptest.Server
	hc  *http.Client
}

func setup(t *testing.T, b testutil.Backend, opt dashboard.Options) *env {
	t.Helper()
	c, err := redeq.New(b.New(t), testutil.Config(t))
	require.NoError(t, err)
	srv := httptest.NewServer(dashboard.New(c, opt))
	t.Cleanup(srv.Close)
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	t.Cleanup(hc.CloseIdleConnections)
	return &env{c: c, srv: srv, hc: hc}
}

func (e *env) get(t *testing.T, path string) (int, string) {
	t.Helper()
	resp, err := e.hc.Get(e.srv.URL + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func (e *env) post(t *testing.T, form url.Values) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/action", strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := e.hc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]{64})"`)

// csrf loads page and returns the CSRF token its forms carry.
func (e *env) csrf(t *testing.T, page string) string {
	t.Helper()
	code, body := e.get(t, page)
	require.Equal(t, http.StatusOK, code, body)
	m := csrfRE.FindStringSubmatch(body)
	require.NotNil(t, m, "no CSRF field on %s", page)
	return m[1]
}

func add(t *testing.T, c *redeq.Client, topic, id, body string, delay time.Duration) {
	t.Helper()
	require.NoError(t, c.Add(context.Background(), &redeq.Job{Topic: topic, ID: id, Body: []byte(body), Delay: delay}))
}

func cell(t *testing.T, page, topic, state string) string {
	t.Helper()
	re := regexp.MustCompile(`<tr data-topic="` + regexp.QuoteMeta(topic) + `">(?s:.*?)data-state="` + state + `"><a [^>]*>(\d+)</a>`)
	m := re.FindStringSubmatch(page)
	require.NotNil(t, m, "no %s count for %s", state, topic)
	return m[1]
}

// TestOverviewShowsStats: the overview shows, per topic, the counts
// Stats returns and whether the topic is paused.
func TestOverviewShowsStats(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := setup(t, b, dashboard.Options{})
			ctx := context.Background()
			for i := range 3 {
				add(t, e.c, "orders", fmt.Sprint("o", i), "x", time.Hour)
			}
			add(t, e.c, "mail", "m1", "x", 0)
			require.NoError(t, e.c.Pause(ctx, "mail"))

			code, page := e.get(t, "/")
			require.Equal(t, http.StatusOK, code, page)
			st, err := e.c.Stats(ctx, "orders")
			require.NoError(t, err)
			require.Equal(t, fmt.Sprint(st.Scheduled), cell(t, page, "orders", "scheduled"))
			require.Equal(t, "3", cell(t, page, "orders", "scheduled"))
			require.Equal(t, "0", cell(t, page, "orders", "dead"))
			mail := regexp.MustCompile(`(?s)<tr data-topic="mail">.*?</tr>`).FindString(page)
			require.Contains(t, mail, "paused")
			require.Contains(t, mail, `value="resume"`)
		})
	}
}

// TestTopicPagesAndSearch: a topic page lists a state's jobs a page at a
// time, following List's cursor; the id search opens the job.
func TestTopicPagesAndSearch(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := setup(t, b, dashboard.Options{PageSize: 2})
			for i := range 5 {
				add(t, e.c, "orders", fmt.Sprint("o", i), "x", time.Duration(i+1)*time.Hour)
			}
			seen := map[string]bool{}
			next := "/topic?t=orders&state=scheduled"
			for pages := 0; next != ""; pages++ {
				require.Less(t, pages, 10, "pagination does not end")
				code, page := e.get(t, next)
				require.Equal(t, http.StatusOK, code, page)
				require.Contains(t, page, "scheduled (5)")
				for _, m := range regexp.MustCompile(`<tr data-id="([^"]+)">`).FindAllStringSubmatch(page, -1) {
					seen[m[1]] = true
				}
				next = ""
				if m := regexp.MustCompile(`<a href="([^"]+)" id="next">`).FindStringSubmatch(page); m != nil {
					next = strings.ReplaceAll(m[1], "&amp;", "&")
				}
			}
			require.Len(t, seen, 5)

			code, page := e.get(t, "/job?t=orders&id=o3")
			require.Equal(t, http.StatusOK, code)
			require.Contains(t, page, `<td id="state">scheduled</td>`)
			code, page = e.get(t, "/job?t=orders&id=nope")
			require.Equal(t, http.StatusNotFound, code)
			require.Contains(t, page, "not found")
			code, _ = e.get(t, "/topic?t=nosuchtopic")
			require.Equal(t, http.StatusNotFound, code)
			code, _ = e.get(t, "/topic?t=orders&state=bogus")
			require.Equal(t, http.StatusBadRequest, code)
		})
	}
}

// TestTopicPageShowsLimits: the page of a topic with global limits shows
// them, the jobs holding their slots and those waiting for one; a topic
// without limits shows no such line.
func TestTopicPageShowsLimits(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := setup(t, b, dashboard.Options{})
			ctx := context.Background()
			for i := range 3 {
				add(t, e.c, "calls", fmt.Sprint("c", i), "x", 0)
			}
			add(t, e.c, "orders", "o", "x", time.Hour)
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
			}, redeq.WithMaxRunning(1), redeq.WithLimitKey("partner"))))
			require.NoError(t, w.Start(ctx))
			t.Cleanup(func() { _ = w.Shutdown(context.Background()) })
			t.Cleanup(func() { close(hold) }) // before the Shutdown: the handler ends
			testutil.Eventually(t, 10*time.Second, "one call runs, two wait", func() bool {
				s, err := e.c.Stats(ctx, "calls")
				return err == nil && s.Running == 1 && s.Waiting == 2
			})
			code, page := e.get(t, "/topic?t=calls")
			require.Equal(t, http.StatusOK, code, page)
			require.Contains(t, page, `<p id="limits">Global limits: at most <strong>1</strong> running, per value of header <code>partner</code>.`)
			require.Contains(t, page, `<span class="running">1 running</span>, <span class="waiting">2 waiting for a slot</span>`)
			_, page = e.get(t, "/topic?t=orders")
			require.NotContains(t, page, `id="limits"`)
		})
	}
}

// TestBodiesAreEscaped: a body, an id and a header are shown as text,
// never as markup; a binary body is shown in hex.
func TestBodiesAreEscaped(t *testing.T) {
	b := testutil.Backends(t)[0]
	e := setup(t, b, dashboard.Options{})
	const evil = `<script>alert(1)</script>`
	require.NoError(t, e.c.Add(context.Background(), &redeq.Job{Topic: "t", ID: `a"><b>id`, Body: []byte(evil),
		Headers: map[string]string{"trace": evil}, Delay: time.Hour}))
	add(t, e.c, "t", "bin", "\x00\x01\xffhi", time.Hour)

	code, page := e.get(t, "/job?t=t&id="+url.QueryEscape(`a"><b>id`))
	require.Equal(t, http.StatusOK, code, page)
	require.NotContains(t, page, "<script>")
	require.NotContains(t, page, `<b>id`)
	require.Contains(t, page, `<pre id="body">&lt;script&gt;alert(1)&lt;/script&gt;</pre>`)

	_, page = e.get(t, "/topic?t=t")
	require.NotContains(t, page, "<script>")
	require.NotContains(t, page, `<b>id`)

	_, page = e.get(t, "/job?t=t&id=bin")
	require.Contains(t, page, "hex")
	require.Contains(t, page, "00 01 ff 68 69")
}

// TestActions: delete, run now, requeue from un_ack and dead, pause and
// resume, each through the form a person submits.
func TestActions(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := setup(t, b, dashboard.Options{})
			ctx := context.Background()
			add(t, e.c, "orders", "del", "x", time.Hour)
			add(t, e.c, "orders", "later", "x", time.Hour)
			add(t, e.c, "orders", "park", "x", 0)
			add(t, e.c, "orders", "fail", "x", 0)
			tok := e.csrf(t, "/topic?t=orders")

			act := func(op, id string) {
				t.Helper()
				code, body := e.post(t, url.Values{"csrf": {tok}, "op": {op}, "t": {"orders"}, "id": {id}, "confirm": {"1"}})
				require.Equal(t, http.StatusSeeOther, code, body)
			}
			act("delete", "del")
			_, err := e.c.Get(ctx, "orders", "del")
			require.ErrorIs(t, err, redeq.ErrJobNotFound)

			act("run", "later")
			j, err := e.c.Get(ctx, "orders", "later")
			require.NoError(t, err)
			require.WithinDuration(t, time.Now(), j.RunAt, time.Minute)

			// A worker parks "park" in un_ack and kills "fail".
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

			code, page := e.get(t, "/topic?t=orders&state=dead")
			require.Equal(t, http.StatusOK, code)
			require.Contains(t, page, "boom")
			act("requeue-dead", "fail")
			act("requeue-unack", "park")
			for _, id := range []string{"fail", "park"} {
				j, err := e.c.Get(ctx, "orders", id)
				require.NoError(t, err)
				require.Contains(t, []redeq.State{redeq.StateScheduled, redeq.StateReady}, j.State, id)
			}

			act("pause", "")
			st, err := e.c.Stats(ctx, "orders")
			require.NoError(t, err)
			require.True(t, st.Paused)
			act("resume", "")
			st, err = e.c.Stats(ctx, "orders")
			require.NoError(t, err)
			require.False(t, st.Paused)

			// A requeue of a job that is not dead says so.
			code, _ = e.post(t, url.Values{"csrf": {tok}, "op": {"requeue-dead"}, "t": {"orders"}, "id": {"later"}})
			require.Equal(t, http.StatusConflict, code)
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

// TestReadOnlyRefusesActions: read-only is enforced on the server: a
// direct POST is refused and changes nothing, and no button is shown.
// TestRunNowCountsOnTheServersClock: "Run now" makes a job due now by the
// Redis server's clock, not the dashboard's (here, on miniredis, the
// server's is 10 minutes behind: a due time by the dashboard's clock would
// hold the job back 10 minutes).
func TestRunNowCountsOnTheServersClock(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := setup(t, b, dashboard.Options{})
			ctx := context.Background()
			if b.Mini != nil {
				b.Mini.SetTime(time.Now().Add(-10 * time.Minute))
			}
			add(t, e.c, "orders", "later", "x", time.Hour)
			tok := e.csrf(t, "/topic?t=orders")
			code, body := e.post(t, url.Values{"csrf": {tok}, "op": {"run"}, "t": {"orders"}, "id": {"later"}})
			require.Equal(t, http.StatusSeeOther, code, body)
			now := serverTime(t, b)
			j, err := e.c.Get(ctx, "orders", "later")
			require.NoError(t, err)
			require.Equal(t, redeq.StateScheduled, j.State, "no mover runs here")
			// Due times are whole ms, rounded up.
			require.False(t, j.RunAt.After(now.Add(time.Millisecond)), "due %v, after the server's now %v", j.RunAt, now)
		})
	}
}

// serverTime is the clock of the Redis server that holds topic "orders"'s
// keys, by TIME.
func serverTime(t *testing.T, b testutil.Backend) time.Time {
	t.Helper()
	rdb := b.New(t)
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		node, err := cc.MasterForKey(context.Background(), "{orders}")
		require.NoError(t, err)
		rdb = node
	}
	now, err := rdb.Time(context.Background()).Result()
	require.NoError(t, err)
	return now
}

func TestReadOnlyRefusesActions(t *testing.T) {
	e := setup(t, testutil.Backends(t)[0], dashboard.Options{ReadOnly: true})
	add(t, e.c, "orders", "1", "x", time.Hour)
	code, page := e.get(t, "/job?t=orders&id=1")
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, page, "<form class=\"inline\" method=\"post\"")
	require.Contains(t, page, "read-only")
	// Even with a well-formed CSRF pair, as a forged page could not have
	// but a script with the cookie could.
	tok := strings.Repeat("ab", 32)
	u, _ := url.Parse(e.srv.URL)
	e.hc.Jar.SetCookies(u, []*http.Cookie{{Name: "redeq_csrf", Value: tok, Path: "/"}})
	code, _ = e.post(t, url.Values{"csrf": {tok}, "op": {"delete"}, "t": {"orders"}, "id": {"1"}})
	require.Equal(t, http.StatusForbidden, code)
	_, err := e.c.Get(context.Background(), "orders", "1")
	require.NoError(t, err, "the job must survive")
}

// TestActionsNeedCSRFToken: an action without the session's token, with
// another token, or from another origin is refused and changes nothing.
func TestActionsNeedCSRFToken(t *testing.T) {
	e := setup(t, testutil.Backends(t)[0], dashboard.Options{})
	add(t, e.c, "orders", "1", "x", time.Hour)
	tok := e.csrf(t, "/topic?t=orders")
	form := url.Values{"op": {"delete"}, "t": {"orders"}, "id": {"1"}, "confirm": {"1"}}
	code, _ := e.post(t, form)
	require.Equal(t, http.StatusForbidden, code, "no token")
	form.Set("csrf", strings.Repeat("0", 64))
	code, _ = e.post(t, form)
	require.Equal(t, http.StatusForbidden, code, "wrong token")

	form.Set("csrf", tok)
	req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/action", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err := e.hc.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "cross-site")

	_, err = e.c.Get(context.Background(), "orders", "1")
	require.NoError(t, err, "the job must survive")
	code, _ = e.post(t, form)
	require.Equal(t, http.StatusSeeOther, code, "the right token")
}

// TestAuth: with a token or basic credentials set, a request without them
// or with wrong ones gets 401; the right ones get in.
func TestAuth(t *testing.T) {
	b := testutil.Backends(t)[0]
	t.Run("token", func(t *testing.T) {
		e := setup(t, b, dashboard.Options{Token: "s3cret"})
		code, _ := e.get(t, "/")
		require.Equal(t, http.StatusUnauthorized, code)
		code, _ = e.get(t, "/?token=wrong")
		require.Equal(t, http.StatusUnauthorized, code)
		code, _ = e.post(t, url.Values{"op": {"pause"}, "t": {"x"}})
		require.Equal(t, http.StatusUnauthorized, code)

		req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/", nil)
		req.Header.Set("Authorization", "Bearer s3cret")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, "bearer")

		// ?token= sets a cookie and leaves the token out of the address.
		code, _ = e.get(t, "/?token=s3cret")
		require.Equal(t, http.StatusSeeOther, code)
		code, _ = e.get(t, "/")
		require.Equal(t, http.StatusOK, code, "cookie")
	})
	t.Run("basic", func(t *testing.T) {
		e := setup(t, b, dashboard.Options{Username: "ops", Password: "pw"})
		code, _ := e.get(t, "/")
		require.Equal(t, http.StatusUnauthorized, code)
		for _, pw := range []string{"wrong", "pw"} {
			req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/", nil)
			req.SetBasicAuth("ops", pw)
			resp, err := e.hc.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			want := map[string]int{"wrong": http.StatusUnauthorized, "pw": http.StatusOK}[pw]
			require.Equal(t, want, resp.StatusCode, pw)
		}
	})
}

// TestMountedUnderPath: with Path set, links and assets stay under it.
func TestMountedUnderPath(t *testing.T) {
	b := testutil.Backends(t)[0]
	c, err := redeq.New(b.New(t), testutil.Config(t))
	require.NoError(t, err)
	add(t, c, "orders", "1", "x", time.Hour)
	mux := http.NewServeMux()
	mux.Handle("/ops/queues/", dashboard.New(c, dashboard.Options{Path: "/ops/queues"}))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	for path, want := range map[string]string{
		"/ops/queues/":                 `href="/ops/queues/topic?t=orders"`,
		"/ops/queues/static/style.css": "font:",
	} {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		require.Contains(t, string(body), want, path)
	}
}

package dashboard_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/dashboard"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

func row(page, topic string) string {
	return regexp.MustCompile(`(?s)<tr data-topic="` + regexp.QuoteMeta(topic) + `">.*?</tr>`).FindString(page)
}

// TestUnattendedTopicIsFlaggedWithItsOverdue: a topic with a job past its
// due time and no consumer shows how overdue it is and the "no consumer"
// flag, not "running", on the overview and its own page; a topic whose
// jobs are not due shows neither.
func TestUnattendedTopicIsFlaggedWithItsOverdue(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := setup(t, b, dashboard.Options{})
			ctx := context.Background()
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "stuck", ID: "s1", Body: []byte("x"), RunAt: time.Now().Add(-10 * time.Minute)}))
			add(t, e.c, "later", "l1", "x", time.Hour)

			code, page := e.get(t, "/")
			require.Equal(t, http.StatusOK, code, page)
			stuck := row(page, "stuck")
			require.Contains(t, stuck, "no consumer: nothing runs these jobs")
			require.NotContains(t, stuck, "running")
			m := regexp.MustCompile(`data-overdue="(\d+)"`).FindStringSubmatch(stuck)
			require.NotNil(t, m, stuck)
			var ms int64
			fmt.Sscan(m[1], &ms)
			require.GreaterOrEqual(t, ms, int64(9*time.Minute/time.Millisecond), "overdue by the due time, on the server's clock")
			later := row(page, "later")
			require.NotContains(t, later, "no consumer")
			require.Contains(t, later, "running")
			require.Contains(t, later, `data-overdue="0"`)

			code, page = e.get(t, "/topic?t=stuck")
			require.Equal(t, http.StatusOK, code, page)
			require.Contains(t, page, `data-flag="no-consumer"`)
			require.Contains(t, page, "Oldest overdue: due <strong>")
			code, page = e.get(t, "/topic?t=later")
			require.Equal(t, http.StatusOK, code, page)
			require.NotContains(t, page, `data-flag="no-consumer"`)
			require.Contains(t, page, "No job waits past its due time.")
		})
	}
}

// TestOverviewSearchesAndSorts: ?q= keeps the topics whose name holds the
// text (any case), and ?sort= orders them by name or with the most
// ready, dead or overdue first; a search that matches nothing says so.
func TestOverviewSearchesAndSorts(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := setup(t, b, dashboard.Options{})
			ctx := context.Background()
			add(t, e.c, "tenant1", "a", "x", time.Hour)
			for i := range 3 {
				require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "tenant10", ID: fmt.Sprint("b", i), Body: []byte("x"), RunAt: time.Now().Add(-time.Duration(i+1) * time.Minute)}))
			}
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "tenant100", ID: "c", Body: []byte("x"), RunAt: time.Now().Add(-time.Hour)}))
			add(t, e.c, "mail", "m", "x", time.Hour)

			order := func(page string) []string {
				var out []string
				for _, m := range regexp.MustCompile(`<tr data-topic="([^"]+)">`).FindAllStringSubmatch(page, -1) {
					out = append(out, m[1])
				}
				return out
			}
			code, page := e.get(t, "/?q=TENANT")
			require.Equal(t, http.StatusOK, code, page)
			require.Equal(t, []string{"tenant1", "tenant10", "tenant100"}, order(page))
			require.Contains(t, page, "3 of 4 topics.")
			_, page = e.get(t, "/?q=tenant&sort=overdue")
			require.Equal(t, []string{"tenant100", "tenant10", "tenant1"}, order(page))
			_, page = e.get(t, "/?sort=name")
			require.Equal(t, []string{"mail", "tenant1", "tenant10", "tenant100"}, order(page))
			_, page = e.get(t, "/?q="+url.QueryEscape("<b>nope"))
			require.Contains(t, page, "No topic matches “&lt;b&gt;nope”.")
			require.Empty(t, order(page))
			code, _ = e.get(t, "/?q="+strings.Repeat("x", dashboard.MaxQuery+1))
			require.Equal(t, http.StatusBadRequest, code)
		})
	}
}

// TestAutoRefreshIsOnlyWhenAsked: a page refreshes itself only with
// ?refresh=N (bounded), through a meta tag, and links to turn it off and
// on; the links of the page keep it on.
func TestAutoRefreshIsOnlyWhenAsked(t *testing.T) {
	e := setup(t, testutil.Backends(t)[0], dashboard.Options{})
	add(t, e.c, "orders", "o1", "x", time.Hour)
	_, page := e.get(t, "/")
	require.NotContains(t, page, `http-equiv="refresh"`)
	require.Contains(t, page, `id="refresh-on" href="/?refresh=10"`)
	_, page = e.get(t, "/?refresh=30&q=ord")
	require.Contains(t, page, `<meta http-equiv="refresh" content="30">`)
	require.Contains(t, page, `id="refresh-off" href="/?q=ord"`)
	_, page = e.get(t, "/?refresh=999999999999999999999")
	require.Contains(t, page, fmt.Sprintf(`content="%d"`, dashboard.MaxRefresh))
	for _, bad := range []string{"0", "-5", "x"} {
		_, page = e.get(t, "/?refresh="+bad)
		require.NotContains(t, page, `http-equiv="refresh"`, bad)
	}
	_, page = e.get(t, "/topic?t=orders&refresh=15")
	require.Contains(t, page, `content="15"`)
	require.Contains(t, page, `topic?refresh=15&amp;state=ready`)
}

// syncBuf is a log sink the handler and the test share.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestDestructiveActionsAskFirstAndAreAudited: delete, pause and resume
// show a confirmation and change nothing until it is confirmed; each
// action taken logs who took it, what, on which topic, how many jobs and
// the result; the result shown comes from the server's record, never
// from the address.
func TestDestructiveActionsAskFirstAndAreAudited(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			var log syncBuf
			e := setup(t, b, dashboard.Options{Username: "alice", Password: "pw", Logger: slog.New(slog.NewTextHandler(&log, nil))})
			e.hc.Transport = basicAuth{"alice", "pw"}
			ctx := context.Background()
			add(t, e.c, "orders", "o1", "x", time.Hour)
			tok := e.csrf(t, "/topic?t=orders")

			for _, op := range []string{"delete", "pause"} {
				code, page := e.post(t, url.Values{"csrf": {tok}, "op": {op}, "t": {"orders"}, "id": {"o1"}})
				require.Equal(t, http.StatusOK, code, page)
				require.Contains(t, page, `id="question"`)
				require.Contains(t, page, `name="confirm" value="1"`)
			}
			st, err := e.c.Stats(ctx, "orders")
			require.NoError(t, err)
			require.False(t, st.Paused, "nothing happens before the confirmation")
			require.EqualValues(t, 1, st.Pool)
			require.NotContains(t, log.String(), "dashboard: action")

			code, _ := e.post(t, url.Values{"csrf": {tok}, "op": {"pause"}, "t": {"orders"}, "confirm": {"1"}})
			require.Equal(t, http.StatusSeeOther, code)
			st, err = e.c.Stats(ctx, "orders")
			require.NoError(t, err)
			require.True(t, st.Paused)
			_, page := e.get(t, "/topic?t=orders")
			require.Contains(t, page, "Topic orders paused")
			_, page = e.get(t, "/topic?t=orders")
			require.NotContains(t, page, "Topic orders paused", "a result shows once")

			code, _ = e.post(t, url.Values{"csrf": {tok}, "op": {"delete"}, "t": {"orders"}, "id": {"o1"}, "confirm": {"1"}})
			require.Equal(t, http.StatusSeeOther, code)
			_, err = e.c.Get(ctx, "orders", "o1")
			require.ErrorIs(t, err, redeq.ErrJobNotFound)
			code, _ = e.post(t, url.Values{"csrf": {tok}, "op": {"delete"}, "t": {"orders"}, "id": {"o1"}, "confirm": {"1"}})
			require.Equal(t, http.StatusNotFound, code)

			lines := log.String()
			require.Contains(t, lines, `msg="dashboard: action" who=alice`)
			require.Regexp(t, `action=pause topic=orders jobs=0 result=ok`, lines)
			require.Regexp(t, `action=delete topic=orders jobs=1 result=ok job=o1`, lines)
			require.Regexp(t, `action=delete topic=orders jobs=0 result="error: .*job not found`, lines)

			for _, forged := range []string{"/topic?t=orders&state=dead&done=purged&n=250000", "/?done=purged&n=250000"} {
				_, page = e.get(t, forged)
				require.NotContains(t, page, `role="status"`, forged)
				require.NotContains(t, page, "dead jobs purged", forged)
			}
			// A flash cookie this handler did not sign shows nothing.
			req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/", nil)
			req.AddCookie(&http.Cookie{Name: "redeq_flash", Value: "MjUwMDAwIGRlYWQgam9icyBwdXJnZWQu.AAAA"})
			resp, err := (&http.Client{Transport: basicAuth{"alice", "pw"}}).Do(req)
			require.NoError(t, err)
			var body bytes.Buffer
			_, _ = body.ReadFrom(resp.Body)
			resp.Body.Close()
			require.NotContains(t, body.String(), `role="status"`)
		})
	}
}

type basicAuth struct{ user, pass string }

func (a basicAuth) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.SetBasicAuth(a.user, a.pass)
	return http.DefaultTransport.RoundTrip(r)
}

package dashboard_test

import (
	"context"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/dashboard"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

func (e *env) postTo(t *testing.T, path string, form url.Values) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+path, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := e.hc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// work runs a worker over topic "orders" until every job named is in the
// state its handler sends it to: ids starting with "d" die, "u" are
// parked, the others are acked.
func work(t *testing.T, b testutil.Backend, c *redeq.Client, ids ...string) {
	t.Helper()
	ctx := context.Background()
	w, err := redeq.New(b.New(t), c.Config())
	require.NoError(t, err)
	require.NoError(t, w.Register(redeq.ListenerFunc("orders", func(_ context.Context, j *redeq.Job, ch *redeq.Channel) error {
		switch j.ID[0] {
		case 'd':
			return redeq.SkipRetry(errors.New("boom"))
		case 'u':
			return nil
		}
		ch.Ack()
		return nil
	})))
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { _ = w.Shutdown(context.Background()) })
	deadline := time.Now().Add(20 * time.Second)
	for _, id := range ids {
		for {
			j, err := c.Get(ctx, "orders", id)
			if (id[0] == 'd' && err == nil && j.State == redeq.StateDead) ||
				(id[0] == 'u' && err == nil && j.State == redeq.StateUnAck) ||
				(id[0] != 'd' && id[0] != 'u' && errors.Is(err, redeq.ErrJobNotFound)) {
				break
			}
			require.True(t, time.Now().Before(deadline), "job %s never settled (last: %v %v)", id, j, err)
			time.Sleep(10 * time.Millisecond)
		}
	}
	require.NoError(t, w.Shutdown(ctx))
}

func state(t *testing.T, c *redeq.Client, id string) redeq.State {
	t.Helper()
	j, err := c.Get(context.Background(), "orders", id)
	if errors.Is(err, redeq.ErrJobNotFound) {
		return "gone"
	}
	require.NoError(t, err)
	return j.State
}

// TestBulkActionsAskFirst: jobs selected on a list are listed on a
// confirmation page, which changes nothing; its POST requeues or deletes
// exactly those; a request naming too many jobs, jobs in flight, or an
// action the state does not offer, is refused.
func TestBulkActionsAskFirst(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := setup(t, b, dashboard.Options{})
			for _, id := range []string{"d1", "d2", "d3", "u1", "u2"} {
				add(t, e.c, "orders", id, "x", 0)
			}
			work(t, b, e.c, "d1", "d2", "d3", "u1", "u2")

			code, page := e.get(t, "/topic?t=orders&state=dead")
			require.Equal(t, http.StatusOK, code)
			require.Contains(t, page, `<input type="checkbox" name="id" value="d1" form="bulk"`)
			require.Contains(t, page, `id="bulk"`)
			tok := e.csrf(t, "/topic?t=orders&state=dead")

			form := url.Values{"csrf": {tok}, "t": {"orders"}, "state": {"dead"}, "op": {"requeue"}, "id": {"d1", "d2"}}
			code, page = e.postTo(t, "/bulk", form)
			require.Equal(t, http.StatusOK, code, page)
			list := regexp.MustCompile(`(?s)<ul id="confirm-ids">.*?</ul>`).FindString(page)
			require.Contains(t, list, "d1")
			require.Contains(t, list, "d2")
			require.NotContains(t, list, "d3")
			require.Contains(t, page, `name="confirm" value="1"`)
			for _, id := range []string{"d1", "d2", "d3"} {
				require.Equal(t, redeq.StateDead, state(t, e.c, id), "nothing happens before the confirmation")
			}

			form.Set("confirm", "1")
			code, page = e.postTo(t, "/bulk", form)
			require.Equal(t, http.StatusSeeOther, code, page)
			for _, id := range []string{"d1", "d2"} {
				require.Contains(t, []redeq.State{redeq.StateScheduled, redeq.StateReady}, state(t, e.c, id), id)
			}
			require.Equal(t, redeq.StateDead, state(t, e.c, "d3"))

			form = url.Values{"csrf": {tok}, "t": {"orders"}, "state": {"unack"}, "op": {"delete"}, "id": {"u1"}, "confirm": {"1"}}
			code, _ = e.postTo(t, "/bulk", form)
			require.Equal(t, http.StatusSeeOther, code)
			require.Equal(t, redeq.State("gone"), state(t, e.c, "u1"))
			require.Equal(t, redeq.StateUnAck, state(t, e.c, "u2"))

			var many []string
			for i := range dashboard.MaxBulk + 1 {
				many = append(many, fmt.Sprint("x", i))
			}
			code, _ = e.postTo(t, "/bulk", url.Values{"csrf": {tok}, "t": {"orders"}, "state": {"dead"}, "op": {"delete"}, "id": many, "confirm": {"1"}})
			require.Equal(t, http.StatusBadRequest, code, "too many")
			code, _ = e.postTo(t, "/bulk", url.Values{"csrf": {tok}, "t": {"orders"}, "state": {"inflight"}, "op": {"delete"}, "id": {"d1"}, "confirm": {"1"}})
			require.Equal(t, http.StatusBadRequest, code, "jobs in flight belong to their consumer")
			code, _ = e.postTo(t, "/bulk", url.Values{"csrf": {tok}, "t": {"orders"}, "state": {"ready"}, "op": {"run"}, "id": {"d1"}, "confirm": {"1"}})
			require.Equal(t, http.StatusBadRequest, code, "ready jobs are due already")
			require.NotEqual(t, redeq.State("gone"), state(t, e.c, "d1"))
		})
	}
}

var hiddenRE = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)

// hiddenFields is what a browser posts of a page's forms: every hidden
// field (the ids and marks a confirmation names among them).
func hiddenFields(page string) url.Values {
	form := url.Values{}
	for _, m := range hiddenRE.FindAllStringSubmatch(page, -1) {
		form.Add(html.UnescapeString(m[1]), html.UnescapeString(m[2]))
	}
	return form
}

// TestPurgeDeadAsksFirst: the purge button leads to a confirmation page
// that names the dead jobs, and changes nothing; its POST removes exactly
// those, and the jobs that died while the page was open stay dead.
func TestPurgeDeadAsksFirst(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := setup(t, b, dashboard.Options{})
			for _, id := range []string{"d1", "d2", "d3"} {
				add(t, e.c, "orders", id, "x", 0)
			}
			add(t, e.c, "orders", "later", "x", time.Hour)
			work(t, b, e.c, "d1", "d2", "d3")
			code, page := e.get(t, "/topic?t=orders&state=dead")
			require.Equal(t, http.StatusOK, code)
			require.Contains(t, page, `id="purge"`)
			tok := e.csrf(t, "/topic?t=orders&state=dead")

			code, page = e.postTo(t, "/purge", url.Values{"csrf": {tok}, "t": {"orders"}})
			require.Equal(t, http.StatusOK, code, page)
			require.Contains(t, page, "Remove these 3 dead jobs of topic orders, for good? Jobs that die after this question stay.")
			list := regexp.MustCompile(`(?s)<ul id="confirm-ids">.*?</ul>`).FindString(page)
			for _, id := range []string{"d1", "d2", "d3"} {
				require.Contains(t, list, id)
			}
			form := hiddenFields(page)
			require.ElementsMatch(t, []string{"d1", "d2", "d3"}, form["id"], "the confirmation's form names the jobs")
			st, err := e.c.Stats(context.Background(), "orders")
			require.NoError(t, err)
			require.EqualValues(t, 3, st.Dead, "nothing happens before the confirmation")

			add(t, e.c, "orders", "d4", "x", 0)
			add(t, e.c, "orders", "d5", "x", 0)
			work(t, b, e.c, "d4", "d5") // die while the page is open
			form.Set("csrf", tok)
			form.Set("t", "orders")
			form.Set("confirm", "1")
			req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/purge", strings.NewReader(form.Encode()))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			resp, err := e.hc.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusSeeOther, resp.StatusCode)
			code, page = e.get(t, resp.Header.Get("Location"))
			require.Equal(t, http.StatusOK, code)
			require.Contains(t, page, "3 dead jobs purged.", "the result comes from the server's record")
			for _, id := range []string{"d1", "d2", "d3"} {
				require.Equal(t, redeq.State("gone"), state(t, e.c, id), id)
			}
			for _, id := range []string{"d4", "d5"} {
				require.Equal(t, redeq.StateDead, state(t, e.c, id), "%s died after the question", id)
			}
			require.Equal(t, redeq.StateScheduled, state(t, e.c, "later"), "the scheduled job stays")

			code, _ = e.postTo(t, "/purge", url.Values{"csrf": {tok}, "t": {"orders"}, "confirm": {"1"}})
			require.Equal(t, http.StatusBadRequest, code, "a purge names its jobs")
			require.Equal(t, redeq.StateDead, state(t, e.c, "d4"))
		})
	}
}

// TestPurgeSparesJobsThatDiedAfterTheConfirmation: the purge removes the
// dead jobs its confirmation named, not a job of a named id that died
// again after the page was shown: one deleted and added again, or one
// requeued, stays dead (the page carries each job's mark).
func TestPurgeSparesJobsThatDiedAfterTheConfirmation(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		for _, how := range []string{"readded", "requeued"} {
			t.Run(b.Name+"/"+how, func(t *testing.T) {
				e := setup(t, b, dashboard.Options{})
				ctx := context.Background()
				add(t, e.c, "orders", "d1", "x", 0)
				add(t, e.c, "orders", "d2", "x", 0)
				work(t, b, e.c, "d1", "d2")
				tok := e.csrf(t, "/topic?t=orders&state=dead")
				code, page := e.postTo(t, "/purge", url.Values{"csrf": {tok}, "t": {"orders"}})
				require.Equal(t, http.StatusOK, code, page)
				form := hiddenFields(page)
				require.ElementsMatch(t, []string{"d1", "d2"}, form["id"])

				// d1 dies again while the page is open.
				if how == "readded" {
					_, err := e.c.Delete(ctx, "orders", "d1")
					require.NoError(t, err)
					time.Sleep(5 * time.Millisecond)
					add(t, e.c, "orders", "d1", "x", 0)
				} else {
					require.NoError(t, e.c.RequeueDead(ctx, "orders", "d1", 0))
				}
				work(t, b, e.c, "d1")

				code, _ = e.postTo(t, "/purge", form)
				require.Equal(t, http.StatusSeeOther, code)
				_, page = e.get(t, "/topic?t=orders&state=dead")
				require.Contains(t, page, "1 dead jobs purged; 1 left (added or parked again since listed).")
				require.Equal(t, redeq.State("gone"), state(t, e.c, "d2"), "d2 was named")
				require.Equal(t, redeq.StateDead, state(t, e.c, "d1"), "d1 died again after the confirmation (%s): it stays", how)
			})
		}
	}
}

// TestBulkActionsSpareJobsParkedAgainAfterTheList: requeuing dead jobs
// ticked on the list, or all the matching ones after the question, acts
// on the jobs the page listed: a job of a listed id that was requeued and
// died again while the page was open stays dead, and the outcome counts
// it as left.
func TestBulkActionsSpareJobsParkedAgainAfterTheList(t *testing.T) {
	rowMarkRE := regexp.MustCompile(`<input type="hidden" name="mark" value="([^"]+)" form="bulk">`)
	for _, b := range testutil.Backends(t) {
		for _, how := range []string{"ticked", "allmatching"} {
			t.Run(b.Name+"/"+how, func(t *testing.T) {
				e := setup(t, b, dashboard.Options{})
				ctx := context.Background()
				add(t, e.c, "orders", "d1", "x", 0)
				add(t, e.c, "orders", "d2", "x", 0)
				work(t, b, e.c, "d1", "d2")
				code, page := e.get(t, "/topic?t=orders&state=dead")
				require.Equal(t, http.StatusOK, code)
				tok := e.csrf(t, "/topic?t=orders&state=dead")
				path := "/bulk"
				form := url.Values{"csrf": {tok}, "t": {"orders"}, "state": {"dead"}, "op": {"requeue"}}
				if how == "ticked" {
					form["id"] = []string{"d1", "d2"}
					for _, m := range rowMarkRE.FindAllStringSubmatch(page, -1) {
						form.Add("mark", html.UnescapeString(m[1]))
					}
					require.Len(t, form["mark"], 2, "each dead row carries its mark")
				} else {
					path = "/bulkall"
				}
				code, page = e.postTo(t, path, form)
				require.Equal(t, http.StatusOK, code, page)
				answer := hiddenFields(page)

				// d1 is requeued and dies again while the question is open.
				old, err := e.c.Get(ctx, "orders", "d1")
				require.NoError(t, err)
				require.NoError(t, e.c.RequeueDead(ctx, "orders", "d1", 0))
				work(t, b, e.c, "d1")
				j, err := e.c.Get(ctx, "orders", "d1")
				require.NoError(t, err)
				require.NotEqual(t, old.Mark(), j.Mark(), "parked again at another time")

				code, page = e.postTo(t, path, answer)
				require.Equal(t, http.StatusSeeOther, code, page)
				require.Contains(t, []redeq.State{redeq.StateScheduled, redeq.StateReady}, state(t, e.c, "d2"), "d2 was listed")
				require.Equal(t, redeq.StateDead, state(t, e.c, "d1"), "d1 died again after the list was shown: it stays")
				_, page = e.get(t, "/topic?t=orders&state=dead")
				require.Contains(t, page, "1 jobs requeued, due now; 1 left (added or parked again since listed).")
			})
		}
	}
}

// TestPurgeOfALargeDeadSetNamesAtMostMaxPurge: over MaxPurge dead jobs, the
// confirmation names MaxPurge of them and says how many are dead; its
// POST removes those, and the rest stay for another purge.
func TestPurgeOfALargeDeadSetNamesAtMostMaxPurge(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := setup(t, b, dashboard.Options{})
			ctx := context.Background()
			var jobs []*redeq.Job
			var ids []string
			for i := range dashboard.MaxPurge + 5 {
				ids = append(ids, fmt.Sprint("d", i))
				jobs = append(jobs, &redeq.Job{Topic: "orders", ID: ids[i]})
			}
			require.NoError(t, e.c.AddBatch(ctx, jobs))
			work(t, b, e.c, ids...)
			tok := e.csrf(t, "/topic?t=orders&state=dead")
			code, page := e.postTo(t, "/purge", url.Values{"csrf": {tok}, "t": {"orders"}})
			require.Equal(t, http.StatusOK, code, page)
			require.Contains(t, page, fmt.Sprintf("Remove these %d of the %d dead jobs of topic orders", dashboard.MaxPurge, dashboard.MaxPurge+5))
			form := hiddenFields(page)
			require.Len(t, form["id"], dashboard.MaxPurge)
			code, _ = e.postTo(t, "/purge", form)
			require.Equal(t, http.StatusSeeOther, code)
			st, err := e.c.Stats(ctx, "orders")
			require.NoError(t, err)
			require.EqualValues(t, 5, st.Dead, "the jobs not named stay")
		})
	}
}

// TestReadOnlyAndCSRFGuardTheNewActions: bulk actions and purge are
// refused by a read-only dashboard (even a direct POST that confirms) and
// without the session's CSRF token, and change nothing.
func TestReadOnlyAndCSRFGuardTheNewActions(t *testing.T) {
	b := testutil.Backends(t)[0]
	ro := setup(t, b, dashboard.Options{ReadOnly: true})
	add(t, ro.c, "orders", "d1", "x", 0)
	work(t, b, ro.c, "d1")
	code, page := ro.get(t, "/topic?t=orders&state=dead")
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, page, `type="checkbox"`)
	require.NotContains(t, page, `id="purge"`)
	tok := strings.Repeat("ab", 32)
	u, _ := url.Parse(ro.srv.URL)
	ro.hc.Jar.SetCookies(u, []*http.Cookie{{Name: "redeq_csrf", Value: tok, Path: "/"}})
	for _, op := range []string{"requeue", "delete"} {
		code, _ = ro.postTo(t, "/bulk", url.Values{"csrf": {tok}, "t": {"orders"}, "state": {"dead"}, "op": {op}, "id": {"d1"}, "confirm": {"1"}})
		require.Equal(t, http.StatusForbidden, code, op)
	}
	code, _ = ro.postTo(t, "/purge", url.Values{"csrf": {tok}, "t": {"orders"}, "confirm": {"1"}})
	require.Equal(t, http.StatusForbidden, code)
	require.Equal(t, redeq.StateDead, state(t, ro.c, "d1"))

	rw := dashboard.New(ro.c, dashboard.Options{})
	for _, path := range []string{"/bulk", "/purge"} {
		req := httptestPost(path, url.Values{"t": {"orders"}, "state": {"dead"}, "op": {"delete"}, "id": {"d1"}, "confirm": {"1"}})
		w := newRecorder()
		rw.ServeHTTP(w, req)
		require.Equal(t, http.StatusForbidden, w.Code, "%s without a CSRF token", path)
	}
	require.Equal(t, redeq.StateDead, state(t, ro.c, "d1"))
}

// TestChartsShowTheLastHour: the overview and the topic page count the
// jobs processed and failed in the last hour and draw them as inline SVG.
func TestChartsShowTheLastHour(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := setup(t, b, dashboard.Options{})
			for _, id := range []string{"a1", "a2", "a3", "d1"} {
				add(t, e.c, "orders", id, "x", 0)
			}
			work(t, b, e.c, "a1", "a2", "a3", "d1")
			total := regexp.MustCompile(`<span id="processed-total">(\d+)</span> processed, <span id="failed-total">(\d+)</span> failed`)
			for _, page := range []string{"/", "/topic?t=orders"} {
				code, body := e.get(t, page)
				require.Equal(t, http.StatusOK, code)
				m := total.FindStringSubmatch(body)
				require.NotNil(t, m, page)
				require.Equal(t, []string{"4", "1"}, m[1:], page)
				require.Contains(t, body, `<svg id="chart-activity"`)
				require.Contains(t, body, `<rect class="processed"`)
				require.Contains(t, body, `<svg id="chart-lateness"`)
				require.NotContains(t, body, "<script")
			}
		})
	}
}

func httptestPost(path string, form url.Values) *http.Request {
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return req
}

func newRecorder() *httptest.ResponseRecorder { return httptest.NewRecorder() }

var questionRE = regexp.MustCompile(`<h1 id="question">([^<]*)</h1>`)

// TestBulkAllMatchingStatesTheCount: "all matching" on a topic page takes
// the jobs of the state that match its filter and asks, stating the count,
// changing nothing; its POST acts on those jobs and not on one that joined
// the state after the question, once; the report is the server's count; a
// bad filter, state, action or question token is refused and changes
// nothing.
func TestBulkAllMatchingStatesTheCount(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := setup(t, b, dashboard.Options{})
			for _, id := range []string{"d1", "d2", "d3", "u1"} {
				add(t, e.c, "orders", id, "x", 0)
			}
			work(t, b, e.c, "d1", "d2", "d3", "u1")
			for i := range 5 {
				add(t, e.c, "orders", fmt.Sprint("a", i), "x", time.Hour)
			}
			code, page := e.get(t, "/topic?t=orders&state=scheduled")
			require.Equal(t, http.StatusOK, code)
			require.Contains(t, page, `id="bulkall"`)
			tok := e.csrf(t, "/topic?t=orders&state=scheduled")

			form := url.Values{"csrf": {tok}, "t": {"orders"}, "state": {"scheduled"}, "op": {"delete"}}
			code, page = e.postTo(t, "/bulkall", form)
			require.Equal(t, http.StatusOK, code, page)
			q := questionRE.FindStringSubmatch(page)
			require.NotNil(t, q, page)
			require.Equal(t, "Delete all 5 scheduled jobs of topic orders? Jobs that join after this question are left.", q[1])
			require.Equal(t, redeq.StateScheduled, state(t, e.c, "a0"), "nothing happens before the confirmation")
			add(t, e.c, "orders", "joined", "x", time.Hour)

			for _, m := range regexp.MustCompile(`<input type="hidden" name="(sel)" value="([^"]+)">`).FindAllStringSubmatch(page, -1) {
				form.Set(m[1], m[2])
			}
			form.Set("confirm", "1")
			code, page = e.postTo(t, "/bulkall", form)
			require.Equal(t, http.StatusSeeOther, code, page)
			for i := range 5 {
				require.Equal(t, redeq.State("gone"), state(t, e.c, fmt.Sprint("a", i)))
			}
			require.Equal(t, redeq.StateScheduled, state(t, e.c, "joined"), "added after the question")
			_, page = e.get(t, "/topic?t=orders&state=scheduled")
			require.Contains(t, page, "5 jobs deleted.")
			code, page = e.postTo(t, "/bulkall", form)
			require.Equal(t, http.StatusBadRequest, code, "a question is answered once")
			require.Contains(t, page, "answered already")

			form = url.Values{"csrf": {tok}, "t": {"orders"}, "state": {"dead"}, "op": {"requeue"}, "error": {"boom"}, "min_attempt": {"1"}}
			code, page = e.postTo(t, "/bulkall", form)
			require.Equal(t, http.StatusOK, code, page)
			require.Contains(t, page, "Requeue all 3 dead jobs of topic orders with error containing &#34;boom&#34;, attempt ≥ 1?")
			for _, m := range regexp.MustCompile(`<input type="hidden" name="(sel)" value="([^"]+)">`).FindAllStringSubmatch(page, -1) {
				form.Set(m[1], m[2])
			}
			form.Set("confirm", "1")
			code, _ = e.postTo(t, "/bulkall", form)
			require.Equal(t, http.StatusSeeOther, code)
			for _, id := range []string{"d1", "d2", "d3"} {
				require.Contains(t, []redeq.State{redeq.StateScheduled, redeq.StateReady}, state(t, e.c, id), id)
			}
			require.Equal(t, redeq.StateUnAck, state(t, e.c, "u1"))

			code, _ = e.postTo(t, "/bulkall", url.Values{"csrf": {tok}, "t": {"orders"}, "state": {"unack"}, "op": {"delete"}, "error": {"no such text"}})
			require.Equal(t, http.StatusSeeOther, code, "nothing matches: nothing to ask")
			_, page = e.get(t, "/topic?t=orders&state=unack")
			require.Contains(t, page, "No unack job matches: nothing to do.")

			for _, f := range []url.Values{
				{"state": {"unack"}, "op": {"delete"}, "min_attempt": {"-1"}},
				{"state": {"unack"}, "op": {"delete"}, "min_attempt": {"99999999999999999999"}},
				{"state": {"unack"}, "op": {"delete"}, "due_before": {"tomorrow"}},
				{"state": {"unack"}, "op": {"delete"}, "due_after": {"2026-01-02T00:00:00Z"}, "due_before": {"2026-01-01T00:00:00Z"}},
				{"state": {"unack"}, "op": {"delete"}, "error": {strings.Repeat("x", 201)}},
				{"state": {"unack"}, "op": {"delete"}, "confirm": {"1"}},
				{"state": {"unack"}, "op": {"delete"}, "confirm": {"1"}, "sel": {"x"}},
				{"state": {"inflight"}, "op": {"delete"}},
				{"state": {"ready"}, "op": {"run"}},
				{"state": {"unack"}, "op": {"purge"}},
			} {
				f.Set("csrf", tok)
				f.Set("t", "orders")
				code, _ = e.postTo(t, "/bulkall", f)
				require.Equal(t, http.StatusBadRequest, code, "%v", f)
			}
			require.Equal(t, redeq.StateUnAck, state(t, e.c, "u1"))
		})
	}
}

package browsertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/dashboard"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// worker starts a client of b (the dashboard's settings) whose listener of
// "orders" fails a job's first run when fail says so and acks the others,
// and returns how many times each job ran.
func worker(t *testing.T, b testutil.Backend, c *redeq.Client, fail func(id string, run int) bool) func(id string) int {
	t.Helper()
	var mu sync.Mutex
	runs := map[string]int{}
	w, err := redeq.New(b.New(t), c.Config())
	require.NoError(t, err)
	require.NoError(t, w.Register(redeq.ListenerFunc("orders", func(_ context.Context, j *redeq.Job, ch *redeq.Channel) error {
		mu.Lock()
		runs[j.ID]++
		n := runs[j.ID]
		mu.Unlock()
		if fail(j.ID, n) {
			return redeq.SkipRetry(errors.New("partner down"))
		}
		ch.Ack()
		return nil
	})))
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(func() { _ = w.Shutdown(context.Background()) })
	return func(id string) int {
		mu.Lock()
		defer mu.Unlock()
		return runs[id]
	}
}

func dead(c *redeq.Client, ids ...string) func() bool {
	return func() bool {
		for _, id := range ids {
			j, err := c.Get(context.Background(), "orders", id)
			if err != nil || j.State != redeq.StateDead {
				return false
			}
		}
		return true
	}
}

// TestChartShowsProcessedJobs: after a worker ran 5 jobs (one of them
// failing), the overview and the topic page say so above their charts,
// and the chart draws bars.
func TestChartShowsProcessedJobs(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			c, base := serve(t, b, dashboard.Options{})
			for i := range 5 {
				add(t, c, fmt.Sprint("j", i), "x", 0)
			}
			worker(t, b, c, func(id string, _ int) bool { return id == "j4" })
			waitFor(t, "the jobs to run", func() bool {
				st, err := c.Stats(context.Background(), "orders")
				return err == nil && st.Pool == 1 && st.Dead == 1
			})
			ctx := browser(t)
			for _, p := range []string{"/", "/topic?t=orders"} {
				require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+p), chromedp.WaitVisible(chromedp.CSS(`#chart-activity`))))
				processed, failed := text(t, ctx, `#processed-total`), text(t, ctx, `#failed-total`)
				bars, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#chart-activity rect.processed').length`))
				require.NoError(t, err)
				lines, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#chart-lateness .p50, #chart-lateness .p99').length`))
				require.NoError(t, err)
				require.Equal(t, "5", processed, p)
				require.Equal(t, "1", failed, p)
				require.GreaterOrEqual(t, bars, 1, p)
				require.Equal(t, 2, lines, "p50 and p99 drawn on %s", p)
			}
		})
	}
}

// TestPurgeDeadAfterConfirmation: the purge button asks first, naming the
// dead jobs; confirming removes them from the dead list.
func TestPurgeDeadAfterConfirmation(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			c, base := serve(t, b, dashboard.Options{})
			for i := range 3 {
				add(t, c, fmt.Sprint("d", i), "x", 0)
			}
			worker(t, b, c, func(string, int) bool { return true })
			waitFor(t, "the jobs to die", dead(c, "d0", "d1", "d2"))
			ctx := browser(t)
			require.NoError(t, chromedp.Do(ctx,
				chromedp.Navigate(base+"/topic?t=orders&state=dead"),
				chromedp.Click(chromedp.CSS(`#purge button`)),
				chromedp.WaitVisible(chromedp.CSS(`#confirm`)),
			))
			question := text(t, ctx, `#question`)
			st, err := c.Stats(context.Background(), "orders")
			require.NoError(t, err)
			require.EqualValues(t, 3, st.Dead, "nothing purged before the confirmation")
			require.NoError(t, chromedp.Do(ctx,
				chromedp.Click(chromedp.CSS(`#confirm`)),
				chromedp.WaitVisible(chromedp.CSS(`.msg`)),
			))
			msg := text(t, ctx, `.msg`)
			rows, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#jobs tr[data-id]').length`))
			require.NoError(t, err)
			require.Contains(t, question, "Remove these 3 dead jobs of topic orders")
			require.Contains(t, msg, "3 dead jobs purged")
			require.Zero(t, rows)
			st, err = c.Stats(context.Background(), "orders")
			require.NoError(t, err)
			require.Zero(t, st.Dead)
		})
	}
}

// TestBulkRequeueTwoDeadJobs: ticking two of three dead jobs and
// confirming requeues exactly those two, and they run (and are acked);
// the third stays dead.
func TestBulkRequeueTwoDeadJobs(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			c, base := serve(t, b, dashboard.Options{})
			for _, id := range []string{"d1", "d2", "d3"} {
				add(t, c, id, "x", 0)
			}
			runs := worker(t, b, c, func(_ string, n int) bool { return n == 1 })
			waitFor(t, "the jobs to die", dead(c, "d1", "d2", "d3"))
			ctx := browser(t)
			require.NoError(t, chromedp.Do(ctx,
				chromedp.Navigate(base+"/topic?t=orders&state=dead"),
				chromedp.Click(chromedp.CSS(`input[type="checkbox"][value="d1"]`)),
				chromedp.Click(chromedp.CSS(`input[type="checkbox"][value="d2"]`)),
				chromedp.Click(chromedp.CSS(`#bulk button[value="requeue"]`)),
				chromedp.WaitVisible(chromedp.CSS(`#confirm`)),
			))
			listed := text(t, ctx, `#confirm-ids`)
			require.NoError(t, chromedp.Do(ctx,
				chromedp.Click(chromedp.CSS(`#confirm`)),
				chromedp.WaitVisible(chromedp.CSS(`.msg`)),
			))
			msg := text(t, ctx, `.msg`)
			// The page lists them as the dead list shows them: bucket by
			// bucket, then by when they died; either may come first.
			require.ElementsMatch(t, []string{"d1", "d2"}, strings.Fields(listed))
			require.Contains(t, msg, "2 jobs requeued")
			waitFor(t, "the requeued jobs to run and be acked", func() bool {
				for _, id := range []string{"d1", "d2"} {
					if _, err := c.Get(context.Background(), "orders", id); !errors.Is(err, redeq.ErrJobNotFound) {
						return false
					}
				}
				return true
			})
			require.Equal(t, 2, runs("d1"))
			require.Equal(t, 2, runs("d2"))
			require.Equal(t, 1, runs("d3"))
			require.True(t, dead(c, "d3")(), "the job not ticked stays dead")
		})
	}
}

// TestReadOnlyRefusesNewActions: a read-only dashboard shows no checkbox
// and no purge button, and refuses a bulk requeue, a bulk delete and a
// purge POSTed from its page, confirmed, even with a CSRF pair.
func TestReadOnlyRefusesNewActions(t *testing.T) {
	b := backends(t)[0]
	c, base := serve(t, b, dashboard.Options{ReadOnly: true})
	add(t, c, "d1", "x", 0)
	worker(t, b, c, func(string, int) bool { return true })
	waitFor(t, "the job to die", dead(c, "d1"))
	ctx := browser(t)
	_, err := chromedp.Call(ctx, page.SetBypassCSP, page.SetBypassCSPParams{Enabled: true})
	require.NoError(t, err)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"/topic?t=orders&state=dead"),
		chromedp.WaitVisible(chromedp.CSS(`#jobs`)),
	))
	controls, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('input[type="checkbox"], #purge, #bulk').length`))
	require.NoError(t, err)
	require.Zero(t, controls)
	for _, req := range []string{
		`'/bulk', {csrf: tok, t: 'orders', state: 'dead', op: 'requeue', id: 'd1', confirm: '1'}`,
		`'/bulk', {csrf: tok, t: 'orders', state: 'dead', op: 'delete', id: 'd1', confirm: '1'}`,
		`'/purge', {csrf: tok, t: 'orders', confirm: '1'}`,
	} {
		status, err := chromedp.Run(ctx, chromedp.Evaluate[int](
			`((path, form) => {
				const tok = 'ab'.repeat(32);
				document.cookie = 'redeq_csrf=' + tok + '; path=/';
				form.csrf = tok;
				return fetch(path, {method: 'POST', body: new URLSearchParams(form)}).then(r => r.status);
			})(`+strings.Replace(req, "csrf: tok, ", "", 1)+`)`,
			chromedp.EvalAwaitPromise))
		require.NoError(t, err, req)
		require.Equal(t, 403, status, req)
	}
	require.True(t, dead(c, "d1")(), "the job must stay dead")
}

// TestDeleteAllMatchingAfterConfirmation: "Delete all matching" with a due
// bound asks a question that states how many scheduled jobs match, and
// its confirmation deletes those and no other.
func TestDeleteAllMatchingAfterConfirmation(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			c, base := serve(t, b, dashboard.Options{})
			for i := range 5 {
				add(t, c, fmt.Sprint("soon", i), "x", time.Hour)
				add(t, c, fmt.Sprint("later", i), "x", 3*time.Hour)
			}
			before := time.Now().Add(2 * time.Hour).UTC().Format(time.RFC3339)
			ctx := browser(t)
			require.NoError(t, chromedp.Do(ctx,
				chromedp.Navigate(base+"/topic?t=orders&state=scheduled"),
				chromedp.SendKeys(chromedp.CSS(`#bulkall input[name="due_before"]`), before),
				chromedp.Click(chromedp.CSS(`#bulkall button[value="delete"]`)),
				chromedp.WaitVisible(chromedp.CSS(`#confirm`)),
			))
			question := text(t, ctx, `#question`)
			require.Equal(t, "Delete all 5 scheduled jobs of topic orders with due before "+before+"? Jobs that join after this question are left.", question)
			st, err := c.Stats(context.Background(), "orders")
			require.NoError(t, err)
			require.EqualValues(t, 10, st.Scheduled, "nothing happens before the confirmation")
			require.NoError(t, chromedp.Do(ctx,
				chromedp.Click(chromedp.CSS(`#confirm`)),
				chromedp.WaitVisible(chromedp.CSS(`.msg`)),
			))
			require.Contains(t, text(t, ctx, `.msg`), "5 jobs deleted.")
			for i := range 5 {
				_, err := c.Get(context.Background(), "orders", fmt.Sprint("soon", i))
				require.ErrorIs(t, err, redeq.ErrJobNotFound)
				_, err = c.Get(context.Background(), "orders", fmt.Sprint("later", i))
				require.NoError(t, err, "not matched")
			}
		})
	}
}

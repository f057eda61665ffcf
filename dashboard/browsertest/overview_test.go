package browsertest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/dashboard"
	"github.com/redeq-go/redeq/redeq"
)

// TestUnattendedTopicIsFlagged: a topic with a job past its due time and
// no consumer reads "no consumer" with its overdue time on the overview,
// and its own page says so.
func TestUnattendedTopicIsFlagged(t *testing.T) {
	for _, b := range backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			c, base := serve(t, b, dashboard.Options{})
			require.NoError(t, c.Add(context.Background(), &redeq.Job{Topic: "stuck", ID: "s1", Body: []byte("x"), RunAt: time.Now().Add(-15 * time.Minute)}))
			add(t, c, "o1", "x", time.Hour)
			ctx := browser(t)
			require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/")))
			stuck := text(t, ctx, `tr[data-topic="stuck"] td.status`)
			overdue := text(t, ctx, `tr[data-topic="stuck"] td[data-overdue]`)
			orders := text(t, ctx, `tr[data-topic="orders"] td.status`)
			require.NoError(t, chromedp.Do(ctx, chromedp.Navigate(base+"/topic?t=stuck")))
			flag := text(t, ctx, `p[data-flag="no-consumer"]`)
			require.Contains(t, stuck, "no consumer: nothing runs these jobs")
			require.NotContains(t, stuck, "running")
			require.Contains(t, overdue, "m", "minutes overdue")
			require.Equal(t, "running", strings.TrimSpace(orders))
			require.Contains(t, flag, "No consumer")
		})
	}
}

// TestPauseAsksFirst: the overview's Pause button leads to a confirmation
// page, and only its button pauses the topic; the result shows once.
func TestPauseAsksFirst(t *testing.T) {
	b := backends(t)[0]
	c, base := serve(t, b, dashboard.Options{})
	add(t, c, "o1", "x", time.Hour)
	ctx := browser(t)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"/"),
		chromedp.Click(chromedp.CSS(`tr[data-topic="orders"] button[value="pause"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#question`)),
	))
	question := text(t, ctx, `#question`)
	st, err := c.Stats(context.Background(), "orders")
	require.NoError(t, err)
	require.False(t, st.Paused, "nothing happens before the confirmation")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`#confirm`)),
		chromedp.WaitVisible(chromedp.CSS(`.msg`)),
	))
	msg := text(t, ctx, `.msg`)
	require.Contains(t, question, "Pause topic orders?")
	require.Contains(t, msg, "Topic orders paused")
	st, err = c.Stats(context.Background(), "orders")
	require.NoError(t, err)
	require.True(t, st.Paused)
	require.NoError(t, chromedp.Do(ctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`#topics`))))
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('.msg').length`))
	require.NoError(t, err)
	require.Zero(t, n, "a result shows once")
}

// TestTopicSearch: the overview's search box keeps the topics whose name
// holds the text.
func TestTopicSearch(t *testing.T) {
	b := backends(t)[0]
	c, base := serve(t, b, dashboard.Options{})
	for _, topic := range []string{"tenant1", "tenant10", "mail"} {
		require.NoError(t, c.Add(context.Background(), &redeq.Job{Topic: topic, ID: "j", Body: []byte("x"), Delay: time.Hour}))
	}
	ctx := browser(t)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"/"),
		chromedp.SendKeys(chromedp.CSS(`input[name="q"]`), "tenant"),
		chromedp.Submit(chromedp.CSS(`input[name="q"]`)),
		// The table of the page the search loads, not of the page before it.
		chromedp.WaitNotPresent(chromedp.CSS(`#topics tr[data-topic="mail"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#topics`)),
	))
	names, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll('#topics tr[data-topic]')].map(r => r.dataset.topic)`))
	require.NoError(t, err)
	require.Equal(t, []string{"tenant1", "tenant10"}, names)
}

// TestAutoRefreshReloadsUntilTurnedOff: with ?refresh=N the page reloads
// itself and shows what changed meanwhile; the "Stop auto-refresh" link
// turns it off.
func TestAutoRefreshReloadsUntilTurnedOff(t *testing.T) {
	b := backends(t)[0]
	c, base := serve(t, b, dashboard.Options{})
	add(t, c, "o1", "x", time.Hour)
	ctx := browser(t)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"/"),
		chromedp.Click(chromedp.CSS(`#refresh-on`)),
		chromedp.WaitVisible(chromedp.CSS(`#refresh-off`)),
		chromedp.Navigate(base+"/?refresh=2"),
		chromedp.WaitVisible(chromedp.CSS(`#topics`)),
	))
	require.NoError(t, c.Add(context.Background(), &redeq.Job{Topic: "fresh", ID: "f", Body: []byte("x"), Delay: time.Hour}))
	// No script on the page: only its own refresh can show the new topic.
	require.NoError(t, chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`tr[data-topic="fresh"]`))))
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`#refresh-off`)),
		chromedp.WaitVisible(chromedp.CSS(`#refresh-on`)),
	))
	metas, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('meta[http-equiv="refresh"]').length`))
	require.NoError(t, err)
	require.Zero(t, metas)
}

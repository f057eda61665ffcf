package browsertest

import (
	"context"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/dashboard"
	"github.com/redeq-go/redeq/redeq"
)

// TestSchedulePauseAsksFirst: the header's Schedules link leads to the
// schedules page; its Pause button leads to a confirmation, and only its
// button pauses the schedule, which then reads paused with a Resume button.
func TestSchedulePauseAsksFirst(t *testing.T) {
	b := backends(t)[0]
	c, base := serve(t, b, dashboard.Options{})
	bg := context.Background()
	require.NoError(t, c.PutSchedule(bg, redeq.Schedule{Name: "digest", Topic: "mail", Spec: "0 8 * * *", TimeZone: "Europe/Paris"}))
	ctx := browser(t)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Navigate(base+"/"),
		chromedp.Click(chromedp.CSS(`#nav-schedules`)),
		chromedp.WaitVisible(chromedp.CSS(`#schedules`)),
	))
	zone := text(t, ctx, `tr[data-schedule="digest"] td:nth-child(4)`)
	next := text(t, ctx, `tr[data-schedule="digest"] td[data-next]`)
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`tr[data-schedule="digest"] button[value="pause"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#question`)),
	))
	question := text(t, ctx, `#question`)
	infos, err := c.Schedules(bg)
	require.NoError(t, err)
	require.False(t, infos[0].Paused, "nothing happens before the confirmation")
	require.NoError(t, chromedp.Do(ctx,
		chromedp.Click(chromedp.CSS(`#confirm`)),
		chromedp.WaitVisible(chromedp.CSS(`.msg`)),
	))
	msg := text(t, ctx, `.msg`)
	status := text(t, ctx, `tr[data-schedule="digest"] td.status`)
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('tr[data-schedule="digest"] button[value="resume"]').length`))
	require.NoError(t, err)

	require.Equal(t, "Europe/Paris", zone)
	require.Contains(t, next, "08:00:00 CE")
	require.Contains(t, question, "Pause schedule digest?")
	require.Contains(t, msg, "Schedule digest paused")
	require.Equal(t, "paused", strings.TrimSpace(status))
	require.Equal(t, 1, n)
	infos, err = c.Schedules(bg)
	require.NoError(t, err)
	require.True(t, infos[0].Paused)
}

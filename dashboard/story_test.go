package dashboard_test

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/dashboard"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

func cellOf(t *testing.T, page, id string) string {
	t.Helper()
	m := regexp.MustCompile(`<td id="` + id + `">(.*?)</td>`).FindStringSubmatch(page)
	require.NotNil(t, m, "no #%s on the page", id)
	return regexp.MustCompile(`<[^>]+>`).ReplaceAllString(m[1], "")
}

// TestJobPageTellsTheStory: a job's page gives its attempt of the most it
// may have and whose retry policy that is, the retry intervals, when it
// last failed and what comes next and when; the retrying view lists the
// scheduled jobs that failed before, not the others.
func TestJobPageTellsTheStory(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := setup(t, b, dashboard.Options{})
			ctx := context.Background()
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "orders", ID: "retry", MaxRetries: 3, RetryIntervals: []time.Duration{time.Hour, 2 * time.Hour}}))
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "orders", ID: "dfail", MaxRetries: -1}))
			w, err := redeq.New(b.New(t), e.c.Config())
			require.NoError(t, err)
			require.NoError(t, w.Register(redeq.ListenerFunc("orders", func(context.Context, *redeq.Job, *redeq.Channel) error {
				return errors.New("partner answered 503")
			})))
			require.NoError(t, w.Start(ctx))
			t.Cleanup(func() { _ = w.Shutdown(context.Background()) })
			deadline := time.Now().Add(20 * time.Second)
			for state(t, e.c, "retry") != redeq.StateScheduled || state(t, e.c, "dfail") != redeq.StateDead {
				require.True(t, time.Now().Before(deadline), "never failed")
				time.Sleep(10 * time.Millisecond)
			}
			require.NoError(t, w.Shutdown(ctx))
			add(t, e.c, "orders", "fresh", "x", time.Hour)
			failedAt := time.Now()

			code, page := e.get(t, "/job?t=orders&id=retry")
			require.Equal(t, http.StatusOK, code)
			j, err := e.c.Get(ctx, "orders", "retry")
			require.NoError(t, err)
			require.Equal(t, "1 failed so far; attempt 2 of 4: 3 retries (the job&#39;s), then dead", cellOf(t, page, "attempt"))
			require.Equal(t, "1h0m0s, 2h0m0s", cellOf(t, page, "intervals"))
			require.Equal(t, "retry 1, due "+j.RunAt.UTC().Format("2006-01-02 15:04:05.000Z"), cellOf(t, page, "next"))
			failed := cellOf(t, page, "failed")
			require.Regexp(t, `^about \d{4}-`, failed)
			at, err := time.Parse("2006-01-02 15:04:05.000Z", failed[len("about "):])
			require.NoError(t, err)
			require.WithinDuration(t, failedAt, at, time.Minute, "due time less the first interval")

			_, page = e.get(t, "/job?t=orders&id=dfail")
			require.Contains(t, cellOf(t, page, "attempt"), "never retried")
			d, err := e.c.Get(ctx, "orders", "dfail")
			require.NoError(t, err)
			require.Equal(t, d.RunAt.UTC().Format("2006-01-02 15:04:05.000Z"), cellOf(t, page, "failed"), "when it died")
			require.Contains(t, cellOf(t, page, "next"), "none")

			_, page = e.get(t, "/job?t=orders&id=fresh")
			require.Contains(t, cellOf(t, page, "attempt"), "the default; a listener&#39;s WithRetry may differ")
			require.Equal(t, "none", cellOf(t, page, "failed"))

			code, page = e.get(t, "/topic?t=orders&state=scheduled&view=retrying")
			require.Equal(t, http.StatusOK, code)
			require.Contains(t, page, `data-id="retry"`)
			require.NotContains(t, page, `data-id="fresh"`)
			_, page = e.get(t, "/topic?t=orders&state=scheduled")
			require.Contains(t, page, `data-id="fresh"`)
		})
	}
}

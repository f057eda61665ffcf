package dashboard_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/dashboard"
	"github.com/redeq-go/redeq/internal/keys"
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
// last failed (as recorded with its error) and what comes next and when; the retrying view lists the
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
			require.Equal(t, j.FailedAt.UTC().Format("2006-01-02 15:04:05.000Z"), failed, "recorded with the error, not estimated")
			require.WithinDuration(t, failedAt, j.FailedAt, time.Minute)

			_, page = e.get(t, "/job?t=orders&id=dfail")
			require.Contains(t, cellOf(t, page, "attempt"), "never retried")
			d, err := e.c.Get(ctx, "orders", "dfail")
			require.NoError(t, err)
			require.Equal(t, d.FailedAt.UTC().Format("2006-01-02 15:04:05.000Z"), cellOf(t, page, "failed"), "when it failed, for the last time")
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

// TestPagesShowSilentConsumersJobs: a job in flight whose consumer missed
// its heartbeats past its timeout, not yet recovered, is shown on the
// topic's in-flight tab and on its own page as held by a consumer silent
// since its last heartbeat, not as running; a job of a live consumer
// shows how long it has run.
func TestPagesShowSilentConsumersJobs(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := setup(t, b, dashboard.Options{})
			ctx := context.Background()
			rdb := b.New(t)
			cfg := e.c.Config()
			tm, err := rdb.Time(ctx).Result()
			require.NoError(t, err)
			now := tm.UnixMilli()
			old := now - time.Hour.Milliseconds()
			beats := map[string]int64{"ghost": old, "live": now}
			for id, cid := range map[string]string{"g-1": "ghost", "l-1": "live"} {
				add(t, e.c, "orders", id, "x", time.Hour)
				var k keys.Bucket
				for n := range cfg.Concurrency {
					if kb := keys.ForBucket(cfg.Prefix, "orders", n); rdb.ZScore(ctx, kb.Scheduled(), id).Err() == nil {
						k = kb
					}
				}
				// What a fetch by cid leaves behind.
				require.NoError(t, rdb.ZRem(ctx, k.Scheduled(), id).Err())
				require.NoError(t, rdb.ZAdd(ctx, k.InFlight(cid), redis.Z{Score: float64(now), Member: "7:" + id}).Err())
				require.NoError(t, rdb.HSet(ctx, k.State(), id, "7@"+cid).Err())
				z := redis.Z{Score: float64(beats[cid]), Member: cid}
				require.NoError(t, rdb.ZAdd(ctx, keys.ForTopic(cfg.Prefix, "orders").Consumers(), z).Err())
				require.NoError(t, rdb.ZAdd(ctx, keys.Alive(cfg.Prefix), z).Err())
				require.NoError(t, rdb.HSet(ctx, keys.AliveTopics(cfg.Prefix), cid, keys.Address("orders", cfg.Concurrency), keys.AliveTimeout(cid), 15000).Err())
			}
			since := time.UnixMilli(old).UTC().Format("2006-01-02 15:04:05.000Z")

			code, page := e.get(t, "/topic?t=orders&state=inflight")
			require.Equal(t, http.StatusOK, code)
			row := regexp.MustCompile(`(?s)<tr data-id="g-1">.*?</tr>`).FindString(page)
			require.Contains(t, row, `data-flag="silent">consumer silent since `+since)
			live := regexp.MustCompile(`(?s)<tr data-id="l-1">.*?</tr>`).FindString(page)
			require.NotContains(t, live, "silent")
			require.Contains(t, live, `class="n running"`)

			_, page = e.get(t, "/job?t=orders&id=g-1")
			require.Contains(t, cellOf(t, page, "silent"), "consumer silent since "+since)
			require.Equal(t, "consumer ghost silent since "+since, cellOf(t, page, "next"))
			_, page = e.get(t, "/job?t=orders&id=l-1")
			require.NotContains(t, page, `id="silent"`)
			require.Equal(t, "running now, held by live", cellOf(t, page, "next"))
		})
	}
}

// TestPagesShowDoneJobsAndTheirFailures: on a topic with retention, the
// done tab lists acked jobs with when they finished, and a done job's page
// says it is done, when, and each failed delivery before its ack with its
// time, newest first; a done job offers no action.
func TestPagesShowDoneJobsAndTheirFailures(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := setup(t, b, dashboard.Options{})
			ctx := context.Background()
			w, err := redeq.New(b.New(t), e.c.Config())
			require.NoError(t, err)
			var calls atomic.Int32
			require.NoError(t, w.Register(redeq.ListenerFunc("orders", func(_ context.Context, j *redeq.Job, ch *redeq.Channel) error {
				if calls.Add(1) <= 2 {
					return fmt.Errorf("partner down %d", calls.Load())
				}
				ch.Ack()
				return nil
			}, redeq.WithRetry(3, 10*time.Millisecond), redeq.WithRetention(time.Hour))))
			require.NoError(t, w.Start(ctx))
			t.Cleanup(func() { _ = w.Shutdown(context.Background()) })
			add(t, e.c, "orders", "flaky", "x", 0)
			var j *redeq.Job
			testutil.Eventually(t, 20*time.Second, "flaky done", func() bool {
				j, err = e.c.Get(ctx, "orders", "flaky")
				return err == nil && j.State == redeq.StateDone
			})
			stamp := func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000Z") }

			code, page := e.get(t, "/topic?t=orders&state=done")
			require.Equal(t, http.StatusOK, code)
			require.Contains(t, page, `class="on">done</a>`)
			row := regexp.MustCompile(`(?s)<tr data-id="flaky">.*?</tr>`).FindString(page)
			require.Contains(t, row, "<td>"+stamp(j.FinishedAt)+"</td>")
			require.Contains(t, row, "failed at "+stamp(j.FailedAt))
			require.NotContains(t, row, "<button", "nothing to act on")

			_, page = e.get(t, "/job?t=orders&id=flaky")
			require.Equal(t, "done", cellOf(t, page, "state"))
			require.Equal(t, stamp(j.FinishedAt), cellOf(t, page, "finished"))
			require.Equal(t, stamp(j.FailedAt), cellOf(t, page, "failed"))
			require.Equal(t, "none: done, acked at "+stamp(j.FinishedAt), cellOf(t, page, "next"))
			m := regexp.MustCompile(`(?s)<ol id="failures">(.*?)</ol>`).FindStringSubmatch(page)
			require.NotNil(t, m, page)
			on := " on <code>" + j.Failures[0].Consumer + "</code>"
			require.NotEmpty(t, j.Failures[0].Consumer)
			require.Equal(t, "<li>"+stamp(j.Failures[0].At)+on+": partner down 2</li><li>"+stamp(j.Failures[1].At)+on+": partner down 1</li>", m[1])
		})
	}
}

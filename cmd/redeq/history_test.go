package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestCLIHistory: history prints, per minute and in total, the jobs a
// topic's consumers processed and failed and how many were timed, as the
// API's History counts them, in a table and in JSON; a --since past the
// history kept is a usage error, an unknown topic not found.
func TestCLIHistory(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := newEnv(t, b)
			ctx := context.Background()
			var batch []*redeq.Job
			for i := range 10 {
				batch = append(batch, &redeq.Job{Topic: "orders", ID: fmt.Sprint("h", i)})
			}
			require.NoError(t, e.c.AddBatch(ctx, batch))
			w, err := redeq.New(b.New(t), e.c.Config())
			require.NoError(t, err)
			var acked atomic.Int64
			require.NoError(t, w.Register(redeq.ListenerFunc("orders", func(_ context.Context, j *redeq.Job, ch *redeq.Channel) error {
				if j.ID == "h0" && j.Attempt == 0 {
					return errors.New("first try fails")
				}
				ch.Ack()
				acked.Add(1)
				return nil
			}, redeq.WithRetry(1, time.Millisecond))))
			require.NoError(t, w.Start(ctx))
			t.Cleanup(func() { _ = w.Shutdown(context.Background()) })
			waitFor(t, func() bool { return acked.Load() == 10 })
			require.NoError(t, w.Shutdown(ctx))

			var h struct {
				Topic   string
				Minutes []struct{ Processed, Failed, Timed int64 }
				Total   struct{ Processed, Failed, Timed int64 }
			}
			require.NoError(t, json.Unmarshal([]byte(e.ok(t, "history", "orders", "--since", "5m", "-o", "json")), &h))
			require.Equal(t, "orders", h.Topic)
			require.NotEmpty(t, h.Minutes)
			var sum int64
			for _, m := range h.Minutes {
				sum += m.Processed
			}
			require.Equal(t, h.Total.Processed, sum)
			out := e.ok(t, "history", "orders")
			require.Contains(t, out, "MINUTE")
			if b.Real() { // miniredis has no BITFIELD: no history
				require.EqualValues(t, 11, h.Total.Processed, "10 acks and a failure")
				require.EqualValues(t, 1, h.Total.Failed)
				require.EqualValues(t, 11, h.Total.Timed, "each delivery the mover made due, the retry too")
				require.Regexp(t, `(?m)^\s*total\s+11\s+1\s+`, out)
			}

			code, _, _ := e.run(t, "", "history", "orders", "--since", "2h")
			require.Equal(t, 2, code)
			code, _, _ = e.run(t, "", "history", "nosuchtopic")
			require.Equal(t, 3, code)
		})
	}
}

// TestCLIGetTellsTheStory: get gives a retrying job's attempt of its most,
// whose policy that is, its intervals, when it failed (recorded with its
// error) and when its retry is due; a dead job's death time; list
// retrying shows the scheduled jobs that failed before and not the
// others.
func TestCLIGetTellsTheStory(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := newEnv(t, b)
			seed(t, e, "r1", "d1", "s1")
			out := e.ok(t, "get", "orders", "r1")
			require.Regexp(t, `(?m)^retries:\s+attempt 2 of 4 \(3 retries, the default: a listener's WithRetry may differ\)$`, out)
			require.Regexp(t, `(?m)^intervals:\s+1h0m0s$`, out)
			require.Regexp(t, `(?m)^last failure:\s+20\d\d-`, out, "recorded with the error, not estimated")
			require.Regexp(t, `(?m)^failed at:\s+20\d\d-`, out)
			require.Regexp(t, `(?m)^next attempt:\s+retry 1, 20\d\d-`, out)
			var st struct {
				MaxRetries           int        `json:"max_retries"`
				RetryPolicy          string     `json:"retry_policy"`
				LastFailureAt        *time.Time `json:"last_failure_at"`
				LastFailureEstimated bool       `json:"last_failure_estimated"`
				NextAttemptAt        *time.Time `json:"next_attempt_at"`
				LastError            string     `json:"last_error"`
			}
			require.NoError(t, json.Unmarshal([]byte(e.ok(t, "get", "orders", "r1", "-o", "json")), &st))
			require.Equal(t, 3, st.MaxRetries)
			require.Equal(t, "default", st.RetryPolicy)
			require.False(t, st.LastFailureEstimated)
			require.WithinDuration(t, time.Now(), *st.LastFailureAt, time.Minute)
			require.WithinDuration(t, time.Now().Add(time.Hour), *st.NextAttemptAt, time.Minute)
			require.Equal(t, "partner timeout", st.LastError)

			out = e.ok(t, "get", "orders", "d1")
			require.Regexp(t, `(?m)^since:\s+20\d\d-`, out)
			require.Regexp(t, `(?m)^last failure:\s+20\d\d-`, out)
			require.Regexp(t, `(?m)^next attempt:\s+none: dead$`, out)

			out = e.ok(t, "list", "orders", "retrying")
			require.Regexp(t, `(?m)^r1\s+scheduled\s+1\s`, out)
			require.NotContains(t, out, "s1")
		})
	}
}

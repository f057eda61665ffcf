package redeq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/redeq"
)

// TestListGivesGetsFieldsToRetriedReadyAndBroadcastJobs: a job waiting in
// the ready list after a failed attempt, and a scheduled broadcast job,
// come from List with the fields Get gives them: LastError, Attempt,
// Broadcast, body, headers and retry settings.
func TestListGivesGetsFieldsToRetriedReadyAndBroadcastJobs(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		const topic = "fields"
		failed := make(chan struct{}, 1)
		l := newListener(topic, func(_ context.Context, job *redeq.Job, _ *redeq.Channel) error {
			select {
			case failed <- struct{}{}:
			default:
			}
			return errors.New("first try failed")
		})
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: "r", Body: []byte("body"), Headers: map[string]string{"k": "v"},
			MaxRetries: 3, RetryIntervals: []time.Duration{time.Second}}))
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: "b", Body: []byte("bb"), Broadcast: true, Delay: time.Hour}))
		startWith(t, e.c, l)
		select {
		case <-failed:
		case <-time.After(10 * time.Second):
			require.FailNow(t, "no delivery")
		}
		require.NoError(t, e.c.Pause(ctx, topic))
		waitFor(t, 10*time.Second, "the retry ready", func() bool {
			j, err := e.c.Get(ctx, topic, "r")
			require.NoError(t, err)
			return j.State == redeq.StateReady
		})
		for _, c := range []struct {
			st redeq.State
			id string
		}{{redeq.StateReady, "r"}, {redeq.StateScheduled, "b"}} {
			p, err := e.c.List(ctx, topic, c.st, redeq.ListOptions{})
			require.NoError(t, err)
			require.Len(t, p.Jobs, 1, c.st)
			g, err := e.c.Get(ctx, topic, c.id)
			require.NoError(t, err)
			lj := p.Jobs[0]
			require.Equal(t, g.ID, lj.ID)
			require.Equal(t, g.LastError, lj.LastError, "last error")
			require.Equal(t, g.Attempt, lj.Attempt, "attempt")
			require.Equal(t, g.Broadcast, lj.Broadcast, "broadcast")
			require.Equal(t, g.Body, lj.Body, "body")
			require.Equal(t, g.Headers, lj.Headers, "headers")
			require.Equal(t, g.MaxRetries, lj.MaxRetries, "max retries")
			require.Equal(t, g.RetryIntervals, lj.RetryIntervals, "intervals")
			require.True(t, g.CreatedAt.Equal(lj.CreatedAt), "created")
			require.Equal(t, g.State, lj.State, "state")
		}
		g, err := e.c.Get(ctx, topic, "r")
		require.NoError(t, err)
		require.Equal(t, "first try failed", g.LastError)
	})
}

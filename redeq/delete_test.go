package redeq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestDeleteSaysWhereTheJobWas: Delete returns the job with the state it
// was deleted in: scheduled, ready, in flight (with the consumer whose
// handler runs it), un_ack or dead; so a caller tells a cancelled job
// from one whose handler already runs.
func TestDeleteSaysWhereTheJobWas(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		running := make(chan string, 4)
		release := make(chan struct{})
		l := newListener("del", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			switch string(job.Body) {
			case "run":
				running <- job.ID
				<-release
				ch.Ack()
			case "park":
				// neither ack nor rejoin: un_ack
			case "die":
				return redeq.SkipRetry(errors.New("dies"))
			}
			return nil
		})
		l.workers = 4
		startWith(t, e.c, l)
		defer close(release)
		add := func(id, body string, delay time.Duration) {
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "del", ID: id, Body: []byte(body), Delay: delay}))
		}
		add("later", "run", time.Hour)
		add("running", "run", 0)
		add("parked", "park", 0)
		add("dead", "die", 0)
		require.Equal(t, "running", <-running)
		testutil.Eventually(t, 5*time.Second, "parked and dead", func() bool {
			st := stats(t, e.c, "del")
			return st.UnAck == 1 && st.Dead == 1
		})
		require.NoError(t, e.c.Pause(ctx, "del"))
		add("ready", "run", 0)
		testutil.Eventually(t, 5*time.Second, "ready", func() bool { return stats(t, e.c, "del").Ready == 1 })

		for id, want := range map[string]redeq.State{
			"later": redeq.StateScheduled, "ready": redeq.StateReady, "running": redeq.StateInFlight,
			"parked": redeq.StateUnAck, "dead": redeq.StateDead,
		} {
			job, err := e.c.Delete(ctx, "del", id)
			require.NoError(t, err)
			require.Equal(t, want, job.State, id)
			require.Equal(t, id, job.ID)
			if want == redeq.StateInFlight {
				require.Equal(t, e.c.ConsumerID(), job.Consumer, "the consumer running its handler")
			} else {
				require.Empty(t, job.Consumer, id)
			}
		}
		_, err := e.c.Delete(ctx, "del", "later")
		require.ErrorIs(t, err, redeq.ErrJobNotFound)
	})
}

// TestPutSettledWaitsForTheRunningHandler: PutSettled of a job whose
// handler runs writes nothing until that handler's outcome is applied,
// then replaces the job, so the new version never runs beside the old
// handler; with a ctx that ends first it gives up, having written
// nothing.
func TestPutSettledWaitsForTheRunningHandler(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		running := make(chan string, 2)
		release := make(chan struct{})
		l := newListener("settle", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			running <- string(job.Body)
			if string(job.Body) == "old" {
				<-release
				return errors.New("the old run fails: it would be retried")
			}
			ch.Ack()
			return nil
		})
		startWith(t, e.c, l)
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "settle", ID: "r", Body: []byte("old")}))
		require.Equal(t, "old", <-running)

		err := e.c.Put(ctx, &redeq.Job{Topic: "settle", ID: "r", Body: []byte("never"), Delay: time.Hour})
		require.ErrorIs(t, err, redeq.ErrJobNotWaiting, "a plain Put refuses the running job")
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		err = e.c.PutSettled(short, &redeq.Job{Topic: "settle", ID: "r", Body: []byte("never"), Delay: time.Hour})
		require.ErrorIs(t, err, context.DeadlineExceeded)

		done := make(chan error, 1)
		go func() {
			done <- e.c.PutSettled(ctx, &redeq.Job{Topic: "settle", ID: "r", Body: []byte("new"), Delay: time.Hour})
		}()
		job, err := e.c.Get(ctx, "settle", "r")
		require.NoError(t, err)
		require.Equal(t, "old", string(job.Body), "nothing written while the handler runs")
		close(release)
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("PutSettled did not put after the handler settled")
		}
		job, err = e.c.Get(ctx, "settle", "r")
		require.NoError(t, err)
		require.Equal(t, "new", string(job.Body))
		require.Equal(t, redeq.StateScheduled, job.State)
		require.Zero(t, job.Attempt, "the new job, not the old one's retry")
		require.True(t, job.RunAt.After(time.Now().Add(30*time.Minute)), "due when the new job says")
	})
}

package redeq_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/redeq"
)

// TestShutdownKeepsJobOfHandlerThatNeverReturns: a handler that ignores
// its context still runs when Shutdown gives up on it. Its job is not
// rolled back, so no other consumer runs it beside the handler; it stays
// in flight, and the reaper of another client recovers it after
// ConsumerTimeout, since the first client no longer beats. When the
// handler finally returns, its worker's give-back finds the job taken and
// leaves it: it runs once more, not twice.
func TestShutdownKeepsJobOfHandlerThatNeverReturns(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		const timeout = 2 * time.Second
		mod := func(c *config.Config) { c.ConsumerTimeout = timeout }
		release := make(chan struct{})
		defer func() {
			select {
			case <-release:
			default:
				close(release)
			}
		}()
		var first atomic.Int32
		a := e.another(t, mod)
		startWith(t, a, newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			first.Add(1)
			<-release // ignores ctx
			ch.Ack()
			return nil
		}))
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
		waitFor(t, 5*time.Second, "the job runs on the first client", func() bool { return first.Load() == 1 })

		sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		err := a.Shutdown(sctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorContains(t, err, "1 of their jobs stay in flight")
		stopped := time.Now()

		b := e.another(t, mod)
		l := newListener("t", nil)
		startWith(t, b, l)
		time.Sleep(timeout / 2)
		require.Zero(t, l.count(), "the job ran on another client beside its handler, %v after Shutdown returned", time.Since(stopped))
		waitFor(t, 4*timeout, "the reaper recovers the job of the handler that never returned", func() bool { return l.count() == 1 })
		t.Logf("ran again %v after Shutdown returned (ConsumerTimeout %v)", time.Since(stopped), timeout)

		close(release) // the first handler returns at last; its give-back finds the job gone
		time.Sleep(500 * time.Millisecond)
		require.Equal(t, 1, l.count(), "the job ran again after the first handler returned")
		require.EqualValues(t, 1, first.Load())
	})
}

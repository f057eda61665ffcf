package redeq_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// overlap records handler runs of one listener across clients: how many
// run at once, and whether one job runs twice at once.
type overlap struct {
	mu       sync.Mutex
	now, max int
	running  map[string]int
	twice    []string
	runs     map[string]int
}

func (o *overlap) enter(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.running == nil {
		o.running, o.runs = map[string]int{}, map[string]int{}
	}
	o.now++
	o.max = max(o.max, o.now)
	o.running[id]++
	o.runs[id]++
	if o.running[id] > 1 {
		o.twice = append(o.twice, id)
	}
}

func (o *overlap) leave(id string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.now--
	o.running[id]--
}

// TestReview18RestartBesideWindingDownHandler attacks promises 2 and 3: a
// listener with Workers 1 is shut down (ctx 300 ms) while its handler
// runs; the handler honours its context but needs 250 ms to wind down (a
// call it must finish, a transaction to roll back), longer than
// Shutdown's 100 ms grace. Shutdown returns, the service starts a new
// client with the same listener, the job rolled back "due now" is fetched
// at once: two handlers of the Workers-1 listener run at once, and the
// same job runs twice at once while the first consumer still runs it.
func TestReview18RestartBesideWindingDownHandler(t *testing.T) {
	t.Parallel()
	_, be := privateServer(t)
	ctx := context.Background()
	cfg := testutil.Config(t)
	e := setup(t, be, cfg)
	var o overlap
	l := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		o.enter(job.ID)
		defer o.leave(job.ID)
		select {
		case <-ctx.Done():
			time.Sleep(250 * time.Millisecond) // winding down
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
			ch.Ack()
			return nil
		}
	})
	l.workers = 1
	a := e.another(t, nil)
	startWith(t, a, l)
	require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
	waitFor(t, 5*time.Second, "j runs", func() bool { return l.count() == 1 })

	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	began := time.Now()
	err := a.Shutdown(sctx)
	t.Logf("Shutdown took %v: %v", time.Since(began), err)

	b := e.another(t, nil) // the service restarts its consumer
	startWith(t, b, l)
	waitFor(t, 10*time.Second, "j acked", func() bool {
		_, err := e.c.Get(ctx, "t", "j")
		return errors.Is(err, redeq.ErrJobNotFound)
	})
	o.mu.Lock()
	defer o.mu.Unlock()
	t.Logf("Workers 1: at most %d handlers at once; jobs run twice at once: %v; runs %v", o.max, o.twice, o.runs)
	require.Equal(t, 1, o.max, "a Workers-1 listener ran more handlers at once")
	require.Empty(t, o.twice, "a job ran twice at once")
}

// TestReview18StartShutdownCycles attacks promise 4: a service restarts
// its consumer five times in one process while jobs run, with a short
// Shutdown ctx each time; a last client drains. No job is lost, none is
// acked twice (every acked job's handler ran at least once), and a
// Workers-3 listener never runs more than 3 handlers at once.
func TestReview18StartShutdownCycles(t *testing.T) {
	t.Parallel()
	_, be := privateServer(t)
	ctx := context.Background()
	cfg := testutil.Config(t)
	cfg.Concurrency = 4
	e := setup(t, be, cfg)
	var o overlap
	l := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		o.enter(job.ID)
		defer o.leave(job.ID)
		select {
		case <-ctx.Done():
			return ctx.Err() // returns at once when canceled
		case <-time.After(time.Duration(20+len(job.ID)*7) * time.Millisecond):
		}
		if job.Attempt == 0 && job.ID[len(job.ID)-1] == '3' {
			return errors.New("fail once")
		}
		ch.Ack()
		return nil
	})
	l.workers = 3
	const n = 150
	for i := range n {
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint("c", i), Delay: time.Duration(i*8) * time.Millisecond}))
	}
	for cycle := range 5 {
		c := e.another(t, nil)
		startWith(t, c, l)
		time.Sleep(250 * time.Millisecond)
		sctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
		began := time.Now()
		err := c.Shutdown(sctx)
		cancel()
		t.Logf("cycle %d: Shutdown took %v (%v)", cycle, time.Since(began), err)
	}
	last := e.another(t, nil)
	startWith(t, last, l)
	waitFor(t, 20*time.Second, "every job gone", func() bool { return stats(t, e.c, "t").Pool == 0 })
	o.mu.Lock()
	defer o.mu.Unlock()
	missing := 0
	for i := range n {
		if o.runs[fmt.Sprint("c", i)] == 0 {
			missing++
		}
	}
	t.Logf("at most %d at once; twice at once %v; never ran %d; stats %+v", o.max, o.twice, missing, stats(t, e.c, "t"))
	require.Zero(t, missing, "jobs gone without running")
	require.LessOrEqual(t, o.max, 3)
	require.Empty(t, o.twice)
	st := stats(t, e.c, "t")
	require.Zero(t, st.Dead+st.UnAck)
}

package redeq_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// quarantineWatch records, across every client of the test process, how
// many quarantined jobs (Recoveries >= 2) run at once.
type quarantineWatch struct {
	now, most atomic.Int64
	mu        sync.Mutex
	log       []string
}

func (w *quarantineWatch) enter(job *redeq.Job) func() {
	if job.Recoveries < 2 {
		return func() {}
	}
	n := w.now.Add(1)
	for {
		m := w.most.Load()
		if n <= m || w.most.CompareAndSwap(m, n) {
			break
		}
	}
	w.mu.Lock()
	w.log = append(w.log, fmt.Sprintf("%s start %s/%s (%d running)", time.Now().Format("15:04:05.000"), job.Topic, job.ID, n))
	w.mu.Unlock()
	return func() {
		w.now.Add(-1)
		w.mu.Lock()
		w.log = append(w.log, fmt.Sprintf("%s end %s/%s", time.Now().Format("15:04:05.000"), job.Topic, job.ID))
		w.mu.Unlock()
	}
}

// TestReview15ShutdownLetsAnotherClientRunQuarantinedBeside attacks
// promise 1 ("only one [quarantined job] at a time in a process (whatever
// the clients and topics in it)"). A process embeds clients X (topic a)
// and Y (topic b). X runs the quarantined job qa (the poison suspect, a
// 3 s handler); Y's quarantined job qb waits for it, as it should. Then
// the process begins a graceful shutdown of X (SIGTERM: modules stop one
// by one), which waits for qa to finish. The dispatcher of X exits at
// once with fetchCtx and its deferred releaseSolo gives up the process's
// quarantine while qa still runs, so Y fetches qb beside it. Had qa been
// the poison, qb would be counted a third time and go dead.
func TestReview15ShutdownLetsAnotherClientRunQuarantinedBeside(t *testing.T) {
	if !isolated(t) {
		return // it takes the quarantine slot: a process of its own
	}
	_, be := privateServer(t)
	ctx := context.Background()
	cfg := testutil.Config(t)
	e := setup(t, be, cfg)
	require.NoError(t, e.c.Start(ctx)) // moves, consumes nothing

	var w quarantineWatch
	started := make(chan string, 10)
	mk := func(topic string, hold time.Duration) *listener {
		l := newListener(topic, func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			done := w.enter(job)
			defer done()
			started <- job.ID
			time.Sleep(hold) // a handler finishing its work, as a graceful shutdown lets it
			ch.Ack()
			return nil
		})
		l.workers = 4
		return l
	}
	require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "a", ID: "qa"}))
	quarantine(t, e.rdb, e.cfg, "a", "qa", 2)
	x := e.another(t, nil)
	startWith(t, x, mk("a", 3*time.Second))
	select {
	case id := <-started:
		require.Equal(t, "qa", id)
	case <-time.After(5 * time.Second):
		t.Fatal("qa never ran")
	}
	require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "b", ID: "qb"}))
	quarantine(t, e.rdb, e.cfg, "b", "qb", 2)
	y := e.another(t, nil)
	startWith(t, y, mk("b", 100*time.Millisecond))
	time.Sleep(500 * time.Millisecond)
	require.Equal(t, int64(1), w.most.Load(), "qb ran beside qa before any shutdown")

	shut := make(chan error, 1)
	go func() { shut <- x.Shutdown(ctx) }()
	select {
	case id := <-started:
		t.Logf("%s started %v", id, w.now.Load())
	case <-time.After(5 * time.Second):
	}
	require.NoError(t, <-shut)
	waitFor(t, 5*time.Second, "qb done", func() bool { return state(t, e.c, "b", "qb") != redeq.StateInFlight && w.now.Load() == 0 })
	w.mu.Lock()
	t.Logf("quarantined runs:\n%v", w.log)
	w.mu.Unlock()
	require.Equal(t, int64(1), w.most.Load(),
		"during client X's graceful Shutdown, client Y of the same process ran quarantined qb while X's quarantined qa still ran")
}

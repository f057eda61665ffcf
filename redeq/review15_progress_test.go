package redeq_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestReview15ManyQuarantinedWorkersOne attacks promise 2: twelve topics,
// Workers 1, each with a quarantined job at the head of a backlog, and a
// stream of healthy jobs into every topic. Every quarantined job must run
// (one at a time) and every topic must drain its backlog.
func TestReview15ManyQuarantinedWorkersOne(t *testing.T) {
	if !isolated(t) {
		return // it takes the quarantine slot: a process of its own
	}
	_, be := privateServer(t)
	ctx := context.Background()
	cfg := testutil.Config(t)
	cfg.Workers = 1
	e := setup(t, be, cfg)
	require.NoError(t, e.c.Start(ctx))
	const topics = 12
	var cnt runCounter
	var ls []redeq.Listener
	for i := range topics {
		topic := fmt.Sprint("t", i)
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: "q"}))
		quarantine(t, e.rdb, e.cfg, topic, "q", 2)
		jobs := make([]*redeq.Job, 50)
		for j := range jobs {
			jobs[j] = &redeq.Job{Topic: topic, ID: fmt.Sprint("j", j)}
		}
		require.NoError(t, e.c.AddBatch(ctx, jobs))
		l := cnt.listener(topic, 5*time.Millisecond)
		l.workers = 1
		ls = append(ls, l)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			_ = e.c.Add(ctx, &redeq.Job{Topic: fmt.Sprint("t", i%topics), ID: fmt.Sprint("s", i)})
		}
	})
	defer func() { close(stop); wg.Wait() }()
	c := e.another(t, nil)
	startWith(t, c, ls...)
	deadline := time.Now().Add(20 * time.Second)
	for {
		var waiting []string
		for i := range topics {
			topic := fmt.Sprint("t", i)
			if s := state(t, e.c, topic, "q"); s != redeq.State("") {
				waiting = append(waiting, fmt.Sprintf("%s:q=%s runs=%d", topic, s, cnt.of(topic).Load()))
			} else if cnt.of(topic).Load() < 51 {
				waiting = append(waiting, fmt.Sprintf("%s runs=%d", topic, cnt.of(topic).Load()))
			}
		}
		if len(waiting) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s, topics not done: %v", waiting)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestReview15QuarantineWaitersSurviveShutdownPauseDelete attacks
// promise 2 with the waiting side: topic "y" runs a 2 s quarantined job;
// meanwhile "x" has a quarantined job waiting (then deleted), "p" (paused)
// has one, and "w" has one; the consuming client is shut down while they
// wait and a new client of the process starts. After y's job, everything
// left must run: w's job, x's healthy jobs, and p's job once resumed.
func TestReview15QuarantineWaitersSurviveShutdownPauseDelete(t *testing.T) {
	if !isolated(t) {
		return // it takes the quarantine slot: a process of its own
	}
	_, be := privateServer(t)
	ctx := context.Background()
	cfg := testutil.Config(t)
	e := setup(t, be, cfg)
	require.NoError(t, e.c.Start(ctx))
	var cnt runCounter
	mk := func() []redeq.Listener {
		var out []redeq.Listener
		for _, topic := range []string{"x", "p", "w"} {
			out = append(out, cnt.listener(topic, 5*time.Millisecond))
		}
		ly := newListener("y", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			cnt.of("y").Add(1)
			time.Sleep(2 * time.Second)
			ch.Ack()
			return nil
		})
		ly.workers = 2
		return append(out, ly)
	}
	add := func(topic, id string, rec int) {
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: id}))
		if rec > 0 {
			quarantine(t, e.rdb, e.cfg, topic, id, rec)
		}
	}
	add("y", "qy", 2)
	c1 := e.another(t, nil)
	startWith(t, c1, mk()...)
	waitFor(t, 5*time.Second, "qy running", func() bool { return cnt.of("y").Load() == 1 })
	require.NoError(t, e.c.Pause(ctx, "p"))
	// x and w are paused while their jobs are added and marked: the idle
	// listener of a topic may fetch a job due at once before the test
	// marks it quarantined (a CI run saw qx run and be acked in that gap).
	require.NoError(t, e.c.Pause(ctx, "x"))
	require.NoError(t, e.c.Pause(ctx, "w"))
	add("x", "qx", 2)
	add("x", "x1", 0)
	add("p", "qp", 2)
	add("w", "qw", 2)
	add("w", "w1", 0)
	require.NoError(t, e.c.Resume(ctx, "x"))
	require.NoError(t, e.c.Resume(ctx, "w"))
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, int64(0), cnt.of("w").Load(), "w ran beside y's quarantined job")
	_, err := e.c.Delete(ctx, "x", "qx")
	require.NoError(t, err)
	// Shut down while qw, qx and qp wait (qy's handler finishes in the grace).
	require.NoError(t, c1.Shutdown(ctx))
	c2 := e.another(t, nil)
	startWith(t, c2, mk()...)
	add("x", "x2", 0)
	waitFor(t, 15*time.Second, "w and x done", func() bool {
		return state(t, e.c, "w", "qw") == redeq.State("") && state(t, e.c, "w", "w1") == redeq.State("") &&
			state(t, e.c, "x", "x1") == redeq.State("") && state(t, e.c, "x", "x2") == redeq.State("")
	})
	require.NoError(t, e.c.Resume(ctx, "p"))
	waitFor(t, 10*time.Second, "p's quarantined job after resume", func() bool { return state(t, e.c, "p", "qp") == redeq.State("") })
}

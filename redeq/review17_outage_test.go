package redeq_test

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// lineLog collects every log line at Info and above, timestamped.
type lineLog struct {
	mu    sync.Mutex
	lines []string
	at    []time.Time
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		l.lines = append(l.lines, s)
		l.at = append(l.at, time.Now())
	}
	return len(p), nil
}

func (l *lineLog) since(t0 time.Time) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for i, s := range l.lines {
		if !l.at[i].Before(t0) {
			out = append(out, s)
		}
	}
	return out
}

// TestReview17OutageManyBuckets attacks promise 3 on a topic with 16
// buckets and two consuming clients: the redis-server process is stopped
// (SIGSTOP) for 10 s while jobs keep falling due. The loops must back off
// and log a handful of lines; afterwards every job runs exactly once,
// none before its due time, and the jobs due during the outage run soon
// after it.
func TestReview17OutageManyBuckets(t *testing.T) {
	t.Parallel()
	srv, be := privateServer(t)
	ctx := context.Background()
	cfg := testutil.Config(t)
	cfg.Concurrency = 16
	var logs lineLog
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	e := setup(t, be, cfg)
	runs := map[string][]time.Time{}
	var mu sync.Mutex
	due := map[string]time.Time{}
	handler := func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		mu.Lock()
		runs[job.ID] = append(runs[job.ID], time.Now())
		mu.Unlock()
		time.Sleep(20 * time.Millisecond)
		ch.Ack()
		return nil
	}
	l1, l2 := newListener("t", handler), newListener("t", handler)
	l1.workers, l2.workers = 4, 4
	startWith(t, e.c, l1)
	startWith(t, e.another(t, nil), l2)

	const n = 300
	base := time.Now()
	var jobs []*redeq.Job
	for i := range n {
		at := base.Add(time.Duration(i) * 70 * time.Millisecond) // over 21 s
		id := fmt.Sprint("j", i)
		due[id] = at
		jobs = append(jobs, &redeq.Job{Topic: "t", ID: id, RunAt: at})
	}
	require.NoError(t, e.c.AddBatch(ctx, jobs))
	time.Sleep(3 * time.Second)

	pid := serverPid(t, srv)
	stopAt := time.Now()
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGCONT) })
	time.Sleep(10 * time.Second)
	require.NoError(t, syscall.Kill(pid, syscall.SIGCONT))
	contAt := time.Now()

	waitFor(t, 40*time.Second, "every job ran", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(runs) == n
	})
	time.Sleep(time.Second) // doubles, if any
	mu.Lock()
	defer mu.Unlock()
	var twice, early []string
	var lateAfterCont time.Duration
	for id, rs := range runs {
		if len(rs) > 1 {
			twice = append(twice, id)
		}
		if e := earlyBy(rs[0], due[id], base); e > 5*time.Millisecond {
			early = append(early, fmt.Sprintf("%s %v early", id, e))
		}
		if due[id].Before(contAt) && due[id].After(stopAt) {
			lateAfterCont = max(lateAfterCont, rs[0].Sub(contAt))
		}
	}
	lines := logs.since(stopAt)
	sort.Strings(twice)
	t.Logf("%d log lines from the stop on:\n%s", len(lines), strings.Join(lines, "\n"))
	t.Logf("ran twice: %v; early: %v; the last job due during the stop ran %v after SIGCONT",
		twice, early, lateAfterCont.Round(time.Millisecond))
	require.Empty(t, twice, "jobs ran twice")
	require.Empty(t, early, "jobs ran before their due time")
	require.Less(t, lateAfterCont, 5*time.Second, "throughput did not return after the outage")
	require.LessOrEqual(t, len(lines), 20, "an outage of 10 s logged more than a handful of lines")
}

package redeq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// settleReplyLost runs every other settle script and then reports its
// reply lost (an i/o timeout after Redis applied it).
type settleReplyLost struct{ n, lost atomic.Int64 }

func (h *settleReplyLost) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *settleReplyLost) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func isSettle(cmd redis.Cmder) bool {
	a := cmd.Args()
	if len(a) < 5 {
		return false
	}
	name := strings.ToLower(fmt.Sprint(a[0]))
	return (name == "evalsha" || name == "eval") && fmt.Sprint(a[2]) == "9" &&
		strings.HasSuffix(fmt.Sprint(a[3]), ":pool") && strings.Contains(fmt.Sprint(a[4]), ":inflight:")
}

func (h *settleReplyLost) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !isSettle(cmd) {
			return next(ctx, cmd)
		}
		if err := next(ctx, cmd); err != nil {
			return err
		}
		if h.n.Add(1)%2 == 0 {
			return nil
		}
		h.lost.Add(1)
		err := errors.New("read tcp: i/o timeout (simulated lost settle reply)")
		cmd.SetErr(err)
		return err
	}
}

// TestReview18OutcomesExactlyOnceDespiteLostSettleReplies attacks
// promise 1: every other settle's reply is lost after Redis applied it,
// so the lane applies each batch again. Jobs f* always fail (per-job
// intervals 300 ms, 500 ms, MaxRetries 2), jobs r* rejoin once after
// 300 ms then ack, jobs a* ack. Checked: each retry and rejoin comes no
// earlier than its interval after the previous run ended; attempts count
// 0, 1, 2 with no gap or repeat; FinalRetry runs once per f job; every f
// job ends dead, every other job gone; nothing is parked.
func TestReview18OutcomesExactlyOnceDespiteLostSettleReplies(t *testing.T) {
	t.Parallel()
	_, be := privateServer(t)
	ctx := context.Background()
	cfg := testutil.Config(t)
	cfg.Concurrency = 4
	e := setup(t, be, cfg)
	type run struct {
		attempt    int
		start, end time.Time
	}
	var mu sync.Mutex
	runs := map[string][]run{}
	rejoined := map[string]bool{}
	l := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		r := run{attempt: job.Attempt, start: time.Now()}
		time.Sleep(10 * time.Millisecond)
		var err error
		switch job.ID[0] {
		case 'f':
			err = errors.New("boom")
		case 'r':
			mu.Lock()
			first := !rejoined[job.ID]
			rejoined[job.ID] = true
			mu.Unlock()
			if first {
				ch.Rejoin(300 * time.Millisecond)
			} else {
				ch.Ack()
			}
		default:
			ch.Ack()
		}
		r.end = time.Now()
		mu.Lock()
		runs[job.ID] = append(runs[job.ID], r)
		mu.Unlock()
		return err
	})
	l.workers = 4
	hook := &settleReplyLost{}
	c := e.hooked(t, hook)
	startWith(t, c, l)
	intervals := []time.Duration{300 * time.Millisecond, 500 * time.Millisecond}
	var ids []string
	for i := range 10 {
		for _, p := range []string{"f", "r", "a"} {
			id := fmt.Sprint(p, i)
			ids = append(ids, id)
			j := &redeq.Job{Topic: "t", ID: id}
			if p == "f" {
				j.MaxRetries, j.RetryIntervals = 2, intervals
			}
			require.NoError(t, e.c.Add(ctx, j))
		}
	}
	waitFor(t, 15*time.Second, "all settled", func() bool {
		st := stats(t, e.c, "t")
		return st.Pool == st.Dead && st.Dead >= 10 && st.InFlight == 0
	})
	time.Sleep(time.Second) // anything early or doubled would show now
	st := stats(t, e.c, "t")
	mu.Lock()
	defer mu.Unlock()
	var bad []string
	fRuns := 0
	for _, id := range ids {
		rs := runs[id]
		switch id[0] {
		case 'f':
			fRuns = len(rs)
			for k := 1; k < len(rs); k++ {
				gap := rs[k].start.Sub(rs[k-1].end)
				if rs[k].attempt != k || gap < intervals[min(k-1, len(intervals)-1)] {
					bad = append(bad, fmt.Sprintf("%s run %d attempt %d gap %v", id, k, rs[k].attempt, gap))
				}
			}
		case 'r':
			if len(rs) != 2 || rs[1].attempt != 0 || rs[1].start.Sub(rs[0].end) < 300*time.Millisecond {
				bad = append(bad, fmt.Sprintf("%s runs %+v", id, rs))
			}
		default:
			if len(rs) != 1 {
				bad = append(bad, fmt.Sprintf("%s ran %d times", id, len(rs)))
			}
		}
	}
	finals := map[string]int{}
	l.mu.Lock()
	for _, j := range l.finals {
		finals[j.ID]++
	}
	l.mu.Unlock()
	t.Logf("settles %d, replies lost %d; f jobs ran %d times each; finals %v; stats %+v; bad %v",
		hook.n.Load(), hook.lost.Load(), fRuns, finals, st, bad)
	require.Positive(t, hook.lost.Load())
	require.Empty(t, bad)
	require.Len(t, finals, 10)
	for id, n := range finals {
		require.Equal(t, 1, n, id)
	}
	require.Equal(t, int64(10), st.Dead)
	require.Equal(t, int64(10), st.Pool)
	require.Zero(t, st.UnAck)
}

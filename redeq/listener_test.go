package redeq_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/redeq"
)

// delivery is one call of a test listener.
type delivery struct {
	job *redeq.Job
	at  time.Time
}

// listener is a test Listener that records every delivery and answers
// through handle (ack when nil).
type listener struct {
	topic   string
	handle  func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error
	onFinal func(job *redeq.Job)
	workers int

	mu     sync.Mutex
	seen   []delivery
	finals []*redeq.Job
	signal chan struct{}
}

func newListener(topic string, handle func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error) *listener {
	return &listener{topic: topic, handle: handle, signal: make(chan struct{}, 1)}
}

func (l *listener) Topic() string { return l.topic }

func (l *listener) Workers() int { return l.workers }

func (l *listener) OnJob(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
	l.mu.Lock()
	l.seen = append(l.seen, delivery{job: job, at: time.Now()})
	l.mu.Unlock()
	select {
	case l.signal <- struct{}{}:
	default:
	}
	if l.handle == nil {
		ch.Ack()
		return nil
	}
	return l.handle(ctx, job, ch)
}

func (l *listener) FinalRetry(ctx context.Context, job *redeq.Job) {
	l.mu.Lock()
	l.finals = append(l.finals, job)
	l.mu.Unlock()
	if l.onFinal != nil {
		l.onFinal(job)
	}
}

func (l *listener) deliveries() []delivery {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]delivery(nil), l.seen...)
}

func (l *listener) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.seen)
}

func (l *listener) finalCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.finals)
}

// byID counts deliveries per job id.
func (l *listener) byID() map[string]int {
	out := map[string]int{}
	for _, d := range l.deliveries() {
		out[d.job.ID]++
	}
	return out
}

// startWith registers ls on c and starts it.
func startWith(t *testing.T, c *redeq.Client, ls ...redeq.Listener) {
	t.Helper()
	for _, l := range ls {
		require.NoError(t, c.Register(l))
	}
	require.NoError(t, c.Start(context.Background()))
}

// stats reads a topic's stats.
func stats(t *testing.T, c *redeq.Client, topic string) redeq.Stats {
	t.Helper()
	st, err := c.Stats(context.Background(), topic)
	require.NoError(t, err)
	return st
}

func redisZ(member string) redis.Z { return redis.Z{Score: 0, Member: member} }

// tally counts runs per job id across the listeners of several clients;
// its handle acks every job.
type tally struct {
	mu   sync.Mutex
	runs map[string][]int // per job, the Recoveries each run saw
}

func newTally() *tally { return &tally{runs: map[string][]int{}} }

func (t *tally) handle(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
	t.mu.Lock()
	t.runs[job.ID] = append(t.runs[job.ID], job.Recoveries)
	t.mu.Unlock()
	ch.Ack()
	return nil
}

// distinct is the number of jobs that ran at least once.
func (t *tally) distinct() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.runs)
}

// extra is the number of runs beyond the first, over all jobs.
func (t *tally) extra() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, rs := range t.runs {
		n += len(rs) - 1
	}
	return n
}

// unexplained is the number of runs beyond the first that no recovery
// explains. A job acked by every run runs again only when the reaper took
// it from a consumer it found silent, which adds one to its Recoveries; so
// two runs of a job that saw the same count are one run too many.
func (t *tally) unexplained() int {
	n, _ := t.unexplainedRuns()
	return n
}

// unexplainedRuns is unexplained, with the Recoveries of each run of up to
// ten of the jobs concerned.
func (t *tally) unexplainedRuns() (int, map[string][]int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, some := 0, map[string][]int{}
	for id, rs := range t.runs {
		if k := len(rs) - len(slices.Compact(slices.Sorted(slices.Values(rs)))); k > 0 {
			n += k
			if len(some) < 10 {
				some[id] = rs
			}
		}
	}
	return n, some
}

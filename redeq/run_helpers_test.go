package redeq_test

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// runRecorder records handler runs across listeners and clients on the
// kit's Recorder (every run of every job with its bound, Attempt,
// Recoveries, start, end and result; the handlers running at once per
// bound; a job running twice at once), plus what only these tests ask:
// the jobs a handler acked, FinalRetry calls and canceled runs. A handler
// calls enter when it starts and leave, with the index enter returned,
// when it returns.
type runRecorder struct {
	testutil.Recorder
	mu       sync.Mutex
	ends     []func(result string) // per index enter returned
	asked    map[string]int        // runs that called ch.Ack and returned nil
	finals   map[string]int        // FinalRetry calls per job
	canceled int                   // runs that saw their context canceled
	byKind   map[int]int           // canceled runs per kind of handler
}

// handlerRun is one run of a job's handler.
type handlerRun struct {
	bound               string
	attempt, recoveries int
	start, end          time.Time
	result              string
}

func newRunRecorder() *runRecorder {
	return &runRecorder{asked: map[string]int{}, finals: map[string]int{}, byKind: map[int]int{}}
}

// enter records the start of a run of job under bound; it returns the
// run's index for leave.
func (r *runRecorder) enter(bound string, job *redeq.Job) int {
	end := r.BeginWith(testutil.Run{ID: job.ID, Bound: bound, Attempt: job.Attempt, Recoveries: job.Recoveries})
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ends = append(r.ends, end)
	return len(r.ends) - 1
}

// leave records the end of run i, and what it returned.
func (r *runRecorder) leave(_, _ string, i int, result string) {
	r.mu.Lock()
	end := r.ends[i]
	r.mu.Unlock()
	end(result)
}

// ack acks the job on ch and counts it as asked to ack.
func (r *runRecorder) ack(id string, ch *redeq.Channel) error {
	ch.Ack()
	r.mu.Lock()
	r.asked[id]++
	r.mu.Unlock()
	return nil
}

// cancel counts a run of the given kind that saw its context canceled.
func (r *runRecorder) cancel(kind int) {
	r.mu.Lock()
	r.canceled++
	r.byKind[kind]++
	r.mu.Unlock()
}

// final counts a FinalRetry call for id.
func (r *runRecorder) final(id string) {
	r.mu.Lock()
	r.finals[id]++
	r.mu.Unlock()
}

// runningIn returns how many handlers of bound run now.
func (r *runRecorder) runningIn(bound string) int { return r.RunningIn(bound) }

// runningNow returns how many handlers run now, whatever their bound.
func (r *runRecorder) runningNow() int { return r.Running() }

// count returns how many runs of id began.
func (r *runRecorder) count(id string) int { return r.Count(id) }

// nth is count, for a handler asking which run of its job it is.
func (r *runRecorder) nth(id string) int { return r.count(id) }

// counts returns how many runs of each job began.
func (r *runRecorder) counts() map[string]int { return r.Counts() }

func (r *runRecorder) finalCount(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.finals[id]
}

func (r *runRecorder) get(id string) []handlerRun {
	var out []handlerRun
	for _, run := range r.Of(id) {
		out = append(out, handlerRun{bound: run.Bound, attempt: run.Attempt, recoveries: run.Recoveries,
			start: run.At, end: run.End, result: run.Result})
	}
	return out
}

// twiceAtOnce returns the jobs seen running twice at once.
func (r *runRecorder) twiceAtOnce() []string { return r.AtOnce() }

// summary returns, for the jobs prefix0 .. prefix(n-1), those no handler
// acked, and how many runs there were, with an attempt spent and
// recovered.
func (r *runRecorder) summary(prefix string, n int) (lost []string, spent, recovered, runs int) {
	byID := r.ByID()
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range n {
		id := fmt.Sprint(prefix, i)
		if r.asked[id] == 0 {
			lost = append(lost, id)
		}
		for _, run := range byID[id] {
			runs++
			if run.Attempt > 0 {
				spent++
			}
			if run.Recoveries > 0 {
				recovered++
			}
		}
	}
	return lost, spent, recovered, runs
}

// describe lists id's runs, their times relative to base.
func (r *runRecorder) describe(id string, base time.Time) string {
	var parts []string
	for _, run := range r.get(id) {
		end := "running"
		if !run.end.IsZero() {
			end = ms(run.end.Sub(base))
		}
		parts = append(parts, fmt.Sprintf("%s[%s..%s %s att%d rec%d]", run.bound, ms(run.start.Sub(base)), end, run.result, run.attempt, run.recoveries))
	}
	return strings.Join(parts, " ")
}

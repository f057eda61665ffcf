package redeq_test

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redeq-go/redeq/redeq"
)

// runRecorder records handler runs across listeners and clients: every
// run of every job (its bound, Attempt, Recoveries, start, end and
// result), the handlers running at once per bound (one listener object,
// or one client), a job running twice at once, the jobs a handler acked,
// FinalRetry calls and canceled runs. A handler calls enter when it
// starts and leave, with the index enter returned, when it returns.
type runRecorder struct {
	mu       sync.Mutex
	t0       time.Time
	now, max map[string]int // handlers running at once, per bound
	running  map[string]int // per job
	twice    []string       // jobs seen running twice at once
	runs     map[string][]handlerRun
	asked    map[string]int // runs that called ch.Ack and returned nil
	finals   map[string]int // FinalRetry calls per job
	canceled int            // runs that saw their context canceled
	byKind   map[int]int    // canceled runs per kind of handler
}

// handlerRun is one run of a job's handler.
type handlerRun struct {
	bound               string
	attempt, recoveries int
	start, end          time.Time
	result              string
}

func newRunRecorder() *runRecorder {
	return &runRecorder{t0: time.Now(), now: map[string]int{}, max: map[string]int{}, running: map[string]int{},
		runs: map[string][]handlerRun{}, asked: map[string]int{}, finals: map[string]int{}, byKind: map[int]int{}}
}

// enter records the start of a run of job under bound; it returns the
// run's index for leave.
func (r *runRecorder) enter(bound string, job *redeq.Job) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.now[bound]++
	r.max[bound] = max(r.max[bound], r.now[bound])
	r.running[job.ID]++
	if r.running[job.ID] > 1 {
		r.twice = append(r.twice, job.ID)
	}
	r.runs[job.ID] = append(r.runs[job.ID], handlerRun{bound: bound, attempt: job.Attempt, recoveries: job.Recoveries, start: time.Now()})
	return len(r.runs[job.ID]) - 1
}

// leave records the end of run i of job id, and what it returned.
func (r *runRecorder) leave(bound, id string, i int, result string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.now[bound]--
	r.running[id]--
	r.runs[id][i].end = time.Now()
	r.runs[id][i].result = result
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
func (r *runRecorder) runningIn(bound string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.now[bound]
}

// runningNow returns how many handlers run now, whatever their bound.
func (r *runRecorder) runningNow() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, k := range r.running {
		n += k
	}
	return n
}

// count returns how many runs of id began.
func (r *runRecorder) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.runs[id])
}

// nth is count, for a handler asking which run of its job it is.
func (r *runRecorder) nth(id string) int { return r.count(id) }

// counts returns how many runs of each job began.
func (r *runRecorder) counts() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for id, rs := range r.runs {
		out[id] = len(rs)
	}
	return out
}

func (r *runRecorder) finalCount(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.finals[id]
}

func (r *runRecorder) get(id string) []handlerRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]handlerRun(nil), r.runs[id]...)
}

func (r *runRecorder) twiceAtOnce() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.twice...)
}

// summary returns, for the jobs prefix0 .. prefix(n-1), those no handler
// acked, and how many runs there were, with an attempt spent and
// recovered.
func (r *runRecorder) summary(prefix string, n int) (lost []string, spent, recovered, runs int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range n {
		id := fmt.Sprint(prefix, i)
		if r.asked[id] == 0 {
			lost = append(lost, id)
		}
		for _, run := range r.runs[id] {
			runs++
			if run.attempt > 0 {
				spent++
			}
			if run.recoveries > 0 {
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

package testutil

import (
	"slices"
	"sync"
	"time"
)

// Run is one run of a job a Recorder saw.
type Run struct {
	ID string
	At time.Time
}

// Recorder records the jobs a test's handlers run: which, how often and
// when. Its zero value is ready to use and it is safe for concurrent use.
// Ran signals each record, so that a test waits for a run instead of
// sleeping.
type Recorder struct {
	mu   sync.Mutex
	runs []Run
	ran  chan struct{}
}

// Record notes one run of id, now.
func (r *Recorder) Record(id string) {
	r.mu.Lock()
	r.runs = append(r.runs, Run{ID: id, At: time.Now()})
	ch := r.signal()
	r.mu.Unlock()
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (r *Recorder) signal() chan struct{} {
	if r.ran == nil {
		r.ran = make(chan struct{}, 1)
	}
	return r.ran
}

// Ran receives after one or more runs were recorded since it last
// received.
func (r *Recorder) Ran() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.signal()
}

// Runs returns every run so far, in the order recorded.
func (r *Recorder) Runs() []Run {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.runs)
}

// Total is the number of runs of every job.
func (r *Recorder) Total() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.runs)
}

// Count is the number of runs of id.
func (r *Recorder) Count(id string) int {
	return len(r.Times(id))
}

// Counts maps each job that ran to its number of runs.
func (r *Recorder) Counts() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for _, run := range r.runs {
		out[run.ID]++
	}
	return out
}

// Times returns when id ran, in order.
func (r *Recorder) Times(id string) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []time.Time
	for _, run := range r.runs {
		if run.ID == id {
			out = append(out, run.At)
		}
	}
	return out
}

// Twice returns, sorted, the jobs that ran more than once.
func (r *Recorder) Twice() []string {
	var out []string
	for id, n := range r.Counts() {
		if n > 1 {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

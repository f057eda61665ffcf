package testutil

import (
	"slices"
	"sync"
	"time"
)

// Run is one run of a job a Recorder saw.
type Run struct {
	ID string
	At time.Time // when it began
	// Due is when the job was due, zero when the test did not say
	// (Record).
	Due time.Time
	// Attempt, Recoveries and Headers are the job's as its handler saw
	// them.
	Attempt, Recoveries int
	Headers             map[string]string
	// End is when it ended, zero while it runs or when the test recorded
	// only its start (Record).
	End time.Time
	// Bound names what ran it (a listener, a client), for the runs under
	// way at once per bound (RunningIn, MaxRunningIn); "" when the test
	// does not tell.
	Bound string
	// Result is what the test said of the run when it ended (EndWith),
	// such as "ack" or "canceled".
	Result string
}

// Recorder records the jobs a test's handlers run: which, how often,
// when, how many at once, and whether one ran before it was due. Its zero
// value is ready to use and it is safe for concurrent use, across the
// listeners and clients of a test. Ran signals each record, so that a
// test waits for a run instead of sleeping.
type Recorder struct {
	mu      sync.Mutex
	runs    []Run
	ran     chan struct{}
	running map[string]int // runs under way, per job
	now     int            // runs under way, of every job
	most    int            // the most runs under way at once
	nowIn   map[string]int // runs under way, per bound
	mostIn  map[string]int // the most runs under way at once, per bound
	atOnce  []string       // jobs seen running twice at once
}

// Record notes one run of id, now, that the test does not follow to its
// end.
func (r *Recorder) Record(id string) {
	r.add(Run{ID: id, At: time.Now()}, false)
}

// Begin notes the start of run of run.ID, now (its At is set here); the
// run counts as under way until the returned end is called, which records
// its end. Call end once, when the handler returns.
func (r *Recorder) Begin(run Run) (end func()) {
	endWith := r.BeginWith(run)
	return func() { endWith("") }
}

// BeginWith is Begin whose end also records the run's result.
func (r *Recorder) BeginWith(run Run) (end func(result string)) {
	run.At = time.Now()
	i := r.add(run, true)
	var once sync.Once
	return func(result string) {
		once.Do(func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.runs[i].End = time.Now()
			r.runs[i].Result = result
			r.running[run.ID]--
			r.now--
			r.nowIn[run.Bound]--
		})
	}
}

func (r *Recorder) add(run Run, under bool) int {
	r.mu.Lock()
	r.runs = append(r.runs, run)
	i := len(r.runs) - 1
	if under {
		if r.running == nil {
			r.running = map[string]int{}
		}
		r.running[run.ID]++
		if r.running[run.ID] == 2 {
			r.atOnce = append(r.atOnce, run.ID)
		}
		r.now++
		r.most = max(r.most, r.now)
		if r.nowIn == nil {
			r.nowIn, r.mostIn = map[string]int{}, map[string]int{}
		}
		r.nowIn[run.Bound]++
		r.mostIn[run.Bound] = max(r.mostIn[run.Bound], r.nowIn[run.Bound])
	}
	ch := r.signal()
	r.mu.Unlock()
	select {
	case ch <- struct{}{}:
	default:
	}
	return i
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

// Of returns the runs of id, in the order recorded.
func (r *Recorder) Of(id string) []Run {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Run
	for _, run := range r.runs {
		if run.ID == id {
			out = append(out, run)
		}
	}
	return out
}

// ByID maps each job that ran to its runs, in the order recorded.
func (r *Recorder) ByID() map[string][]Run {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]Run{}
	for _, run := range r.runs {
		out[run.ID] = append(out[run.ID], run)
	}
	return out
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

// Times returns when id ran, earliest first (runs recorded at once by
// several goroutines are stored in the order they took the lock, which
// need not be the order of their times).
func (r *Recorder) Times(id string) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []time.Time
	for _, run := range r.runs {
		if run.ID == id {
			out = append(out, run.At)
		}
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

// Firsts maps each job that ran to the start of its first run.
func (r *Recorder) Firsts() map[string]time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]time.Time{}
	for _, run := range r.runs {
		if _, ok := out[run.ID]; !ok {
			out[run.ID] = run.At
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

// AtOnce returns, sorted, the jobs of which two runs begun with Begin
// were under way at the same time.
func (r *Recorder) AtOnce() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := slices.Clone(r.atOnce)
	slices.Sort(out)
	return slices.Compact(out)
}

// Running is the number of runs begun with Begin and not ended.
func (r *Recorder) Running() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.now
}

// MaxRunning is the most runs begun with Begin that were under way at
// once.
func (r *Recorder) MaxRunning() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.most
}

// RunningIn is the number of runs of bound begun with Begin and not
// ended.
func (r *Recorder) RunningIn(bound string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.nowIn[bound]
}

// MaxRunningIn is the most runs of bound begun with Begin that were under
// way at once.
func (r *Recorder) MaxRunningIn(bound string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mostIn[bound]
}

// Early returns the runs that began more than tolerance before their Due
// time, by the wall clock (Redis schedules by the server's wall clock, so
// both sides of the comparison are wall readings). Runs without a Due
// time are never early.
func (r *Recorder) Early(tolerance time.Duration) []Run {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Run
	for _, run := range r.runs {
		if !run.Due.IsZero() && run.Due.Round(0).Sub(run.At.Round(0)) > tolerance {
			out = append(out, run)
		}
	}
	return out
}

package consumer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/redeq-go/redeq/ack"
	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/env"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/pool"
	"github.com/redeq-go/redeq/ready"
)

// The unit tests of this package run the runner's roles on fakes of its
// seams (fetcher, applier): no Redis, milliseconds each.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// event is one call a fake saw, in the order of a log shared by the
// fakes of one test.
type event struct {
	kind  string // "fetch", "reconcile", "settle", "release"
	topic string
	b     int
	want  int
	alone bool
	ids   []string // fetched, given back, settled or released
	err   error
}

// journal is the ordered log of the fakes' calls.
type journal struct {
	mu     sync.Mutex
	events []event
}

func (j *journal) add(e event) {
	j.mu.Lock()
	j.events = append(j.events, e)
	j.mu.Unlock()
}

func (j *journal) all() []event {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.events)
}

// index is the position of the first event matching f at or after from,
// or -1.
func (j *journal) index(from int, f func(event) bool) int {
	for i, e := range j.all() {
		if i >= from && f(e) {
			return i
		}
	}
	return -1
}

// fakeFetcher serves a topic's ready lists from memory, as fetch.lua
// does: up to want jobs; a quarantined job only alone, to a fetch that
// says the runner is idle and takes nothing else, else the fetch stops
// at it. Fetched jobs stay in its in-flight list until a reconcile gives
// back those the runner does not hold, or the test forgets them.
type fakeFetcher struct {
	topic string
	log   *journal

	mu       sync.Mutex
	ready    map[int][]ready.Item
	inflight map[int][]ready.Item
	// hook, when set, runs before each fetch of bucket b; it may block
	// (until ctx ends), fail the fetch (err), or let the fetch take the
	// jobs and then lose its reply (lose).
	hook func(ctx context.Context, b int) (lose bool, err error)
}

func newFakeFetcher(topic string, log *journal) *fakeFetcher {
	return &fakeFetcher{topic: topic, log: log, ready: map[int][]ready.Item{}, inflight: map[int][]ready.Item{}}
}

// push appends jobs to bucket b's ready list.
func (f *fakeFetcher) push(b int, items ...ready.Item) {
	f.mu.Lock()
	f.ready[b] = append(f.ready[b], items...)
	f.mu.Unlock()
}

func (f *fakeFetcher) setHook(h func(ctx context.Context, b int) (bool, error)) {
	f.mu.Lock()
	f.hook = h
	f.mu.Unlock()
}

func (f *fakeFetcher) Fetch(ctx context.Context, b, want int, alone bool) (ready.Batch, error) {
	f.mu.Lock()
	hook := f.hook
	f.mu.Unlock()
	lose := false
	if hook != nil {
		var err error
		if lose, err = hook(ctx, b); err != nil {
			f.log.add(event{kind: "fetch", topic: f.topic, b: b, want: want, alone: alone, err: err})
			return ready.Batch{}, err
		}
	}
	f.mu.Lock()
	var got ready.Batch
	list := f.ready[b]
	for len(list) > 0 && len(got.Items) < want {
		it := list[0]
		if quarantined([]ready.Item{it}) {
			if alone && len(got.Items) == 0 {
				got.Items = append(got.Items, it)
				list = list[1:]
				break
			}
			got.Stopped = true
			break
		}
		got.Items = append(got.Items, it)
		list = list[1:]
	}
	f.ready[b] = list
	got.More = len(list) > 0
	f.inflight[b] = append(f.inflight[b], got.Items...)
	f.mu.Unlock()
	e := event{kind: "fetch", topic: f.topic, b: b, want: want, alone: alone, ids: ids(got.Items)}
	if lose {
		e.err = errLost
		f.log.add(e)
		return ready.Batch{}, errLost
	}
	f.log.add(e)
	return got, nil
}

var errLost = errors.New("reply lost")

func (f *fakeFetcher) Reconcile(ctx context.Context, b int, held func(member string) bool) (int, error) {
	f.mu.Lock()
	var keep, back []ready.Item
	for _, it := range f.inflight[b] {
		if held(it.Member()) {
			keep = append(keep, it)
		} else {
			back = append(back, it)
		}
	}
	f.inflight[b] = keep
	f.ready[b] = append(slices.Clone(back), f.ready[b]...)
	f.mu.Unlock()
	f.log.add(event{kind: "reconcile", topic: f.topic, b: b, ids: ids(back)})
	return len(back), nil
}

// done removes settled or released deliveries from the in-flight list.
func (f *fakeFetcher) done(b int, members []string) {
	f.mu.Lock()
	f.inflight[b] = slices.DeleteFunc(f.inflight[b], func(it ready.Item) bool { return slices.Contains(members, it.Member()) })
	f.mu.Unlock()
}

// fakeApplier settles outcomes into memory; hook, when set, runs before
// each settle of bucket b and may block or fail it.
type fakeApplier struct {
	topic string
	log   *journal
	f     *fakeFetcher // its in-flight lists, when set

	mu   sync.Mutex
	hook func(ctx context.Context, b int) error
}

func (a *fakeApplier) setHook(h func(ctx context.Context, b int) error) {
	a.mu.Lock()
	a.hook = h
	a.mu.Unlock()
}

func (a *fakeApplier) Settle(ctx context.Context, b int, outs []ack.Outcome) ([]bool, error) {
	a.mu.Lock()
	hook := a.hook
	a.mu.Unlock()
	var ids []string
	var members []string
	for _, o := range outs {
		ids = append(ids, o.ID)
		members = append(members, ready.Member(o.Token, o.ID))
	}
	if hook != nil {
		if err := hook(ctx, b); err != nil {
			a.log.add(event{kind: "settle", topic: a.topic, b: b, ids: ids, err: err})
			return nil, err
		}
	}
	if a.f != nil {
		a.f.done(b, members)
	}
	a.log.add(event{kind: "settle", topic: a.topic, b: b, ids: ids})
	applied := make([]bool, len(outs))
	for i := range applied {
		applied[i] = true
	}
	return applied, nil
}

func (a *fakeApplier) Release(ctx context.Context, b int, members []string) (int, error) {
	if a.f != nil {
		a.f.done(b, members)
	}
	a.log.add(event{kind: "release", topic: a.topic, b: b, ids: members})
	return len(members), nil
}

func ids(items []ready.Item) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.ID
	}
	return out
}

// job is a fetched job with id, recovered recoveries times.
func job(id string, recoveries int) ready.Item {
	env := pool.Encode(pool.Header{CreatedMs: 1, Recoveries: recoveries}, []byte("body of "+id))
	return ready.Item{ID: id, Token: "tok-" + id, Envelope: string(env), Late: -1}
}

// listener is a Listener of topic whose OnJob is on.
type listener struct {
	topic   string
	workers int
	opts    Options
	on      func(ctx context.Context, job *pool.Job, ch *ack.Channel) error
	final   func(ctx context.Context, job *pool.Job)
}

func (l *listener) Topic() string { return l.topic }
func (l *listener) OnJob(ctx context.Context, job *pool.Job, ch *ack.Channel) error {
	return l.on(ctx, job, ch)
}
func (l *listener) ListenerOptions() Options {
	o := l.opts
	if o.Workers == 0 {
		o.Workers = l.workers
	}
	return o
}

// finalListener is a listener told when retries run out.
type finalListener struct{ *listener }

func (l finalListener) FinalRetry(ctx context.Context, job *pool.Job) { l.final(ctx, job) }

// acking acks every job.
func acking(ctx context.Context, job *pool.Job, ch *ack.Channel) error {
	ch.Ack()
	return nil
}

// rig is a runner on fakes, with the parts of a Group it uses.
type rig struct {
	g *Group
	r *runner
	f *fakeFetcher
	a *fakeApplier

	fetchCancel, handlerCancel, settleCancel context.CancelFunc
	fetchCtx                                 context.Context
	fetchWG, workerWG                        sync.WaitGroup
	started, stopped                         bool
}

// rigOptions shape a rig.
type rigOptions struct {
	buckets    int
	quarantine *Quarantine
	log        *journal
	cfg        func(*config.Config)
	logger     *slog.Logger // nil: discarded
}

// newRig builds a runner of l on fakes; start starts it, and the test's
// cleanup stops it as Shutdown does.
func newRig(t *testing.T, l Listener, o rigOptions) *rig {
	t.Helper()
	if o.buckets == 0 {
		o.buckets = 1
	}
	if o.log == nil {
		o.log = &journal{}
	}
	cfg := config.Default()
	cfg.Concurrency = o.buckets
	if o.cfg != nil {
		o.cfg(&cfg)
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	q := o.quarantine
	if q == nil {
		q = NewQuarantine()
	}
	if o.logger == nil {
		o.logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	g := &Group{
		cfg: cfg, env: env.New(o.logger), cid: "consumer-1",
		quarantine: q, runners: map[string]*runner{}, base: time.Now(),
	}
	rg := &rig{g: g}
	g.handlerCtx, rg.handlerCancel = context.WithCancel(context.Background())
	g.settleCtx, rg.settleCancel = context.WithCancel(context.Background())
	rg.fetchCtx, rg.fetchCancel = context.WithCancel(context.Background())
	rg.f = newFakeFetcher(l.Topic(), o.log)
	rg.a = &fakeApplier{topic: l.Topic(), log: o.log, f: rg.f}
	r := newRunner(g, l, o.buckets)
	r.fetcher, r.applier = rg.f, rg.a
	r.slowAfter = 20 * time.Millisecond
	for b := range r.backoff {
		r.backoff[b] = env.Backoff{Min: time.Millisecond, Max: 5 * time.Millisecond}
	}
	r.retryWait = env.Backoff{Min: time.Millisecond, Max: 5 * time.Millisecond}
	g.runners[l.Topic()] = r
	rg.r = r
	t.Cleanup(rg.stop)
	return rg
}

func (rg *rig) start() {
	rg.started = true
	rg.r.runAll(rg.fetchCtx, &rg.fetchWG, &rg.workerWG)
}

// stop ends the runner as Shutdown does: no more fetches, handlers
// canceled, the outcomes on their way applied, the settler stopped.
// Contexts of a rig never started are only canceled.
func (rg *rig) stop() {
	if !rg.started || rg.stopped {
		rg.fetchCancel()
		rg.handlerCancel()
		rg.settleCancel()
		return
	}
	rg.stopped = true
	rg.g.stopping.Store(true)
	// As Shutdown's budget: outcomes not applied by its end are given up,
	// so that a runner whose settles hang still stops.
	budget, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	context.AfterFunc(budget, func() {
		if budget.Err() == context.DeadlineExceeded {
			rg.settleCancel()
		}
	})
	rg.fetchCancel()
	rg.handlerCancel()
	rg.fetchWG.Wait()
	rg.workerWG.Wait()
	rg.r.submits.Wait()
	close(rg.r.stopSettle)
	rg.settleCancel()
	<-rg.r.settlerDone
}

// eventually polls cond until it holds, failing the test after a
// deadline that only a hung runner reaches.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.EventuallyEvery(t, 10*time.Second, time.Millisecond, what, cond)
}

// gate is a handler that blocks each job until the test opens its gate,
// and tells when each starts.
type gate struct {
	mu      sync.Mutex
	open    map[string]chan struct{}
	started chan string
	running int
	most    int // the most jobs running at once
	ran     map[string]int
}

func newGate() *gate {
	return &gate{open: map[string]chan struct{}{}, started: make(chan string, 1000), ran: map[string]int{}}
}

func (g *gate) ch(id string) chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	c, ok := g.open[id]
	if !ok {
		c = make(chan struct{})
		g.open[id] = c
	}
	return c
}

// let opens the gate of id: its handler acks and returns.
func (g *gate) let(id string) { close(g.ch(id)) }

// pass opens the gates of ids before their jobs come.
func (g *gate) pass(ids ...string) {
	for _, id := range ids {
		g.let(id)
	}
}

func (g *gate) handler(ctx context.Context, job *pool.Job, ch *ack.Channel) error {
	g.mu.Lock()
	g.running++
	g.most = max(g.most, g.running)
	g.ran[job.ID]++
	g.mu.Unlock()
	g.started <- job.ID
	defer func() {
		g.mu.Lock()
		g.running--
		g.mu.Unlock()
	}()
	select {
	case <-g.ch(job.ID):
		ch.Ack()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// wait returns the id of the next job whose handler starts.
func (g *gate) wait(t *testing.T) string {
	t.Helper()
	select {
	case id := <-g.started:
		return id
	case <-time.After(10 * time.Second):
		t.Fatal("timed out waiting for a handler to start")
		return ""
	}
}

// startedSince returns the ids of the jobs whose handlers started since
// the last wait, without waiting.
func (g *gate) startedSince() []string {
	var out []string
	for {
		select {
		case id := <-g.started:
			out = append(out, id)
		default:
			return out
		}
	}
}

func (g *gate) stats() (most int, ran map[string]int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := make(map[string]int, len(g.ran))
	for k, v := range g.ran {
		r[k] = v
	}
	return g.most, r
}

func settled(log *journal, topic, id string) func() bool {
	return func() bool {
		return log.index(0, func(e event) bool {
			return e.kind == "settle" && e.topic == topic && e.err == nil && slices.Contains(e.ids, id)
		}) >= 0
	}
}

func describe(log *journal) string {
	s := ""
	for _, e := range log.all() {
		s += fmt.Sprintf("\n  %s %s b%d want=%d alone=%v ids=%v err=%v", e.kind, e.topic, e.b, e.want, e.alone, e.ids, e.err)
	}
	return s
}

// logSignal is a slog handler that tells when a record with msg is
// logged: the runner's own word that it reached a decision.
type logSignal struct {
	msg  string
	seen chan struct{}
	once sync.Once
}

func newLogSignal(msg string) *logSignal { return &logSignal{msg: msg, seen: make(chan struct{})} }

func (h *logSignal) Enabled(context.Context, slog.Level) bool { return true }
func (h *logSignal) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.once.Do(func() { close(h.seen) })
	}
	return nil
}
func (h *logSignal) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logSignal) WithGroup(string) slog.Handler      { return h }

// wait waits until the message is logged.
func (h *logSignal) wait(t *testing.T) {
	t.Helper()
	select {
	case <-h.seen:
	case <-time.After(10 * time.Second):
		t.Fatalf("timed out waiting for the log %q", h.msg)
	}
}

package redeqtest

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/redeq"
)

// WaitTimeout bounds how long Drain and WaitIdle wait for a topic's jobs
// before they fail the test. What a started client does after Advance
// takes milliseconds, and a client that starts beside others gets its
// share of the buckets at once, whatever ScanInterval says (a joining
// client tells the others, which hand its buckets over), so the bound
// only covers a slow, shared test machine. (It was 30 s while a newcomer
// waited for the others' next announcement.)
const WaitTimeout = 10 * time.Second

// Env is a redeq client on an embedded Redis (miniredis) whose clock
// stands still until the test moves it with Advance. Build one with New.
// Its methods fail the test given to New (t.Fatal) instead of returning
// errors; call them from the test's goroutine.
type Env struct {
	t    testing.TB
	mini *miniredis.Miniredis
	rdb  *redis.Client
	cfg  config.Config

	mu      sync.Mutex
	now     time.Time
	clients []*redeq.Client
	closed  bool
}

// Option changes the settings of an Env's clients.
type Option func(*config.Config)

// WithConfig lets mod change the config of the Env's clients (AutoAck,
// Retry, RetryIntervals, Concurrency, ...). The Redis clock is the Env's
// whatever ScanInterval says.
func WithConfig(mod func(*config.Config)) Option { return Option(mod) }

// New starts an embedded Redis and a client on it, both closed by
// t.Cleanup (Close: the client shut down first, if it was started). The clock
// the scripts read (the Redis server's TIME) starts at the current time,
// to the millisecond, and moves only with Advance: a job due in 30
// minutes waits until the test advances 30 minutes, and then runs at
// once. Warnings and errors of the client go to the test's log.
func New(t testing.TB, opts ...Option) *Env {
	t.Helper()
	mini := miniredis.NewMiniRedis()
	if err := mini.Start(); err != nil {
		t.Fatalf("redeqtest: start the embedded Redis: %v", err)
	}
	now := time.Now().Truncate(time.Millisecond)
	mini.SetTime(now)
	rdb := redis.NewClient(&redis.Options{Addr: mini.Addr()})
	cfg := config.Default()
	cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg.ShutdownTimeout = 5 * time.Second
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	e := &Env{t: t, mini: mini, rdb: rdb, cfg: cfg, now: now}
	t.Cleanup(e.Close)
	e.NewClient()
	return e
}

// Close shuts the Env's clients down, then its Redis. t.Cleanup calls it;
// a test may call it first (later calls do nothing).
func (e *Env) Close() {
	e.mu.Lock()
	clients, closed := e.clients, e.closed
	e.closed = true
	e.mu.Unlock()
	if closed {
		return
	}
	for _, c := range clients {
		ctx, cancel := context.WithTimeout(context.Background(), 2*e.cfg.ShutdownTimeout)
		err := c.Shutdown(ctx)
		cancel()
		if err != nil && !errors.Is(err, redeq.ErrClientClosed) {
			e.t.Errorf("redeqtest: shutdown: %v", err)
		}
	}
	_ = e.rdb.Close()
	e.mini.Close()
}

// Client returns the Env's client, not started: register listeners and
// Start it (or call Start), as the service does.
func (e *Env) Client() *redeq.Client {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.clients[0]
}

// NewClient returns another client on the same Redis and clock, standing
// for another instance of the service; Close shuts it down too, and
// Advance wakes it.
func (e *Env) NewClient() *redeq.Client {
	e.t.Helper()
	c, err := redeq.New(e.rdb, e.cfg)
	if err != nil {
		e.t.Fatalf("redeqtest: new client: %v", err)
	}
	e.mu.Lock()
	e.clients = append(e.clients, c)
	e.mu.Unlock()
	return c
}

// Redis returns a connection to the embedded Redis, to look at its keys
// or to build clients of one's own.
func (e *Env) Redis() redis.UniversalClient { return e.rdb }

// Config returns the settings of the Env's clients, defaults filled in.
func (e *Env) Config() config.Config { return e.Client().Config() }

// Start registers ls on the Env's client and starts it.
func (e *Env) Start(ls ...redeq.Listener) *redeq.Client {
	e.t.Helper()
	c := e.Client()
	for _, l := range ls {
		if err := c.Register(l); err != nil {
			e.t.Fatalf("redeqtest: register: %v", err)
		}
	}
	if err := c.Start(context.Background()); err != nil {
		e.t.Fatalf("redeqtest: start: %v", err)
	}
	return c
}

// Now is the Env's clock: the Redis server's time, which due times are
// measured on.
func (e *Env) Now() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.now
}

// Advance moves the clock forward by d: what falls due by the new time
// becomes due, and the started clients look at once (Client.Wake), so it
// runs promptly whatever ScanInterval says; Advance does not wait for
// it (WaitIdle and Drain do). Retries and rejoins come due the same way.
// A negative d fails the test. Key expiries (locks, the replies kept for
// reruns) do not follow the clock.
//
// A handler's outcome is applied on the clock of when it is applied:
// after a handler ran, WaitIdle before Advance, or a retry meant for one
// minute after the failure is scheduled one minute after the move.
func (e *Env) Advance(d time.Duration) {
	e.t.Helper()
	if d < 0 {
		e.t.Fatalf("redeqtest: Advance(%v): the clock does not go back", d)
	}
	e.mu.Lock()
	e.now = e.now.Add(d)
	e.mini.SetTime(e.now)
	clients := append([]*redeq.Client(nil), e.clients...)
	e.mu.Unlock()
	for _, c := range clients {
		c.Wake()
	}
}

// Jobs returns every job of topic, in every state (scheduled, ready, in
// flight, un_ack, dead), each with its State; none for a topic never used.
func (e *Env) Jobs(topic string) []*redeq.Job {
	e.t.Helper()
	jobs, err := e.jobs(topic)
	if err != nil {
		e.t.Fatalf("redeqtest: jobs of %q: %v", topic, err)
	}
	return jobs
}

func (e *Env) jobs(topic string) ([]*redeq.Job, error) {
	ctx := context.Background()
	var out []*redeq.Job
	for _, st := range []redeq.State{redeq.StateScheduled, redeq.StateReady, redeq.StateInFlight, redeq.StateUnAck, redeq.StateDead} {
		cur := ""
		for {
			p, err := e.Client().List(ctx, topic, st, redeq.ListOptions{Limit: redeq.MaxListLimit, Cursor: cur})
			if errors.Is(err, redeq.ErrUnknownTopic) {
				return nil, nil
			}
			if err != nil {
				return nil, err
			}
			out = append(out, p.Jobs...)
			if cur = p.Next; cur == "" {
				break
			}
		}
	}
	return out, nil
}

// RequireAdded fails the test unless topic holds job id, and returns it,
// with its State, for further checks (Body, RunAt, Headers).
func (e *Env) RequireAdded(topic, id string) *redeq.Job {
	e.t.Helper()
	job, err := e.Client().Get(context.Background(), topic, id)
	if err != nil {
		if errors.Is(err, redeq.ErrJobNotFound) || errors.Is(err, redeq.ErrUnknownTopic) {
			e.t.Fatalf("redeqtest: job %q of topic %q was not added (topic holds %s)", id, topic, e.describe(topic))
		}
		e.t.Fatalf("redeqtest: get job %q of topic %q: %v", id, topic, err)
	}
	return job
}

// RequireNotAdded fails the test when topic holds job id.
func (e *Env) RequireNotAdded(topic, id string) {
	e.t.Helper()
	job, err := e.Client().Get(context.Background(), topic, id)
	switch {
	case err == nil:
		e.t.Fatalf("redeqtest: job %q of topic %q was added (%s, due %v)", id, topic, job.State, job.RunAt)
	case !errors.Is(err, redeq.ErrJobNotFound) && !errors.Is(err, redeq.ErrUnknownTopic):
		e.t.Fatalf("redeqtest: get job %q of topic %q: %v", id, topic, err)
	}
}

// describe names the jobs of topic, for a failure message.
func (e *Env) describe(topic string) string {
	jobs, err := e.jobs(topic)
	if err != nil {
		return err.Error()
	}
	if len(jobs) == 0 {
		return "no job"
	}
	var b strings.Builder
	for i, j := range jobs {
		if i == 10 {
			b.WriteString(", ...")
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(j.ID + " (" + string(j.State) + ")")
	}
	return b.String()
}

// Drain runs the waiting jobs of topic now: it makes every scheduled job
// due, whatever its due time, and waits, as WaitIdle, until the started
// client ran them. Retries and rejoins they ask for stay scheduled at
// their own time, on the Env's clock.
func (e *Env) Drain(topic string) {
	e.t.Helper()
	ctx := context.Background()
	jobs, err := e.jobs(topic)
	if err != nil {
		e.t.Fatalf("redeqtest: drain %q: %v", topic, err)
	}
	for _, j := range jobs {
		if j.State != redeq.StateScheduled {
			continue
		}
		err := e.Client().RescheduleIn(ctx, topic, j.ID, 0)
		if err != nil && !errors.Is(err, redeq.ErrJobNotFound) && !errors.Is(err, redeq.ErrJobNotWaiting) {
			e.t.Fatalf("redeqtest: drain %q: %v", topic, err)
		}
	}
	e.Advance(0)
	e.WaitIdle(topic)
}

// WaitIdle waits until each topic (every topic ever used, when none is
// named) has nothing to run now: no job due
// (scheduled at or before Now, or ready) and none in flight, so every
// handler that was due has run and its outcome is applied. It fails the
// test after WaitTimeout, naming what is left (a due job waits for
// ever when no started client listens to its topic).
func (e *Env) WaitIdle(topics ...string) {
	e.t.Helper()
	deadline := time.Now().Add(WaitTimeout)
	for {
		busy, err := e.busy(topics)
		if err != nil {
			e.t.Fatalf("redeqtest: wait for %q: %v", topics, err)
		}
		if busy == "" {
			// Twice in a row: a job read in no state between two
			// transitions (the lists are read one after the other).
			if busy, err = e.busy(topics); err == nil && busy == "" {
				return
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("redeqtest: after %v, still to run: %s (is the client started, with a listener of the topic?)", WaitTimeout, busy)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// busy names a job of topics that is due or in flight, "" when none.
func (e *Env) busy(topics []string) (string, error) {
	now := e.Now()
	if len(topics) == 0 {
		infos, err := e.Client().Topics(context.Background())
		if err != nil {
			return "", err
		}
		for _, ti := range infos {
			topics = append(topics, ti.Name)
		}
	}
	for _, topic := range topics {
		jobs, err := e.jobs(topic)
		if err != nil {
			return "", err
		}
		for _, j := range jobs {
			switch j.State {
			case redeq.StateReady, redeq.StateInFlight:
				return topic + "/" + j.ID + " (" + string(j.State) + ")", nil
			case redeq.StateScheduled:
				if !j.RunAt.After(now) {
					return topic + "/" + j.ID + " (due)", nil
				}
			}
		}
	}
	return "", nil
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	defer func() { _ = recover() }() // a log line after the test ended
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

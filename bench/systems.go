package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/redeq"
)

// system is one delayed-job library under test.
type system interface {
	Name() string
	// Enqueue adds one job due at (zero: now).
	Enqueue(ctx context.Context, id string, body []byte, at time.Time) error
	// EnqueueBatch adds jobs in the library's fastest way (redeq: AddBatch;
	// asynq has no batch call, so one Enqueue each).
	EnqueueBatch(ctx context.Context, ids []string, body []byte, at time.Time) error
	// Consume runs handle for every job with workers goroutines until stop.
	Consume(workers int, handle func(ctx context.Context, id string, body []byte, attempt int)) (stop func())
	Close()
}

const topic = "bench"

// --- redeq ---

type redeqSystem struct {
	newClient func() redis.UniversalClient
	cleanup   *cleanup
	rdb       redis.UniversalClient
	c         *redeq.Client
	cfg       config.Config
	close     func()
}

// newRedeq returns redeq with its defaults; what it starts is registered
// in cl (nil: nowhere), so a failed measurement stops it.
func newRedeq(newClient func() redis.UniversalClient, cl *cleanup) *redeqSystem {
	cfg := config.Default()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	rdb := newClient()
	c, err := redeq.New(rdb, cfg)
	if err != nil {
		rdb.Close()
		fail("redeq.New: %v", err)
	}
	return &redeqSystem{newClient: newClient, cleanup: cl, rdb: rdb, c: c, cfg: cfg, close: cl.add(func() { rdb.Close() })}
}

func (s *redeqSystem) Name() string { return "redeq" }

func (s *redeqSystem) Enqueue(ctx context.Context, id string, body []byte, at time.Time) error {
	return s.c.Add(ctx, &redeq.Job{Topic: topic, ID: id, Body: body, RunAt: at})
}

func (s *redeqSystem) EnqueueBatch(ctx context.Context, ids []string, body []byte, at time.Time) error {
	jobs := make([]*redeq.Job, len(ids))
	for i, id := range ids {
		jobs[i] = &redeq.Job{Topic: topic, ID: id, Body: body, RunAt: at}
	}
	return s.c.AddBatch(ctx, jobs)
}

type redeqListener struct {
	workers int
	handle  func(ctx context.Context, id string, body []byte, attempt int)
}

func (l redeqListener) Topic() string { return topic }
func (l redeqListener) Workers() int  { return l.workers }
func (l redeqListener) OnJob(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
	l.handle(ctx, job.ID, job.Body, job.Attempt)
	ch.Ack()
	return nil
}

func (s *redeqSystem) Consume(workers int, handle func(ctx context.Context, id string, body []byte, attempt int)) func() {
	return s.consume(workers, handle, nil)
}

// consume starts a consumer client, with setup (when not nil) run on it
// before it starts.
func (s *redeqSystem) consume(workers int, handle func(ctx context.Context, id string, body []byte, attempt int), setup func(*redeq.Client)) func() {
	return s.consumeWith(redeqListener{workers: workers, handle: handle}, setup)
}

// consumeWith starts a consumer client listening with l, with setup (when
// not nil) run on it before it starts. Every consumer the bench measures
// starts here, so that each runs in the current job state format.
func (s *redeqSystem) consumeWith(l redeq.Listener, setup func(*redeq.Client)) func() {
	rdb := s.newClient()
	closeRDB := s.cleanup.add(func() { rdb.Close() })
	c, err := redeq.New(rdb, s.cfg)
	if err != nil {
		fail("redeq.New: %v", err)
	}
	if setup != nil {
		setup(c)
	}
	// A deployment of this version alone: the namespace writes the current
	// job state format (a flush between measurements clears the switch).
	if err := c.UpgradeFormat(context.Background()); err != nil {
		fail("redeq UpgradeFormat: %v", err)
	}
	if err := c.Register(l); err != nil {
		fail("redeq Register: %v", err)
	}
	if err := c.Start(context.Background()); err != nil {
		fail("redeq Start: %v", err)
	}
	return s.cleanup.add(func() {
		_ = c.Shutdown(context.Background())
		closeRDB()
	})
}

func (s *redeqSystem) Close() { s.close() }

// --- asynq ---

// asynqTuned names asynq with its polling tuned for low latency.
const asynqTuned = "asynq-tuned"

type asynqSystem struct {
	newClient func() redis.UniversalClient
	cleanup   *cleanup
	tuned     bool
	rdb       redis.UniversalClient
	c         *asynq.Client
	close     func()
}

// newAsynq returns asynq with its defaults or, tuned, with the two polling
// intervals that bound its lateness (DelayedTaskCheckInterval, 5 s by
// default, and TaskCheckInterval, 1 s) at 100 ms, as a user who wants low
// latency would set them; what it starts is registered in cl.
func newAsynq(newClient func() redis.UniversalClient, cl *cleanup, tuned bool) *asynqSystem {
	rdb := newClient()
	c := asynq.NewClientFromRedisClient(rdb)
	return &asynqSystem{newClient: newClient, cleanup: cl, tuned: tuned, rdb: rdb, c: c, close: cl.add(func() {
		c.Close()
		rdb.Close()
	})}
}

func (s *asynqSystem) Name() string {
	if s.tuned {
		return asynqTuned
	}
	return "asynq"
}

func (s *asynqSystem) Enqueue(ctx context.Context, id string, body []byte, at time.Time) error {
	opts := []asynq.Option{asynq.TaskID(id)}
	if !at.IsZero() {
		opts = append(opts, asynq.ProcessAt(at))
	}
	_, err := s.c.EnqueueContext(ctx, asynq.NewTask(topic, body), opts...)
	return err
}

func (s *asynqSystem) EnqueueBatch(ctx context.Context, ids []string, body []byte, at time.Time) error {
	for _, id := range ids {
		if err := s.Enqueue(ctx, id, body, at); err != nil {
			return err
		}
	}
	return nil
}

func (s *asynqSystem) Consume(workers int, handle func(ctx context.Context, id string, body []byte, attempt int)) func() {
	rdb := s.newClient()
	closeRDB := s.cleanup.add(func() { rdb.Close() })
	cfg := asynq.Config{Concurrency: workers, LogLevel: asynq.FatalLevel}
	if s.tuned {
		cfg.DelayedTaskCheckInterval = 100 * time.Millisecond
		cfg.TaskCheckInterval = 100 * time.Millisecond
	}
	srv := asynq.NewServerFromRedisClient(rdb, cfg)
	mux := asynq.NewServeMux()
	mux.HandleFunc(topic, func(ctx context.Context, t *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		n, _ := asynq.GetRetryCount(ctx)
		handle(ctx, id, t.Payload(), n)
		return nil
	})
	if err := srv.Start(mux); err != nil {
		fail("asynq Start: %v", err)
	}
	return s.cleanup.add(func() {
		srv.Shutdown()
		closeRDB()
	})
}

func (s *asynqSystem) Close() { s.close() }

// counter counts handled jobs and signals when a target is reached.
type counter struct {
	mu     sync.Mutex
	n      int
	target int
	done   chan struct{}
	seen   map[string]int
}

func newCounter(target int) *counter {
	return &counter{target: target, done: make(chan struct{}), seen: map[string]int{}}
}

func (c *counter) add(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen[id]++
	if c.seen[id] > 1 {
		return
	}
	c.n++
	if c.n == c.target {
		close(c.done)
	}
}

func (c *counter) wait(timeout time.Duration) error {
	select {
	case <-c.done:
		return nil
	case <-time.After(timeout):
		c.mu.Lock()
		defer c.mu.Unlock()
		return fmt.Errorf("only %d of %d jobs ran within %v", c.n, c.target, timeout)
	}
}

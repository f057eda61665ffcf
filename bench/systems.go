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
	rdb       redis.UniversalClient
	c         *redeq.Client
	cfg       config.Config
}

func newRedeq(newClient func() redis.UniversalClient) *redeqSystem {
	cfg := config.Default()
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	rdb := newClient()
	c, err := redeq.New(rdb, cfg)
	if err != nil {
		panic(err)
	}
	return &redeqSystem{newClient: newClient, rdb: rdb, c: c, cfg: cfg}
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
	rdb := s.newClient()
	c, err := redeq.New(rdb, s.cfg)
	if err != nil {
		panic(err)
	}
	if err := c.Register(redeqListener{workers: workers, handle: handle}); err != nil {
		panic(err)
	}
	if err := c.Start(context.Background()); err != nil {
		panic(err)
	}
	return func() {
		_ = c.Shutdown(context.Background())
		rdb.Close()
	}
}

func (s *redeqSystem) Close() { s.rdb.Close() }

// --- asynq ---

type asynqSystem struct {
	newClient func() redis.UniversalClient
	rdb       redis.UniversalClient
	c         *asynq.Client
}

func newAsynq(newClient func() redis.UniversalClient) *asynqSystem {
	rdb := newClient()
	return &asynqSystem{newClient: newClient, rdb: rdb, c: asynq.NewClientFromRedisClient(rdb)}
}

func (s *asynqSystem) Name() string { return "asynq" }

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
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{Concurrency: workers, LogLevel: asynq.FatalLevel})
	mux := asynq.NewServeMux()
	mux.HandleFunc(topic, func(ctx context.Context, t *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		n, _ := asynq.GetRetryCount(ctx)
		handle(ctx, id, t.Payload(), n)
		return nil
	})
	if err := srv.Start(mux); err != nil {
		panic(err)
	}
	return func() {
		srv.Shutdown()
		rdb.Close()
	}
}

func (s *asynqSystem) Close() {
	s.c.Close()
	s.rdb.Close()
}

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

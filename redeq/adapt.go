package redeq

import (
	"context"
	"time"

	"github.com/redeq-go/redeq/ack"
	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/consumer"
	"github.com/redeq-go/redeq/pool"
	"github.com/redeq-go/redeq/ready"
)

// The consumer runs listeners, handlers and observers of its own types.
// Register, RegisterBroadcast, Use and Observe wrap the facade's once in
// the adapters below, which hand on the pointers the consumer passes (the
// same job, the same channel) converted: no copy, and no allocation per
// job but the context that carries the job to OnJob and FinalRetry
// (JobFromContext).

// listenerAdapter is a Listener as the consumer runs it.
type listenerAdapter struct {
	l    Listener
	opts consumer.Options
}

// adaptListener wraps l, with the options of a listener built by
// ListenerFunc or Typed, and FinalRetry when l has it.
func adaptListener(l Listener) consumer.Listener { return adaptListenerIn(l, nil) }

// adaptListenerIn is adaptListener in a client of config cfg (nil for
// none): a listener that sets no limit of its own takes the limits of its
// topic's section in cfg.Listeners.
func adaptListenerIn(l Listener, cfg *config.Config) consumer.Listener {
	a := &listenerAdapter{l: l}
	if o, ok := l.(interface{ options() consumer.Options }); ok {
		a.opts = o.options()
	}
	if cfg != nil && !a.opts.Limits.Set() {
		if sec, ok := cfg.ListenerOf(l.Topic()); ok {
			a.opts.Limits = ready.Limits{MaxRunning: sec.MaxRunning, Rate: sec.Rate, Per: sec.RatePer, Key: sec.LimitKey}
		}
	}
	if fr, ok := l.(FinalRetryListener); ok {
		return finalAdapter{a, fr}
	}
	return a
}

func (a *listenerAdapter) Topic() string { return a.l.Topic() }

func (a *listenerAdapter) OnJob(ctx context.Context, job *pool.Job, ch *ack.Channel) error {
	j := publicJob(job)
	return a.l.OnJob(ContextWithJob(ctx, j), j, (*Channel)(ch))
}

// ListenerOptions gives the consumer the options of a listener built by
// ListenerFunc or Typed; the zero Options (the config's) for any other.
func (a *listenerAdapter) ListenerOptions() consumer.Options { return a.opts }

// Workers is l's own worker count when it is a WorkerCounter; 0 keeps the
// config's.
func (a *listenerAdapter) Workers() int {
	if wc, ok := a.l.(WorkerCounter); ok {
		return wc.Workers()
	}
	return 0
}

// finalAdapter is a listenerAdapter of a FinalRetryListener.
type finalAdapter struct {
	*listenerAdapter
	fr FinalRetryListener
}

func (a finalAdapter) FinalRetry(ctx context.Context, job *pool.Job) {
	j := publicJob(job)
	a.fr.FinalRetry(ContextWithJob(ctx, j), j)
}

// broadcastAdapter is a BroadcastListener as the consumer runs it.
type broadcastAdapter struct{ bl BroadcastListener }

func (a *broadcastAdapter) Topics() []string { return a.bl.Topics() }

func (a *broadcastAdapter) OnBroadcast(ctx context.Context, job *pool.Job) {
	a.bl.OnBroadcast(ctx, publicJob(job))
}

// Invalid says why bl, built with bad arguments (BroadcastFunc of a nil
// function), cannot be registered; nil for any other.
func (a *broadcastAdapter) Invalid() error {
	if il, ok := a.bl.(interface{ Invalid() error }); ok {
		return il.Invalid()
	}
	return nil
}

// consumerHandler is h as the consumer calls it.
func consumerHandler(h Handler) consumer.Handler {
	return func(ctx context.Context, job *pool.Job, ch *ack.Channel) error {
		return h(ctx, publicJob(job), (*Channel)(ch))
	}
}

// publicHandler is h, the consumer's, as middleware receives it.
func publicHandler(h consumer.Handler) Handler {
	return func(ctx context.Context, job *Job, ch *Channel) error {
		return h(ctx, poolJob(job), (*ack.Channel)(ch))
	}
}

// consumerMiddleware is mw as the consumer chains it: once, at Start.
func consumerMiddleware(mw []Middleware) []consumer.Middleware {
	if mw == nil {
		return nil
	}
	out := make([]consumer.Middleware, len(mw))
	for i, m := range mw {
		out[i] = func(next consumer.Handler) consumer.Handler { return consumerHandler(m(publicHandler(next))) }
	}
	return out
}

// observerAdapter is an Observer as the consumer tells it.
type observerAdapter struct{ o Observer }

// adaptObserver wraps o, with JobsReturned when o is a ReturnObserver.
func adaptObserver(o Observer) consumer.Observer {
	a := &observerAdapter{o: o}
	if ro, ok := o.(ReturnObserver); ok {
		return &returnObserverAdapter{a, ro}
	}
	return a
}

func (a *observerAdapter) JobAdded(topic string) { a.o.JobAdded(topic) }

func (a *observerAdapter) JobDelivered(job *pool.Job, lateness time.Duration) {
	a.o.JobDelivered(publicJob(job), lateness)
}

func (a *observerAdapter) JobDone(job *pool.Job, outcome consumer.Outcome, took time.Duration, err error) {
	a.o.JobDone(publicJob(job), Outcome(outcome), took, err)
}

// returnObserverAdapter is an observerAdapter of a ReturnObserver.
type returnObserverAdapter struct {
	*observerAdapter
	ro ReturnObserver
}

func (a *returnObserverAdapter) JobsReturned(topic string, n int, recovered bool) {
	a.ro.JobsReturned(topic, n, recovered)
}

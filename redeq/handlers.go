package redeq

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"time"

	"github.com/redeq-go/redeq/consumer"
	"github.com/redeq-go/redeq/retry"
)

// Handler runs one job, as a listener's OnJob does: middleware receives
// and returns Handlers.
type Handler func(ctx context.Context, job *Job, ch *Channel) error

// Middleware wraps a Handler, for logging, tracing, tenants, metrics or
// panics. It sees the job with its Headers and the Channel.
type Middleware = func(Handler) Handler

// Use adds client-wide middleware, before Start. It wraps every
// listener's handler (typed listeners' too), outside the listener's own
// middleware, and broadcast listeners' OnBroadcast, whose job has
// Broadcast set and whose Channel nothing reads (a broadcast is never
// acked or retried; an error is logged). The first given is the outermost.
func (c *Client) Use(mw ...Middleware) error {
	return c.beforeStart(func() error {
		for i, m := range mw {
			if m == nil {
				return invalidArg("middleware %d is nil", i)
			}
		}
		return c.group.Use(consumerMiddleware(mw)...)
	})
}

// ListenerOption sets a listener's own policy, overriding the client's
// config for that listener. A job's own MaxRetries and RetryIntervals
// still win.
type ListenerOption func(*listenerSettings)

type listenerSettings struct {
	opts  consumer.Options // all but the middleware
	mw    []Middleware
	codec Codec
	final func(ctx context.Context, job *Job)
	err   error // set by an option given a bad argument
}

// WithWorkers sets the listener's handler goroutines (1..10,000).
func WithWorkers(n int) ListenerOption {
	return func(s *listenerSettings) { s.opts.Workers = n }
}

// WithRetry sets the listener's retries after a failed delivery (-1 never
// retries) and, when given, its retry intervals (the last repeats). With
// intervals and retries 0, each interval is used once.
func WithRetry(retries int, intervals ...time.Duration) ListenerOption {
	return func(s *listenerSettings) {
		s.opts.MaxRetries = retries
		if len(intervals) > 0 {
			s.opts.RetryIntervals = intervals
		}
	}
}

// WithBackoff computes the wait before the retry that follows failed
// delivery number attempt (from 1) with err, instead of the intervals.
// The number of retries still comes from WithRetry or the config.
func WithBackoff(f func(attempt int, err error) time.Duration) ListenerOption {
	return func(s *listenerSettings) { s.opts.Backoff = f }
}

// WithConsumeTimeout bounds one handler call of the listener.
func WithConsumeTimeout(d time.Duration) ListenerOption {
	return func(s *listenerSettings) { s.opts.ConsumeTimeout = d }
}

// WithMaxRunning lets at most n jobs of the listener's topic run at once
// across every client that listens with it (or, with WithLimitKey, at
// most n of each value of the key header). A job over the limit waits
// where it is and spends no attempt. Each running job holds a slot, a
// lease of its delivery, freed by its outcome, by the rollback at
// Shutdown, or when the reaper recovers the jobs of a dead consumer. The
// limit needs a topic of one bucket (Concurrency 1): Register refuses it
// otherwise. n must be at least 1.
func WithMaxRunning(n int) ListenerOption {
	return func(s *listenerSettings) {
		if n <= 0 {
			s.err = fmt.Errorf("max running %d: want at least 1", n)
			return
		}
		s.opts.Limits.MaxRunning = n
	}
}

// WithRateLimit lets at most n jobs of the listener's topic start in any
// span of per (1ms to 24h), on the Redis server's clock, across every
// client that listens with it (or, with WithLimitKey, per value of the
// key header): up to n at once after a quiet period, then n per per. A
// job over the limit waits where it is and spends no attempt. The limit
// needs a topic of one bucket (Concurrency 1). n must be at least 1.
func WithRateLimit(n int, per time.Duration) ListenerOption {
	return func(s *listenerSettings) {
		switch {
		case n <= 0:
			s.err = fmt.Errorf("rate limit %d per %v: want at least 1 job", n, per)
		case per < time.Millisecond || per > 24*time.Hour:
			s.err = fmt.Errorf("rate limit %d per %v: the period must be 1ms to 24h", n, per)
		default:
			s.opts.Limits.Rate, s.opts.Limits.Per = n, per
		}
	}
}

// WithLimitKey applies WithMaxRunning and WithRateLimit to each value of
// the job header instead of to the topic as a whole: per tenant, per
// partner. Jobs without the header share the value "". A value at its
// limit holds up only its own jobs: they are set aside, and the others
// run. Idle values cost nothing in Redis. The header must not be empty.
func WithLimitKey(header string) ListenerOption {
	return func(s *listenerSettings) {
		if header == "" {
			s.err = errors.New("limit key: empty header name")
			return
		}
		s.opts.Limits.Key = header
	}
}

// WithMiddleware wraps the listener's handler, inside the client's
// middleware; the first given is the outermost.
func WithMiddleware(mw ...Middleware) ListenerOption {
	return func(s *listenerSettings) { s.mw = append(s.mw, mw...) }
}

// WithFinalRetry is called once when a job's retries run out, with
// job.LastError set, while the job is still in flight; the job moves to
// the dead set when it returns. Its ctx ends as the handler's does (see
// FinalRetryListener).
func WithFinalRetry(f func(ctx context.Context, job *Job)) ListenerOption {
	return func(s *listenerSettings) { s.final = f }
}

// WithTypedFinalRetry is WithFinalRetry for a typed listener: f gets the
// job's body decoded into a T with the listener's codec, and the last
// handler error (job.LastError). When the body does not decode into a T
// (the reason the job died, then), v is T's zero value. The job itself
// is JobFromContext(ctx).
func WithTypedFinalRetry[T any](f func(ctx context.Context, v T, lastErr error)) ListenerOption {
	return func(s *listenerSettings) {
		if f == nil {
			s.err = errors.New("nil final-retry function")
			return
		}
		s.final = func(ctx context.Context, job *Job) {
			var v T
			if err := s.codec.Unmarshal(job.Body, &v); err != nil {
				var zero T
				v = zero
			}
			f(ctx, v, errors.New(job.LastError))
		}
	}
}

// WithCodec decodes a typed listener's bodies with c instead of JSON.
func WithCodec(c Codec) ListenerOption {
	return func(s *listenerSettings) { s.codec = c }
}

// Codec turns values into job bodies and back.
type Codec interface {
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

// JSON is the default Codec: encoding/json.
var JSON Codec = jsonCodec{}

type jsonCodec struct{}

func (jsonCodec) Marshal(v any) ([]byte, error)      { return json.Marshal(v) }
func (jsonCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

// funcListener is a Listener built from a Handler and options.
type funcListener struct {
	topic string
	h     Handler
	s     listenerSettings
}

func (l *funcListener) Topic() string { return l.topic }

func (l *funcListener) OnJob(ctx context.Context, job *Job, ch *Channel) error {
	return l.h(ctx, job, ch)
}

// codec is what the listener decodes bodies with: typed producers of the
// client it is registered with encode with it.
func (l *funcListener) codec() Codec { return l.s.codec }

// ListenerPolicy is the listener's own policy (without its middleware)
// and its middleware, for package redeqtest, which runs listeners
// without a client.
func (l *funcListener) ListenerPolicy() (consumer.Options, []Middleware) {
	return l.s.opts, slices.Clone(l.s.mw)
}

// options is the listener's policy as the consumer takes it (see
// adaptListener).
func (l *funcListener) options() consumer.Options {
	o := l.s.opts
	o.Middleware = consumerMiddleware(l.s.mw)
	return o
}

// finalListener adds FinalRetry to a funcListener that has one.
type finalListener struct{ *funcListener }

func (l finalListener) FinalRetry(ctx context.Context, job *Job) { l.s.final(ctx, job) }

// newFuncListener applies opts, then builds the handler from the settings
// (a typed listener needs the codec).
func newFuncListener(topic string, build func(s *listenerSettings) Handler, opts []ListenerOption) (Listener, error) {
	l := &funcListener{topic: topic, s: listenerSettings{codec: JSON}}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: listener of %q: nil option", ErrInvalidArgument, topic)
		}
		o(&l.s)
	}
	if l.s.codec != nil {
		l.h = build(&l.s)
	}
	switch o := l.s.opts; {
	case l.s.err != nil:
		return nil, fmt.Errorf("%w: listener of %q: %v", ErrInvalidArgument, topic, l.s.err)
	case l.h == nil && l.s.codec != nil:
		return nil, fmt.Errorf("%w: listener of %q: nil handler", ErrInvalidArgument, topic)
	case o.Workers < 0 || o.Workers > 10_000:
		return nil, fmt.Errorf("%w: listener of %q: workers %d is out of range 1..10000", ErrInvalidArgument, topic, o.Workers)
	case o.MaxRetries < -1 || o.MaxRetries > 1000:
		return nil, fmt.Errorf("%w: listener of %q: retries %d is out of range -1..1000", ErrInvalidArgument, topic, o.MaxRetries)
	case o.ConsumeTimeout < 0:
		return nil, fmt.Errorf("%w: listener of %q: negative ConsumeTimeout %v", ErrInvalidArgument, topic, o.ConsumeTimeout)
	case l.s.codec == nil:
		return nil, fmt.Errorf("%w: listener of %q: nil codec", ErrInvalidArgument, topic)
	}
	if err := l.s.opts.Limits.Check(); err != nil {
		return nil, fmt.Errorf("%w: listener of %q: %v", ErrInvalidArgument, topic, err)
	}
	for i, d := range l.s.opts.RetryIntervals {
		if d < time.Millisecond || d > 365*24*time.Hour {
			return nil, fmt.Errorf("%w: listener of %q: retry interval %d = %v is outside 1ms..1 year", ErrInvalidArgument, topic, i, d)
		}
	}
	for i, m := range l.s.mw {
		if m == nil {
			return nil, fmt.Errorf("%w: listener of %q: middleware %d is nil", ErrInvalidArgument, topic, i)
		}
	}
	if l.s.final != nil {
		return finalListener{l}, nil
	}
	return l, nil
}

// invalidListener is what the constructors return for bad arguments: its
// error surfaces at Register, which refuses it.
type invalidListener struct {
	topic string
	err   error
}

func (l invalidListener) Topic() string { return l.topic }

func (l invalidListener) OnJob(context.Context, *Job, *Channel) error { return l.err }

// Invalid reports why the listener cannot be registered.
func (l invalidListener) Invalid() error { return l.err }

func listenerOrInvalid(topic string, build func(s *listenerSettings) Handler, opts []ListenerOption) Listener {
	l, err := newFuncListener(topic, build, opts)
	if err != nil {
		return invalidListener{topic: topic, err: err}
	}
	return l
}

// ListenerFunc returns a listener of topic that runs h, with opts. The
// Channel semantics are the brief's: Ack to finish, Rejoin to run again,
// neither (nil error) parks the job in un_ack unless AutoAck.
func ListenerFunc(topic string, h Handler, opts ...ListenerOption) Listener {
	return listenerOrInvalid(topic, func(*listenerSettings) Handler { return h }, opts)
}

// BroadcastFunc returns a broadcast listener of topics that runs fn for
// every broadcast job of them, the function form of BroadcastListener as
// ListenerFunc is of Listener. Each call returns a listener of its own:
// registering one value twice is refused, two values of the same fn are
// two listeners. RegisterBroadcast refuses a nil fn, as it refuses bad
// topics, naming the problem.
func BroadcastFunc(fn func(ctx context.Context, job *Job), topics ...string) BroadcastListener {
	return &broadcastFunc{topics: slices.Clone(topics), fn: fn}
}

type broadcastFunc struct {
	topics []string
	fn     func(ctx context.Context, job *Job)
}

func (b *broadcastFunc) Topics() []string { return slices.Clone(b.topics) }

func (b *broadcastFunc) OnBroadcast(ctx context.Context, job *Job) { b.fn(ctx, job) }

// Invalid reports why the listener cannot be registered.
func (b *broadcastFunc) Invalid() error {
	if b.fn == nil {
		return fmt.Errorf("%w: broadcast listener of %q: nil function", ErrInvalidArgument, b.topics)
	}
	return nil
}

// Typed returns a listener of topic that decodes each job's body into a T
// (JSON unless WithCodec) and calls fn with it. nil acks the job; an
// error retries it on its schedule (wrap it with SkipRetry to give up at
// once). A body that cannot be decoded into a T will not decode on a
// retry either: the job goes to the dead set at once, with the decoding
// error as its reason. The job itself, with its headers, is available to
// middleware and to fn through JobFromContext(ctx); TypedWithChannel
// gives the job and the Channel as arguments. A T bound to its topic
// (a Payload) is refused at Register when topic is not its own.
func Typed[T any](topic string, fn func(ctx context.Context, v T) error, opts ...ListenerOption) Listener {
	if fn == nil {
		return invalidListener{topic: topic, err: fmt.Errorf("%w: typed listener of %q: nil function", ErrInvalidArgument, topic)}
	}
	return TypedWithChannel(topic, func(ctx context.Context, job *Job, v T, ch *Channel) error {
		if err := fn(ctx, v); err != nil {
			return err
		}
		ch.Ack()
		return nil
	}, opts...)
}

// TypedWithChannel is Typed for handlers that answer through the Channel
// (Ack, Rejoin) and want the job: the brief's semantics apply.
func TypedWithChannel[T any](topic string, fn func(ctx context.Context, job *Job, v T, ch *Channel) error, opts ...ListenerOption) Listener {
	if fn == nil {
		return invalidListener{topic: topic, err: fmt.Errorf("%w: typed listener of %q: nil function", ErrInvalidArgument, topic)}
	}
	if err := checkBound[T](topic); err != nil {
		return invalidListener{topic: topic, err: fmt.Errorf("%w: typed listener of %q: %v", ErrInvalidArgument, topic, err)}
	}
	return listenerOrInvalid(topic, func(s *listenerSettings) Handler {
		codec := s.codec
		return func(ctx context.Context, job *Job, ch *Channel) error {
			var v T
			if err := codec.Unmarshal(job.Body, &v); err != nil {
				return retry.Skip(fmt.Errorf("redeq: decode job %q of %q into %T: %w", job.ID, job.Topic, v, err))
			}
			return fn(ctx, job, v, ch)
		}
	}, opts)
}

// TypedFor is Typed for a payload type bound to its topic: the topic is
// T's own, T's zero value's Topic().
func TypedFor[T Payload](fn func(ctx context.Context, v T) error, opts ...ListenerOption) Listener {
	topic, _, err := boundTopic[T]()
	if err != nil {
		return invalidListener{err: fmt.Errorf("%w: typed listener of %T: %v", ErrInvalidArgument, *new(T), err)}
	}
	return Typed(topic, fn, opts...)
}

// Payload is a job body type bound to its topic, as River's JobArgs
// Kind(): AddFor and PutFor add it to that topic, TypedFor listens to
// it, and AddTyped, PutTyped and Typed refuse it for any other topic.
// Topic must return the same constant for every value of the type,
// its zero value included (listeners ask the zero value).
type Payload interface {
	Topic() string
}

// boundTopic is the topic T is bound to, when T is a Payload: its zero
// value's (a new value's, for a pointer type).
func boundTopic[T any]() (topic string, bound bool, err error) {
	var zero T
	t := reflect.TypeOf(&zero).Elem()
	var v any = zero
	if t.Kind() == reflect.Pointer {
		v = reflect.New(t.Elem()).Interface()
	}
	p, ok := v.(Payload)
	if !ok {
		return "", false, nil
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v.Topic() panicked on a zero value: %v", t, r)
		}
	}()
	return p.Topic(), true, nil
}

// reflectNil tells a nil pointer, map, slice, func, chan or interface.
func reflectNil(a any) bool {
	switch v := reflect.ValueOf(a); v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		return v.IsNil()
	}
	return false
}

// checkBound refuses topic for a T bound to another topic.
func checkBound[T any](topic string) error {
	bound, ok, err := boundTopic[T]()
	switch {
	case err != nil:
		return err
	case ok && bound != topic:
		return fmt.Errorf("%T is bound to topic %q, not %q", *new(T), bound, topic)
	}
	return nil
}

// checkListener refuses a listener built with bad arguments.
func checkListener(l Listener) error {
	if il, ok := l.(interface{ Invalid() error }); ok {
		return il.Invalid()
	}
	return nil
}

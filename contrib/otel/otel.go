// Package redeqotel traces and measures redeq jobs with OpenTelemetry.
//
// A producer span wraps each Add and its W3C trace context travels in the
// job's Headers; each delivery runs in a consumer span, a child of the
// producer span (retries and recoveries too: the headers stay with the
// job). Counters and histograms come from a redeq.Observer.
//
//	in, err := redeqotel.Instrument(c, redeqotel.Options{}) // middleware + Observer
//	err = in.Add(ctx, c, &redeq.Job{Topic: "order.close", ID: "42", Delay: 30 * time.Minute})
//
// Span attributes follow the OpenTelemetry messaging conventions where
// they fit (messaging.system = "redeq", messaging.destination.name = the
// topic, messaging.message.id = the job id, messaging.operation.*), plus
// redeq.attempt, redeq.lateness_ms and redeq.outcome. See
// docs/observability.md for every metric and attribute.
package redeqotel

import (
	"context"
	"errors"
	"hash/maphash"
	rt "runtime/trace"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/redeq-go/redeq/internal/topiccache"
	"github.com/redeq-go/redeq/redeq"
)

// ScopeName is the instrumentation scope of the tracer and meter.
const ScopeName = "github.com/redeq-go/redeq/contrib/otel"

// Attribute keys.
const (
	AttrSystem        = attribute.Key("messaging.system")
	AttrDestination   = attribute.Key("messaging.destination.name")
	AttrMessageID     = attribute.Key("messaging.message.id")
	AttrOperationName = attribute.Key("messaging.operation.name")
	AttrOperationType = attribute.Key("messaging.operation.type")
	AttrBodySize      = attribute.Key("messaging.message.body.size")
	AttrAttempt       = attribute.Key("redeq.attempt")
	AttrRecoveries    = attribute.Key("redeq.recoveries")
	AttrLatenessMS    = attribute.Key("redeq.lateness_ms")
	AttrOutcome       = attribute.Key("redeq.outcome")
	AttrFirstAttempt  = attribute.Key("redeq.first_attempt")
	AttrReason        = attribute.Key("redeq.reason")
	AttrSchedule      = attribute.Key("redeq.schedule")
)

var system = AttrSystem.String("redeq")

// LatenessBoundaries are the lateness histogram's bucket bounds, seconds:
// from a millisecond to ten minutes.
var LatenessBoundaries = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// DurationBoundaries are the handler duration histogram's bucket bounds, seconds.
var DurationBoundaries = []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// Options chooses the providers. Zero values take the global ones, and the
// W3C trace context propagator.
type Options struct {
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	Propagator     propagation.TextMapPropagator
}

// Instrumentation traces and measures one client's jobs. It is a
// redeq.ReturnObserver and a redeq.ScheduleObserver; its Middleware starts
// the consumer spans.
type Instrumentation struct {
	tracer trace.Tracer
	prop   propagation.TextMapPropagator
	fields []string // prop.Fields(): the headers Inject owns
	// spanOnly: prop is the W3C trace context propagator, whose Extract
	// adds nothing to a context but the remote span context.
	spanOnly bool

	added, processed, returned, ticks metric.Int64Counter
	lateness, duration                metric.Float64Histogram

	topics topiccache.Cache[*topicAttrs]

	// live holds what is known of each running delivery, found by the
	// job pointer the Observer and the handler share; sharded, so that
	// workers seldom wait for each other. A shard holds about workers/16
	// records: a scan of them costs less than a map's hashing, and a
	// delivery allocates nothing.
	live [liveShards]liveShard
}

const liveShards = 16

type liveShard struct {
	mu sync.Mutex
	ds []*delivery
}

type delivery struct {
	job      *redeq.Job
	topic    *topicAttrs // looked up once per delivery
	lateness time.Duration
	span     trace.Span // set by the middleware; nil without it
	attrs    [jobAttrs]attribute.KeyValue
}

var deliveries = sync.Pool{New: func() any { return new(delivery) }}

var liveSeed = maphash.MakeSeed()

func (in *Instrumentation) shard(job *redeq.Job) *liveShard {
	return &in.live[maphash.Comparable(liveSeed, job)%liveShards]
}

// store keeps d, the record of d.job's delivery.
func (in *Instrumentation) store(d *delivery) {
	s := in.shard(d.job)
	s.mu.Lock()
	s.ds = append(s.ds, d)
	s.mu.Unlock()
}

func (in *Instrumentation) load(job *redeq.Job) *delivery {
	s := in.shard(job)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, d := range s.ds {
		if d.job == job {
			return d
		}
	}
	return nil
}

func (in *Instrumentation) take(job *redeq.Job) *delivery {
	s := in.shard(job)
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, d := range s.ds {
		if d.job == job {
			last := len(s.ds) - 1
			s.ds[i], s.ds[last] = s.ds[last], nil
			s.ds = s.ds[:last]
			return d
		}
	}
	return nil
}

var consumerKind = trace.WithSpanKind(trace.SpanKindConsumer)

// New returns an Instrumentation. Register it with Instrument, or pass
// Middleware to Client.Use and the Instrumentation to Client.Observe
// (combined with another Observer by redeq.Observers).
func New(opts Options) (*Instrumentation, error) {
	if opts.TracerProvider == nil {
		opts.TracerProvider = otel.GetTracerProvider()
	}
	if opts.MeterProvider == nil {
		opts.MeterProvider = otel.GetMeterProvider()
	}
	if opts.Propagator == nil {
		opts.Propagator = propagation.TraceContext{}
	}
	_, spanOnly := opts.Propagator.(propagation.TraceContext)
	in := &Instrumentation{tracer: opts.TracerProvider.Tracer(ScopeName), prop: opts.Propagator,
		fields: opts.Propagator.Fields(), spanOnly: spanOnly}
	m := opts.MeterProvider.Meter(ScopeName)
	var errs [6]error
	in.added, errs[0] = m.Int64Counter("redeq.jobs.added", metric.WithUnit("{job}"),
		metric.WithDescription("Jobs stored by Add, AddBatch, AddTyped or a Put that added."))
	in.processed, errs[1] = m.Int64Counter("redeq.jobs.processed", metric.WithUnit("{job}"),
		metric.WithDescription("Deliveries by outcome: ack, rejoin, retry, dead, unack, interrupted, broadcast."))
	in.returned, errs[2] = m.Int64Counter("redeq.jobs.returned", metric.WithUnit("{job}"),
		metric.WithDescription("In-flight jobs returned unspent: recovered from a silent consumer, or rolled back at shutdown."))
	in.lateness, errs[3] = m.Float64Histogram("redeq.job.lateness", metric.WithUnit("s"),
		metric.WithDescription("Handler start minus the job's due time."), metric.WithExplicitBucketBoundaries(LatenessBoundaries...))
	in.duration, errs[4] = m.Float64Histogram("redeq.job.duration", metric.WithUnit("s"),
		metric.WithDescription("How long handlers ran."), metric.WithExplicitBucketBoundaries(DurationBoundaries...))
	in.ticks, errs[5] = m.Int64Counter("redeq.schedule.ticks", metric.WithUnit("{tick}"),
		metric.WithDescription("Ticks of a periodic schedule this client handled: run (its job added) or skipped (missed while no client ran and dropped by the catch-up policy, or passed while paused). Summed over the fleet, each tick counts once."))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	return in, nil
}

// Instrument returns an Instrumentation installed on c, before Start: its
// middleware (client-wide, outermost of those given to Use after it) and
// its Observer. A client that needs another Observer as well uses New,
// Use and Observe with redeq.Observers instead.
func Instrument(c *redeq.Client, opts Options) (*Instrumentation, error) {
	in, err := New(opts)
	if err != nil {
		return nil, err
	}
	// The Observer first: it is the one that can be refused (one is set
	// already), and a middleware installed before that refusal would
	// stay, starting a second span for every delivery.
	if err := c.Observe(in); err != nil {
		return nil, err
	}
	if err := c.Use(in.Middleware()); err != nil {
		return nil, err
	}
	return in, nil
}

// Add stores job with c.Add inside a producer span, whose trace context it
// writes into job.Headers first. An Add that fails marks the span failed.
func (in *Instrumentation) Add(ctx context.Context, c *redeq.Client, job *redeq.Job) error {
	if job == nil {
		return c.Add(ctx, job) // the client's error for it
	}
	ctx, span := in.StartProducer(ctx, job)
	defer span.End()
	err := c.Add(ctx, job)
	span.SetAttributes(AttrMessageID.String(job.ID)) // an empty ID is assigned by Add
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return err
}

// StartProducer starts a producer span for job and injects its context
// into job.Headers, for producers that store jobs otherwise than with Add
// (AddBatch, Put). The caller ends the span.
func (in *Instrumentation) StartProducer(ctx context.Context, job *redeq.Job) (context.Context, trace.Span) {
	attrs := []attribute.KeyValue{system, AttrDestination.String(job.Topic),
		AttrOperationName.String("send"), AttrOperationType.String("send"), AttrBodySize.Int(len(job.Body))}
	if job.ID != "" {
		attrs = append(attrs, AttrMessageID.String(job.ID))
	}
	ctx, span := in.tracer.Start(ctx, "send "+job.Topic, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
	in.Inject(ctx, job)
	return ctx, span
}

// Inject writes the trace context of ctx into job.Headers, in place of
// any the headers held: a job added again (read back, or a Job reused)
// keeps no part of an earlier trace context, such as its tracestate, which
// the propagator writes only when ctx has one.
func (in *Instrumentation) Inject(ctx context.Context, job *redeq.Job) {
	if job.Headers == nil {
		job.Headers = map[string]string{}
	}
	for _, k := range in.fields {
		delete(job.Headers, k)
	}
	in.prop.Inject(ctx, propagation.MapCarrier(job.Headers))
}

// Extract returns ctx with the trace context carried in job.Headers.
func (in *Instrumentation) Extract(ctx context.Context, job *redeq.Job) context.Context {
	if len(job.Headers) == 0 {
		return ctx
	}
	return in.prop.Extract(ctx, propagation.MapCarrier(job.Headers))
}

// Middleware starts one consumer span per delivery, a child of the
// producer span found in the job's headers; the Observer ends it with the
// outcome. Without the Observer the middleware ends it itself, without an
// outcome.
//
// The span starts with the topic's constant attributes, those a sampler
// may look at (built once per topic); the job's own (id, attempt,
// lateness, recoveries) are set with the outcome when it ends, in one
// call: every attribute set on a span costs the SDK a copy at start and
// again at end, and this way a delivery pays for each once.
func (in *Instrumentation) Middleware() redeq.Middleware {
	return func(next redeq.Handler) redeq.Handler {
		return func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			d := in.load(job)
			observed := d != nil
			var t *topicAttrs
			if observed {
				t = d.topic
			} else {
				t = in.topics.Get(job.Topic, newTopicAttrs)
			}
			// The producer's context is the parent; a trace the handler's
			// ctx already carries becomes a link, and not the parent.
			// The handler's ctx is ctx with the span, and nothing else
			// extracted from the headers.
			var span trace.Span
			var hctx context.Context
			if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
				pctx := in.Extract(trace.ContextWithSpanContext(ctx, trace.SpanContext{}), job)
				opts := append([]trace.SpanStartOption{trace.WithLinks(trace.Link{SpanContext: sc})}, t.consumerStart...)
				_, span = in.tracer.Start(pctx, t.consumerName, opts...)
				hctx = trace.ContextWithSpan(ctx, span)
			} else {
				hctx, span = in.tracer.Start(in.Extract(ctx, job), t.consumerName, t.consumerStart...)
				// With the W3C propagator, the context Start returns is
				// ctx, the producer's span context (which the span hides)
				// and the span: the handler's, without another context to
				// allocate. Not so with other propagators (baggage), nor
				// under runtime/trace (the span's task).
				if !in.spanOnly || rt.IsEnabled() {
					hctx = trace.ContextWithSpan(ctx, span)
				}
			}
			returned := false
			if observed {
				d.span = span
			} else {
				defer func() {
					var kv [jobAttrs]attribute.KeyValue
					span.SetAttributes(jobAttributes(&kv, job, -1)...)
					if !returned { // the handler panicked; the client recovers it
						span.SetStatus(codes.Error, "handler panicked")
					}
					span.End()
				}()
			}
			err := next(hctx, job, ch)
			returned = true
			if err != nil && !observed {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
			return err
		}
	}
}

// jobAttrs is the most attributes jobAttributes returns, the outcome's
// included.
const jobAttrs = 5

// jobAttributes fills kv with the consumer span's attributes of job and
// its delivery (lateness < 0: unknown) and returns those set.
func jobAttributes(kv *[jobAttrs]attribute.KeyValue, job *redeq.Job, lateness time.Duration) []attribute.KeyValue {
	kv[0], kv[1] = AttrMessageID.String(job.ID), AttrAttempt.Int(job.Attempt)
	n := 2
	if lateness >= 0 {
		kv[n] = AttrLatenessMS.Int64(lateness.Milliseconds())
		n++
	}
	if job.Recoveries > 0 {
		kv[n] = AttrRecoveries.Int(job.Recoveries)
		n++
	}
	return kv[:n]
}

// JobAdded implements redeq.Observer.
func (in *Instrumentation) JobAdded(topic string) {
	in.added.Add(context.Background(), 1, in.topics.Get(topic, newTopicAttrs).added...)
}

// JobDelivered implements redeq.Observer: it records the lateness, when
// known, and keeps it for the consumer span.
func (in *Instrumentation) JobDelivered(job *redeq.Job, lateness time.Duration) {
	t := in.topics.Get(job.Topic, newTopicAttrs)
	d := deliveries.Get().(*delivery)
	d.job, d.topic, d.lateness = job, t, lateness
	in.store(d)
	if lateness < 0 {
		return
	}
	first := 0
	if job.Attempt == 0 {
		first = 1
	}
	in.lateness.Record(context.Background(), lateness.Seconds(), t.lateness[first]...)
}

// JobDone implements redeq.Observer: it counts the outcome, records the
// duration and ends the delivery's span.
func (in *Instrumentation) JobDone(job *redeq.Job, o redeq.Outcome, took time.Duration, err error) {
	ctx := context.Background()
	d := in.take(job)
	var t *topicAttrs
	if d != nil {
		t = d.topic
	} else {
		t = in.topics.Get(job.Topic, newTopicAttrs)
	}
	in.processed.Add(ctx, 1, t.processedOpts(job.Topic, o)...)
	in.duration.Record(ctx, took.Seconds(), t.durationRec...)
	if d == nil {
		return
	}
	span := d.span
	if span != nil && span.IsRecording() { // a span sampled out takes no attributes
		attrs := jobAttributes(&d.attrs, job, d.lateness)
		span.SetAttributes(append(attrs, AttrOutcome.String(string(o)))...)
	}
	*d = delivery{}
	deliveries.Put(d)
	if span == nil {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// JobsReturned implements redeq.ReturnObserver.
func (in *Instrumentation) JobsReturned(topic string, n int, recovered bool) {
	i := 0
	if recovered {
		i = 1
	}
	in.returned.Add(context.Background(), int64(n), in.topics.Get(topic, newTopicAttrs).returned[i]...)
}

// TicksAdded implements redeq.ScheduleObserver.
func (in *Instrumentation) TicksAdded(schedule, topic string, n int) {
	in.ticks.Add(context.Background(), int64(n), metric.WithAttributes(system, AttrDestination.String(topic),
		AttrSchedule.String(schedule), AttrOutcome.String("run")))
}

// TicksSkipped implements redeq.ScheduleObserver.
func (in *Instrumentation) TicksSkipped(schedule, topic string, n int64) {
	in.ticks.Add(context.Background(), n, metric.WithAttributes(system, AttrDestination.String(topic),
		AttrSchedule.String(schedule), AttrOutcome.String("skipped")))
}

var (
	_ redeq.ReturnObserver   = (*Instrumentation)(nil)
	_ redeq.ScheduleObserver = (*Instrumentation)(nil)
)

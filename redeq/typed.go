package redeq

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/redeq-go/redeq/pool"
)

// JobOption sets what a typed producer (AddTyped, PutTyped, AddFor,
// PutFor) stores beside the body: the fields of Job it has no argument
// for; Add takes them too. ReplaceDead changes what an Add may replace.
type JobOption func(*jobSettings)

type jobSettings struct {
	job         *Job
	codec       Codec
	replaceDead bool
}

// ReplaceDead lets an Add (Add, AddTyped, AddFor) replace a dead job of
// the same id with the new one, as Put would; a job of the id that is
// scheduled, ready, in flight or parked in un_ack still makes the Add
// fail with ErrJobExists. Without it a dead job keeps its id: an Add of
// that id is refused until the dead job is requeued (RequeueDead) or
// purged (PurgeDead, PurgeDeadJobs), or trimmed by DeadRetention. Put
// always replaces dead jobs.
func ReplaceDead() JobOption {
	return func(s *jobSettings) { s.replaceDead = true }
}

// applyJobOptions applies opts to job.
func applyJobOptions(job *Job, what string, opts []JobOption) (jobSettings, error) {
	s := jobSettings{job: job}
	for i, o := range opts {
		if o == nil {
			return s, fmt.Errorf("%w: %s job %q to %q: job option %d is nil", ErrInvalidArgument, what, job.ID, job.Topic, i)
		}
		o(&s)
	}
	return s, nil
}

// RunAt makes the job due at t, an absolute time, instead of after the
// delay argument (Job.RunAt).
func RunAt(t time.Time) JobOption {
	return func(s *jobSettings) { s.job.RunAt = t }
}

// WithHeader sets one of the job's headers (Job.Headers).
func WithHeader(key, value string) JobOption {
	return func(s *jobSettings) {
		if s.job.Headers == nil {
			s.job.Headers = map[string]string{}
		}
		s.job.Headers[key] = value
	}
}

// WithHeaders sets the job's headers from h, over those set before
// (Job.Headers).
func WithHeaders(h map[string]string) JobOption {
	return func(s *jobSettings) {
		if len(h) == 0 {
			return
		}
		if s.job.Headers == nil {
			s.job.Headers = make(map[string]string, len(h))
		}
		maps.Copy(s.job.Headers, h)
	}
}

// WithJobRetry gives the job its own retry schedule, over the listener's
// and the config's: retries after a failed delivery (-1 never retries,
// 0 keeps the listener's) and, when given, the wait before each retry,
// the last repeating (Job.MaxRetries, Job.RetryIntervals).
func WithJobRetry(retries int, intervals ...time.Duration) JobOption {
	return func(s *jobSettings) {
		s.job.MaxRetries = retries
		if len(intervals) > 0 {
			s.job.RetryIntervals = intervals
		}
	}
}

// WithJobCodec encodes the value with c, instead of the codec of the
// topic's typed listener registered with the client, or JSON.
func WithJobCodec(c Codec) JobOption {
	return func(s *jobSettings) { s.codec = c }
}

// AddTyped encodes v and adds it as the body of job id of topic, due
// after delay (or at RunAt), with opts, and returns the job's id: id, or
// the UUID assigned when id is "". The codec is WithJobCodec's, else that
// of the typed listener of topic registered with c (WithCodec), else
// JSON: register the listener before adding, in a client that both adds
// and listens. A v whose type is bound to another topic (a Payload) is
// ErrInvalidJob. Errors and what is written as for Add.
func AddTyped[T any](ctx context.Context, c *Client, topic, id string, v T, delay time.Duration, opts ...JobOption) (string, error) {
	job, s, err := typedJob(c, "add", topic, id, v, delay, opts)
	if err != nil {
		return "", err
	}
	if ctx == nil {
		return "", pool.ErrNilContext
	}
	if err := c.add(ctx, job, s.replaceDead); err != nil {
		return "", err
	}
	return job.ID, nil
}

// PutTyped is Put of a typed value, as AddTyped is Add: it stores v as the
// body of job id of topic, replacing a waiting, un_ack or dead job of that
// id, and returns the id used. Errors as Put (ErrJobNotWaiting while its
// handler runs: see Put).
func PutTyped[T any](ctx context.Context, c *Client, topic, id string, v T, delay time.Duration, opts ...JobOption) (string, error) {
	job, _, err := typedJob(c, "put", topic, id, v, delay, opts)
	if err != nil {
		return "", err
	}
	if err := c.Put(ctx, job); err != nil {
		return "", err
	}
	return job.ID, nil
}

// AddFor is AddTyped for a payload bound to its topic: v.Topic() names it.
func AddFor[T Payload](ctx context.Context, c *Client, id string, v T, delay time.Duration, opts ...JobOption) (string, error) {
	return AddTyped(ctx, c, v.Topic(), id, v, delay, opts...)
}

// PutFor is PutTyped for a payload bound to its topic: v.Topic() names it.
func PutFor[T Payload](ctx context.Context, c *Client, id string, v T, delay time.Duration, opts ...JobOption) (string, error) {
	return PutTyped(ctx, c, v.Topic(), id, v, delay, opts...)
}

// typedJob builds the job a typed producer stores; nothing is written
// when it fails.
func typedJob[T any](c *Client, what, topic, id string, v T, delay time.Duration, opts []JobOption) (*Job, jobSettings, error) {
	if c == nil {
		return nil, jobSettings{}, fmt.Errorf("%w: %s typed job: nil client", ErrInvalidArgument, what)
	}
	if p, ok := any(v).(Payload); ok && !isNil(v) {
		if bound := p.Topic(); bound != topic {
			return nil, jobSettings{}, fmt.Errorf("%w: %s job %q to %q: %T is bound to topic %q", ErrInvalidJob, what, id, topic, v, bound)
		}
	}
	job := &Job{Topic: topic, ID: id, Delay: delay}
	s, err := applyJobOptions(job, what, opts)
	if err != nil {
		return nil, s, err
	}
	codec := s.codec
	if codec == nil {
		codec = c.codecOf(topic)
	}
	body, err := codec.Marshal(v)
	if err != nil {
		return nil, s, fmt.Errorf("%w: %s job %q to %q: encode %T: %v", ErrInvalidJob, what, id, topic, v, err)
	}
	job.Body = body
	return job, s, nil
}

// isNil tells a nil pointer (or other nil value) in v, whose Topic method
// may not be callable.
func isNil[T any](v T) bool {
	var a any = v
	return a == nil || reflectNil(a)
}

// codecOf is the codec of the typed listener of topic registered with c,
// JSON when there is none.
func (c *Client) codecOf(topic string) Codec {
	if v, ok := c.codecs.Load(topic); ok {
		return v.(Codec)
	}
	return JSON
}

// rememberCodec records the codec of l, a listener built by Typed or
// ListenerFunc, for the typed producers of its topic.
func (c *Client) rememberCodec(l Listener) {
	if cl, ok := l.(interface{ codec() Codec }); ok {
		c.codecs.Store(l.Topic(), cl.codec())
	}
}

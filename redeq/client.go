package redeq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/bucket"
	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/consumer"
	"github.com/redeq-go/redeq/internal/env"
	"github.com/redeq-go/redeq/internal/rdb"
	"github.com/redeq-go/redeq/lock"
	"github.com/redeq-go/redeq/pool"
)

// Client adds, reads and deletes jobs and, once started, moves due jobs and
// runs the registered listeners. It is safe for concurrent use.
type Client struct {
	rdb    redis.UniversalClient
	cfg    config.Config
	env    env.Env
	store  *pool.Store
	reg    *bucket.Registry
	locker *lock.Locker

	group    *consumer.Group
	observer Observer // set by Observe before use; nil: nothing observed
	// broadcasts are the registered broadcast listeners, as given (the
	// group holds them wrapped), to refuse one registered twice.
	broadcasts []BroadcastListener
	// codecs holds the codec of each topic's registered typed listener,
	// topic -> Codec, for the typed producers (AddTyped).
	codecs sync.Map

	mu  sync.Mutex
	run *runtime // nil until Start
	// starting is set while Start runs its calls to Redis, without the
	// lock: a Shutdown meanwhile cancels startCancel and returns; Start
	// then takes down what it started.
	starting    bool
	startCancel context.CancelFunc
	closed      bool

	ownsRedis bool // set by Open: Shutdown closes rdb (see open.go)
	// older makes the client one of the version before this one as to the
	// format of the job state (tests of a rolling upgrade; format.go).
	older bool
}

// processQuarantine is the slot every client of this process runs its
// quarantined jobs in: one such job at a time in the process, whatever
// the clients and topics in it, so that two jobs recovered twice (a
// poison job, and a healthy one that ran beside it) are never in flight
// together when the process dies (docs/decisions.md, "Quarantine instead
// of smarter blame").
var processQuarantine = consumer.NewQuarantine()

// New returns a client over rdb (a single server, Sentinel or Cluster
// client, with whatever AUTH and TLS options it was built with). cfg's zero
// fields take their defaults; an invalid cfg is an error naming the field.
func New(rdb redis.UniversalClient, cfg config.Config) (*Client, error) {
	if rdb == nil {
		return nil, errors.New("redeq: nil redis client")
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := checkDurability(rdb, cfg); err != nil {
		return nil, err
	}
	c := &Client{
		rdb:    rdb,
		cfg:    cfg,
		env:    env.New(cfg.Logger),
		store:  pool.NewStore(rdb, cfg.Prefix),
		reg:    bucket.NewRegistry(rdb, cfg.Prefix),
		locker: lock.New(rdb),
	}
	c.store.SetDurability(durability(cfg))
	c.group = consumer.NewGroup(rdb, cfg, c.env, c.reg, c.locker, processQuarantine)
	return c, nil
}

// Config returns the client's settings, defaults filled in.
func (c *Client) Config() config.Config { return c.cfg }

func (c *Client) placement(id string) pool.Placement {
	return pool.Placement{Bucket: bucket.Of(id, c.cfg.Concurrency), Limit: c.cfg.BucketLimit()}
}

// prepare validates job, assigns an id when it has none, and records its
// topic. Nothing is written for an invalid job.
func (c *Client) prepare(ctx context.Context, job *Job) error {
	if err := pool.Validate(poolJob(job), c.cfg.MaxBodyBytes); err != nil {
		return err
	}
	if job.ID == "" {
		job.ID = uuid.NewString()
	}
	return c.ensureTopic(ctx, job.Topic)
}

// ensureTopic records topic (the first time, and every RecordEvery), and
// returns when ctx ends even if Redis has not answered yet.
func (c *Client) ensureTopic(ctx context.Context, topic string) error {
	if c.reg.Recorded(topic, c.cfg.Concurrency) {
		return nil // most Adds: no call to Redis, no goroutine
	}
	return rdb.AwaitOn(ctx, rdb.CutsAtDeadline(c.rdb), func() error {
		fresh, err := c.reg.Ensure(ctx, topic, c.cfg.Concurrency)
		if err != nil {
			return publicMismatch(err)
		}
		if r := c.runtime(); fresh && r != nil {
			r.mover.Refresh() // start moving the new topic now, not at the next reread
		}
		return nil
	})
}

// Add stores job, due after job.Delay (or at job.RunAt) by the Redis
// server's clock. An empty ID is replaced by a new UUID, written back into
// job. It fails with ErrInvalidJob (wrapped with the reason), ErrJobExists,
// ErrPoolFull or ErrBucketMismatch, and then writes nothing. Add needs no
// running client. When ctx ends first, Add returns ctx's error and the job
// may or may not have been stored; Get tells. So it does, with
// context.DeadlineExceeded, when Redis has not answered 15 s after the
// job was sent (plus WaitTimeout with WaitReplicas), at the latest when a
// read go-redis began before then ends (the client's ReadTimeout; at 15 s
// when its reads have none): past that, a
// resend by go-redis could no longer tell its own job from an existing one
// (see docs/decisions.md, "Such calls give up"). Errors from Redis are
// returned as they are: a server that refuses writes (maxmemory,
// min-replicas-to-write) fails Add with its error (docs/operations.md).
//
// To return when ctx ends, Add runs its call to Redis on another
// goroutine, which costs the caller CPU. It runs the call on the caller's
// goroutine, when fewer than two of the client's Adds are under way, with
// a ctx that never ends (context.Background, context.WithoutCancel), and
// with a ctx that has a deadline on a client whose ContextTimeoutEnabled
// makes go-redis end a call at its ctx's deadline: Add then returns by
// the deadline, but a cancel before it ends the call only at the
// deadline, as for any command of that client. AddBatch sends many jobs
// per round trip, and runs on the caller's goroutine alike.
//
// opts set fields of job as for the typed producers (RunAt, WithHeader,
// WithJobRetry; a codec has nothing to encode here), and ReplaceDead lets
// the Add replace a dead job of the same id, which it otherwise refuses
// with ErrJobExists until the dead job is requeued or purged.
func (c *Client) Add(ctx context.Context, job *Job, opts ...JobOption) error {
	if ctx == nil {
		return pool.ErrNilContext
	}
	replaceDead := false
	if len(opts) > 0 && job != nil {
		s, err := applyJobOptions(job, "add", opts)
		if err != nil {
			return err
		}
		replaceDead = s.replaceDead
	}
	return c.add(ctx, job, replaceDead)
}

func (c *Client) add(ctx context.Context, job *Job, replaceDead bool) error {
	if err := c.prepare(ctx, job); err != nil {
		return err
	}
	var err error
	if replaceDead {
		_, err = c.store.AddReplacingDead(ctx, poolJob(job), c.placement(job.ID))
	} else {
		_, err = c.store.Add(ctx, poolJob(job), c.placement(job.ID))
	}
	if err == nil {
		c.added(job.Topic, 1)
	}
	return err
}

// AddBatch stores jobs in pipelines of 256. Invalid jobs are rejected, the
// valid ones stored; the error is then a *BatchError with one entry per job.
// A failure of the connection as a whole is returned as is: some jobs may
// then have been stored (Get tells which).
func (c *Client) AddBatch(ctx context.Context, jobs []*Job) error {
	if ctx == nil {
		return pool.ErrNilContext
	}
	errs := make([]error, len(jobs))
	var valid []*Job
	var at []pool.Placement
	var where []int
	failed := false
	for i, j := range jobs {
		if err := c.prepare(ctx, j); err != nil {
			if !errors.Is(err, ErrInvalidJob) && !errors.Is(err, ErrBucketMismatch) {
				return err // Redis itself failed
			}
			errs[i], failed = err, true
			continue
		}
		valid = append(valid, j)
		at = append(at, c.placement(j.ID))
		where = append(where, i)
	}
	if len(valid) > 0 {
		got, err := c.store.AddMany(ctx, poolJobs(valid), at)
		if err != nil {
			return err
		}
		for k, err := range got {
			if err != nil {
				errs[where[k]], failed = err, true
			} else {
				c.added(valid[k].Topic, 1)
			}
		}
	}
	if failed {
		return &BatchError{Errs: errs}
	}
	return nil
}

// checkRef validates a topic and id given to a lookup.
func checkRef(ctx context.Context, topic, id string) error {
	if ctx == nil {
		return pool.ErrNilContext
	}
	if err := pool.CheckTopic(topic); err != nil {
		return err
	}
	return pool.CheckID(id)
}

// bucketOf returns the bucket of id in topic, using the topic's recorded
// bucket count (a lookup must find jobs whatever this client's setting).
func (c *Client) bucketOf(ctx context.Context, topic, id string) (int, error) {
	n, err := c.reg.Count(ctx, topic, c.cfg.Concurrency)
	if err != nil {
		return 0, err
	}
	return bucket.Of(id, n), nil
}

// Get returns the job id of topic, with its State, and in RunAt its due
// time while it is scheduled or ready (for a ready job, when it fell due;
// zero for one back from a crashed consumer), or when it was parked while
// it is un_acked or dead (for a dead job, when its retries ran out).
// LastError, FailedAt and Failures tell its failed deliveries; a job in
// flight whose consumer went silent has ConsumerSilentSince set. A job no
// longer waiting but acked on a topic with retention (WithRetention)
// comes back from its done record, with State StateDone, FinishedAt and
// Consumer. ErrJobNotFound when absent.
func (c *Client) Get(ctx context.Context, topic, id string) (*Job, error) {
	if err := checkRef(ctx, topic, id); err != nil {
		return nil, err
	}
	b, err := c.bucketOf(ctx, topic, id)
	if err != nil {
		return nil, err
	}
	return c.getTraced(ctx, topic, id, b)
}

// Delete removes the job id of topic from wherever it waits and returns it,
// with State saying where that was: StateScheduled or StateReady (it was
// waiting: cancelled, it will not run), StateUnAck or StateDead, or
// StateInFlight with the Consumer running its handler: that run goes on
// to its end, and its outcome is dropped (the job is not re-added, not
// retried, not parked). To replace a job without its new version running
// beside a handler of the old one, use PutSettled instead of Delete and
// Add. ErrJobNotFound when absent. A rerun by go-redis after a lost
// reply returns the same job and State.
func (c *Client) Delete(ctx context.Context, topic, id string) (*Job, error) {
	if err := checkRef(ctx, topic, id); err != nil {
		return nil, err
	}
	b, err := c.bucketOf(ctx, topic, id)
	if err != nil {
		return nil, err
	}
	return publicResult(c.store.Delete(ctx, topic, id, b))
}

// Reschedule gives a waiting job (scheduled, or due and not yet fetched) the
// new due time at, an absolute time by the caller's clock (RescheduleIn
// uses the server's). ErrJobNotFound when absent; ErrJobNotWaiting when it
// is in flight, parked in un_ack or dead. A rerun after a lost reply
// succeeds again.
func (c *Client) Reschedule(ctx context.Context, topic, id string, at time.Time) error {
	if err := checkRef(ctx, topic, id); err != nil {
		return err
	}
	if at.IsZero() {
		return fmt.Errorf("%w: reschedule job %q of topic %q: zero time", ErrInvalidArgument, id, topic)
	}
	if at.After(pool.MaxDue) {
		return fmt.Errorf("%w: reschedule job %q of topic %q: %s is after %s, the latest due time",
			ErrInvalidArgument, id, topic, at.UTC().Format(time.RFC3339), pool.MaxDue.Format(time.RFC3339))
	}
	b, err := c.bucketOf(ctx, topic, id)
	if err != nil {
		return err
	}
	return bucket.Reschedule(ctx, c.rdb, c.cfg.Prefix, topic, id, b, at)
}

// RescheduleIn gives a waiting job the due time delay from now by the Redis
// server's clock, so a caller whose clock is off cannot make it run early.
// Errors as Reschedule; a negative delay is ErrInvalidArgument.
func (c *Client) RescheduleIn(ctx context.Context, topic, id string, delay time.Duration) error {
	if err := checkRef(ctx, topic, id); err != nil {
		return err
	}
	if delay < 0 {
		return fmt.Errorf("%w: reschedule job %q of topic %q: negative delay %v", ErrInvalidArgument, id, topic, delay)
	}
	b, err := c.bucketOf(ctx, topic, id)
	if err != nil {
		return err
	}
	return bucket.RescheduleIn(ctx, c.rdb, c.cfg.Prefix, topic, id, b, delay)
}

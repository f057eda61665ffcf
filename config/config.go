package config

import (
	"log/slog"
	"time"
)

// Defaults of every setting.
const (
	PrefixDefault            = "redeq"
	ConcurrencyDefault       = 1
	ScanIntervalDefault      = time.Second
	MoveBatchDefault         = 100
	MaxPoolDefault           = 5_000_000
	MaxBodyBytesDefault      = 1 << 20
	RetryDefault             = 3
	WorkersDefault           = 8
	PollTimeoutDefault       = 2 * time.Second
	LockExpiryDefault        = 20 * time.Second
	HeartbeatIntervalDefault = 5 * time.Second
	ConsumerTimeoutDefault   = 15 * time.Second
	ShutdownTimeoutDefault   = 10 * time.Second
	DeadRetentionDefault     = 10_000
	RetentionMaxDefault      = 10_000
	// MaxRetention is the longest Retention of acked jobs.
	MaxRetention         = 30 * 24 * time.Hour
	MaxRecoveriesDefault = 5
	// MinMaxRecoveries is the least MaxRecoveries: the recoveries from
	// which a job runs alone (ready.Quarantine, the same figure). With
	// fewer, a healthy job that was in flight beside a poison job through
	// its crashes would go dead with it before it ever ran alone.
	MinMaxRecoveries   = 2
	RetireAfterDefault = 24 * time.Hour
	WaitTimeoutDefault = time.Second
)

// Bounds on sizes a caller controls.
const (
	// MaxName is the longest topic, id or prefix, in bytes.
	MaxName = 200
	// MaxClientName is the longest ClientName, in bytes.
	MaxClientName = 128
	// MaxIntervals is the longest retry interval list.
	MaxIntervals = 64
	// MaxHeaders is the most headers a job carries.
	MaxHeaders = 32
	// MaxHeaderBytes bounds the total bytes of a job's header keys and
	// values.
	MaxHeaderBytes = 4096
	// MaxRetriesLimit is the largest MaxRetries.
	MaxRetriesLimit = 1000
	// MaxConcurrency is the largest bucket count of a topic.
	MaxConcurrency = 1024
	// MaxMoveBatch bounds the ids one mover script call moves (Lua unpack
	// stops near 8,000 values).
	MaxMoveBatch = 5_000
	// MaxBodyLimit is the largest MaxBodyBytes: Redis strings stop at 512 MiB.
	MaxBodyLimit = 256 << 20
	// MaxPoolLimit is the largest MaxPool, about 1.1e12 jobs: far beyond
	// what a Redis server holds, small enough that no limit arithmetic
	// overflows and Lua's doubles carry it exactly.
	MaxPoolLimit = 1 << 40
	// MaxWorkers is the largest Workers.
	MaxWorkers = 10_000
	// MaxWaitReplicas is the largest WaitReplicas.
	MaxWaitReplicas = 16
)

// Bounds on durations. Below the minimums a loop spins or every consumer
// looks dead; above the maximums a crash or a lost message goes unnoticed
// for longer than any service would accept.
const (
	// MinInterval is the shortest ScanInterval, PollTimeout,
	// HeartbeatInterval, ShutdownTimeout and non-zero ConsumeTimeout.
	MinInterval = time.Millisecond
	// MaxInterval is the longest ScanInterval, PollTimeout,
	// HeartbeatInterval and LockExpiry.
	MaxInterval = time.Hour
	// MinLockExpiry is the shortest LockExpiry: a lock must outlive the
	// round trips that take and extend it.
	MinLockExpiry = 10 * time.Millisecond
	// MinConsumerTimeout is the shortest ConsumerTimeout: below it a
	// scheduler pause or a slow round trip makes a live consumer look
	// silent and its jobs run twice.
	MinConsumerTimeout = 100 * time.Millisecond
	// MaxTimeout is the longest ConsumerTimeout, ShutdownTimeout and
	// ConsumeTimeout.
	MaxTimeout = 24 * time.Hour
	// MaxRetryInterval is the longest retry interval.
	MaxRetryInterval = 365 * 24 * time.Hour
	// MinRetireAfter is the shortest RetireAfter: a topic that is only
	// idle between two bursts should not leave the topic set each time.
	MinRetireAfter = time.Second
	// MaxRetireAfter is the longest RetireAfter.
	MaxRetireAfter = 365 * 24 * time.Hour
	// MaxWaitTimeout is the longest WaitTimeout: every write waits up to
	// it while a replica is down.
	MaxWaitTimeout = time.Minute
	// RetireNever, as RetireAfter, keeps every topic for good (as does
	// any negative RetireAfter).
	RetireNever = time.Duration(-1)
)

// RetryIntervalsDefault is the default retry schedule: 5s, 30s, 5m.
func RetryIntervalsDefault() []time.Duration {
	return []time.Duration{5 * time.Second, 30 * time.Second, 5 * time.Minute}
}

// Config holds every setting of a redeq client. A zero field means its
// default (WithDefaults fills them in), so 0 can never be asked for where
// a default exists; the fields where -1 or 0 mean something else say so.
// The YAML key of each field is in its tag; Load also reads it from the
// environment variable REDEQ_<KEY> (REDEQ_REDIS_TLS_CA_FILE for
// redis.tls.ca_file).
type Config struct {
	// Prefix starts every Redis key and channel name: at most MaxName
	// bytes, no braces, whitespace or control characters. Defaults to "redeq".
	Prefix string `yaml:"prefix"`
	// Concurrency is the number of buckets per topic (shards of its
	// storage), a power of two from 1 to MaxConcurrency (1024); it is not
	// a number of workers (that is Workers, per listener). Jobs spread over
	// buckets by a hash of their id; each bucket is moved and fetched
	// independently and, on a Redis Cluster, may live on its own slot. The
	// count is recorded per topic on its first use, and a client with
	// another count for that topic gets ErrBucketMismatch: choose it once.
	// 1 serves thousands of jobs a second on one server; raise it for a
	// topic that must spread over the masters of a cluster, or whose
	// movers and fetches contend on one key. Defaults to 1.
	Concurrency int `yaml:"concurrency"`
	// ScanInterval paces the movers' fallback. A job added while its
	// bucket's owner sleeps is moved at its due time by the owner's
	// wake-up (a PUBLISH from Add), not by a scan. The scans cover a lost
	// wake-up: an owner rescans a bucket with nothing due sooner every five
	// ScanIntervals or every third of LockExpiry, whichever is shorter (5s
	// with the defaults), so a job whose wake-up was lost runs up to that
	// late; a
	// client that does not own the bucket moves its jobs overdue by more
	// than two ScanIntervals at its own scans. Clients announce themselves
	// every ScanInterval. From MinInterval (1ms) to MaxInterval (1h), and
	// shorter than LockExpiry. Defaults to 1s.
	ScanInterval time.Duration `yaml:"scan_interval"`
	// MoveBatch is the most ids one mover script call moves, from 1 to
	// MaxMoveBatch (5,000). Defaults to 100.
	MoveBatch int `yaml:"move_batch"`
	// MaxPool is the most jobs a topic holds; Add then fails with
	// ErrPoolFull. Each bucket holds at most MaxPool/Concurrency (rounded
	// up, see BucketLimit). From 1 to MaxPoolLimit (1<<40). Defaults to
	// 5,000,000.
	MaxPool int `yaml:"max_pool"`
	// MaxBodyBytes is the largest job body, from 1 to MaxBodyLimit
	// (256 MiB). Defaults to 1 MiB.
	MaxBodyBytes int `yaml:"max_body_bytes"`
	// Retry is the default number of retries after a failed delivery, for
	// jobs added with MaxRetries 0: from 1 to MaxRetriesLimit (1000), or -1
	// for none (a failed job goes to the dead set at once). 0 means the
	// default. Defaults to 3.
	Retry int `yaml:"retry"`
	// RetryIntervals is the default retry schedule, for jobs added without
	// their own; when retries outrun the list the last interval repeats.
	// 1 to MaxIntervals (64) intervals, each from 1ms to a year. nil means
	// the default; an empty list is an error. Defaults to 5s, 30s, 5m.
	RetryIntervals []time.Duration `yaml:"retry_intervals"`
	// ConsumeTimeout bounds one handler call through its context: 0 means
	// no bound, otherwise from MinInterval (1ms) to MaxTimeout (24h).
	// Defaults to 0.
	ConsumeTimeout time.Duration `yaml:"consume_timeout"`
	// Workers is the number of handler goroutines per listener, from 1 to
	// MaxWorkers (10,000). Defaults to 8.
	Workers int `yaml:"workers"`
	// PollTimeout is no longer used: fetchers do not poll (the bucket's
	// owner repeats the ready notification of a non-empty ready list at
	// each of its scans, and every resubscription makes listeners look at
	// every bucket). Kept so that existing files load. From MinInterval
	// (1ms) to MaxInterval (1h). Defaults to 2s.
	PollTimeout time.Duration `yaml:"poll_timeout"`
	// LockExpiry is the lifetime of a mover's or reaper's lock; the holder
	// extends it every third of it. Other clients try to take a bucket's
	// lock every quarter of it; meanwhile they move only jobs overdue by
	// more than two ScanIntervals, so a crashed holder strands nothing for
	// long. From MinLockExpiry (10ms) to MaxInterval (1h), and longer than
	// ScanInterval. Defaults to 20s, or to twice ScanInterval when that is
	// 20s or more.
	LockExpiry time.Duration `yaml:"lock_expiry"`
	// HeartbeatInterval is how often a consumer records that it is alive.
	// From MinInterval (1ms) to a third of ConsumerTimeout, so that a
	// consumer is declared silent only after missing at least two
	// heartbeats. Defaults to 5s, or to a third of ConsumerTimeout when that
	// is set below 15s (consumer_timeout: 3s alone gives 1s heartbeats).
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval"`
	// ConsumerTimeout is how long a consumer may stay silent before the
	// reaper hands its in-flight jobs to others; each consumer also sweeps
	// its in-flight lists this often. From MinConsumerTimeout (100ms) to
	// MaxTimeout (24h). Defaults to 15s, or to three HeartbeatIntervals when
	// that is set above 5s.
	ConsumerTimeout time.Duration `yaml:"consumer_timeout"`
	// ShutdownTimeout bounds how long Shutdown waits for running handlers
	// when its context has no earlier deadline. From MinInterval (1ms) to
	// MaxTimeout (24h). Defaults to 10s.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// CrashRollback makes Shutdown return the jobs still in flight to their
	// buckets, due now, without spending an attempt. When false they stay
	// in flight until the reaper recovers them. nil means the default.
	// Defaults to true.
	CrashRollback *bool `yaml:"crash_rollback"`
	// AutoAck treats a handler's nil error without Rejoin as Ack.
	// Defaults to false.
	AutoAck bool `yaml:"auto_ack"`
	// DeadRetention is the most jobs a bucket's dead set keeps, at least 1;
	// the oldest are deleted beyond it. Defaults to 10,000.
	DeadRetention int `yaml:"dead_retention"`
	// Retention keeps the record of each acked job readable (Get, List
	// and the CLI show it as done, with when and on which consumer it
	// finished, and its failures) for that long, up to MaxRetention (30
	// days), then it expires; a listener's WithRetention overrides it for
	// its topic. Off (0) an ack deletes the job and costs nothing more.
	// Defaults to 0.
	Retention time.Duration `yaml:"retention"`
	// RetentionMax bounds the done records kept per topic, at least 1: the
	// oldest go first beyond it (shared among the topic's buckets, each
	// keeping RetentionMax/buckets, rounded up). Defaults to 10,000.
	RetentionMax int `yaml:"retention_max"`
	// MaxRecoveries is how many times a job may be recovered from a crashed
	// consumer before it is treated as poison and moved to the dead set, at
	// least MinMaxRecoveries (2). Defaults to 5.
	MaxRecoveries int `yaml:"max_recoveries"`
	// RetireAfter is how long a topic may hold no job and have no consumer
	// before the movers retire it: it leaves the topic set and costs
	// nothing more. Adding to it (or listening to it) records it again.
	// From MinRetireAfter (1s) to MaxRetireAfter (a year); a negative
	// value (RetireNever, "-1s") keeps every topic. Defaults to 24h.
	RetireAfter time.Duration `yaml:"retire_after"`
	// WaitReplicas makes writes durable across a failover: Add, AddBatch,
	// Put and Update, and every delivery outcome (ack, rejoin, retry,
	// dead, unack), wait until this many replicas of the master hold the
	// write (Redis WAIT on the connection that made it). An Add that they
	// do not acknowledge within WaitTimeout returns ErrNotReplicated (the
	// job may still be stored); an outcome is then applied again until
	// they do, and the job stays in flight meanwhile. 0 turns it off and
	// costs nothing. From 0 to MaxWaitReplicas (16). See "Durability and
	// failover" in docs/operations.md. Defaults to 0.
	WaitReplicas int `yaml:"wait_replicas"`
	// WaitTimeout bounds each wait for replicas when WaitReplicas is set.
	// From MinInterval (1ms) to MaxWaitTimeout (1m), and shorter than the
	// Redis client's ReadTimeout (go-redis defaults to 3s), which New
	// checks. Defaults to 1s.
	WaitTimeout time.Duration `yaml:"wait_timeout"`
	// ClientName names this client in the consumers view (Client.Consumers,
	// `redeq servers`, the dashboard), beside its host and pid: at most
	// MaxClientName bytes, no control characters. Defaults to the host
	// name.
	ClientName string `yaml:"client_name"`
	// Redis is the connection Open makes. New ignores it: it takes a
	// client built by the caller. Empty by default.
	Redis RedisConfig `yaml:"redis"`
	// Schedules are periodic schedules that redeq.Open and
	// redeq.OpenSection put (see Schedule). New ignores them. A file
	// declares at most MaxSchedules, with distinct names; no REDEQ_*
	// variable sets them. Empty by default.
	Schedules []Schedule `yaml:"schedules"`
	// Listeners are per-topic settings of the listeners this client
	// registers (see Listener): the global limits of a topic. At most
	// MaxListeners, one per topic; no REDEQ_* variable sets them. Empty
	// by default.
	Listeners []Listener `yaml:"listeners"`
	// Logger receives the background loops' reports. Defaults to slog.Default().
	Logger *slog.Logger `yaml:"-"`
}

// Default returns a Config with every default filled in.
func Default() Config {
	return Config{}.WithDefaults()
}

// WithDefaults returns a copy of c with each zero field set to its default.
func (c Config) WithDefaults() Config {
	setDefault(&c.Prefix, PrefixDefault)
	setDefault(&c.Concurrency, ConcurrencyDefault)
	setDefault(&c.ScanInterval, ScanIntervalDefault)
	setDefault(&c.MoveBatch, MoveBatchDefault)
	setDefault(&c.MaxPool, MaxPoolDefault)
	setDefault(&c.MaxBodyBytes, MaxBodyBytesDefault)
	setDefault(&c.Retry, RetryDefault)
	setDefault(&c.Workers, WorkersDefault)
	setDefault(&c.PollTimeout, PollTimeoutDefault)
	// Settings that bound one another: a default follows the setting given.
	if c.LockExpiry == 0 && c.ScanInterval >= LockExpiryDefault {
		c.LockExpiry = min(2*c.ScanInterval, MaxInterval)
	}
	setDefault(&c.LockExpiry, LockExpiryDefault)
	if c.HeartbeatInterval == 0 && c.ConsumerTimeout > 0 {
		c.HeartbeatInterval = max(min(HeartbeatIntervalDefault, c.ConsumerTimeout/3), MinInterval)
	}
	if c.ConsumerTimeout == 0 && c.HeartbeatInterval > 0 {
		c.ConsumerTimeout = max(ConsumerTimeoutDefault, 3*c.HeartbeatInterval)
	}
	setDefault(&c.HeartbeatInterval, HeartbeatIntervalDefault)
	setDefault(&c.ConsumerTimeout, ConsumerTimeoutDefault)
	setDefault(&c.ShutdownTimeout, ShutdownTimeoutDefault)
	setDefault(&c.DeadRetention, DeadRetentionDefault)
	setDefault(&c.RetentionMax, RetentionMaxDefault)
	setDefault(&c.MaxRecoveries, MaxRecoveriesDefault)
	setDefault(&c.RetireAfter, RetireAfterDefault)
	setDefault(&c.WaitTimeout, WaitTimeoutDefault)
	if c.RetryIntervals == nil {
		c.RetryIntervals = RetryIntervalsDefault()
	} else {
		c.RetryIntervals = append([]time.Duration(nil), c.RetryIntervals...)
	}
	if c.CrashRollback == nil {
		on := true
		c.CrashRollback = &on
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Redis.Addrs != nil {
		c.Redis.Addrs = append([]string(nil), c.Redis.Addrs...)
	}
	return c
}

func setDefault[T comparable](field *T, def T) {
	var zero T
	if *field == zero {
		*field = def
	}
}

// BucketLimit is the most jobs one bucket of a topic holds: MaxPool
// divided by Concurrency, rounded up, computed without overflow.
func (c Config) BucketLimit() int {
	n := max(c.Concurrency, 1)
	return c.MaxPool/n + min(c.MaxPool%n, 1)
}

// Rollback reports whether Shutdown rolls in-flight jobs back.
func (c Config) Rollback() bool { return c.CrashRollback == nil || *c.CrashRollback }

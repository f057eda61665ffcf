// Package config holds redeq's settings: one Config struct, its defaults,
// validation, and loading from a YAML file with REDEQ_* environment overrides.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"math/bits"
	"strings"
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
	MaxRecoveriesDefault     = 5
)

// Bounds on sizes a caller controls.
const (
	// MaxName is the longest topic, id or prefix, in bytes.
	MaxName = 200
	// MaxIntervals is the longest retry interval list.
	MaxIntervals = 64
	// MaxRetriesLimit is the largest MaxRetries.
	MaxRetriesLimit = 1000
	// MaxConcurrency is the largest bucket count of a topic.
	MaxConcurrency = 1024
	// MaxMoveBatch bounds the ids one mover script call moves (Lua unpack
	// stops near 8,000 values).
	MaxMoveBatch = 5_000
	// MaxBodyLimit is the largest MaxBodyBytes: Redis strings stop at 512 MiB.
	MaxBodyLimit = 256 << 20
)

// RetryIntervalsDefault is the default retry schedule: 5s, 30s, 5m.
func RetryIntervalsDefault() []time.Duration {
	return []time.Duration{5 * time.Second, 30 * time.Second, 5 * time.Minute}
}

// Config holds every setting of a redeq client. The zero value of a field
// means its default; WithDefaults fills them in.
type Config struct {
	// Prefix starts every Redis key and channel name. Defaults to "redeq".
	Prefix string `yaml:"prefix"`
	// Concurrency is the number of buckets per topic, a power of two. Jobs
	// spread over buckets by a hash of their id; each bucket is moved and
	// fetched independently and, on a Redis Cluster, may live on its own
	// slot. The count is recorded per topic on first use. Defaults to 1.
	Concurrency int `yaml:"concurrency"`
	// ScanInterval is how often a mover rescans its bucket when no wake-up
	// arrives, and how often a non-holder tries the bucket's lock. Defaults to 1s.
	ScanInterval time.Duration `yaml:"scan_interval"`
	// MoveBatch is the most ids one mover script call moves. Defaults to 100.
	MoveBatch int `yaml:"move_batch"`
	// MaxPool is the most jobs a topic holds; Add then fails with
	// ErrPoolFull. Each bucket holds at most MaxPool/Concurrency (rounded
	// up). Defaults to 5,000,000.
	MaxPool int `yaml:"max_pool"`
	// MaxBodyBytes is the largest job body. Defaults to 1 MiB.
	MaxBodyBytes int `yaml:"max_body_bytes"`
	// Retry is the default number of retries after a failed delivery, for
	// jobs added with MaxRetries 0. Defaults to 3.
	Retry int `yaml:"retry"`
	// RetryIntervals is the default retry schedule, for jobs added without
	// their own; when retries outrun the list the last interval repeats.
	// Defaults to 5s, 30s, 5m.
	RetryIntervals []time.Duration `yaml:"retry_intervals"`
	// ConsumeTimeout bounds one handler call through its context; 0 means
	// no bound. Defaults to 0.
	ConsumeTimeout time.Duration `yaml:"consume_timeout"`
	// Workers is the number of handler goroutines per listener. Defaults to 8.
	Workers int `yaml:"workers"`
	// PollTimeout is how long an idle fetcher waits for a ready notification
	// before it polls its ready lists anyway. Defaults to 2s.
	PollTimeout time.Duration `yaml:"poll_timeout"`
	// LockExpiry is the lifetime of a mover's or reaper's lock; the holder
	// extends it every third of it. Other clients try to take a bucket's
	// lock every quarter of it; meanwhile they move only jobs overdue by
	// more than two ScanIntervals, so a crashed holder strands nothing for
	// long. Defaults to 20s.
	LockExpiry time.Duration `yaml:"lock_expiry"`
	// HeartbeatInterval is how often a consumer records that it is alive.
	// Defaults to 5s.
	HeartbeatInterval time.Duration `yaml:"heartbeat_interval"`
	// ConsumerTimeout is how long a consumer may stay silent before the
	// reaper hands its in-flight jobs to others. Defaults to 15s.
	ConsumerTimeout time.Duration `yaml:"consumer_timeout"`
	// ShutdownTimeout bounds how long Shutdown waits for running handlers
	// when its context has no earlier deadline. Defaults to 10s.
	ShutdownTimeout time.Duration `yaml:"shutdown_timeout"`
	// CrashRollback makes Shutdown return the jobs still in flight to their
	// buckets, due now, without spending an attempt. When false they stay
	// in flight until the reaper recovers them. Defaults to true.
	CrashRollback *bool `yaml:"crash_rollback"`
	// AutoAck treats a handler's nil error without Rejoin as Ack.
	// Defaults to false.
	AutoAck bool `yaml:"auto_ack"`
	// DeadRetention is the most jobs a bucket's dead set keeps; the oldest
	// are deleted beyond it. Defaults to 10,000.
	DeadRetention int `yaml:"dead_retention"`
	// MaxRecoveries is how many times a job may be recovered from a crashed
	// consumer before it is treated as poison and moved to the dead set.
	// Defaults to 5.
	MaxRecoveries int `yaml:"max_recoveries"`
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
	setDefault(&c.LockExpiry, LockExpiryDefault)
	setDefault(&c.HeartbeatInterval, HeartbeatIntervalDefault)
	setDefault(&c.ConsumerTimeout, ConsumerTimeoutDefault)
	setDefault(&c.ShutdownTimeout, ShutdownTimeoutDefault)
	setDefault(&c.DeadRetention, DeadRetentionDefault)
	setDefault(&c.MaxRecoveries, MaxRecoveriesDefault)
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
	return c
}

func setDefault[T comparable](field *T, def T) {
	var zero T
	if *field == zero {
		*field = def
	}
}

// Rollback reports whether Shutdown rolls in-flight jobs back.
func (c Config) Rollback() bool { return c.CrashRollback == nil || *c.CrashRollback }

// Validate reports every invalid field of c, each error naming its field.
// Zero values are invalid where a default exists: call WithDefaults first.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("config: "+format, args...))
	}
	if err := CheckName("Prefix", c.Prefix); err != nil {
		bad("%v", err)
	}
	if c.Concurrency < 1 || c.Concurrency > MaxConcurrency {
		bad("Concurrency %d is out of range 1..%d", c.Concurrency, MaxConcurrency)
	} else if c.Concurrency&(c.Concurrency-1) != 0 {
		lo := 1 << (bits.Len(uint(c.Concurrency)) - 1)
		bad("Concurrency %d is not a power of two (use %d or %d)", c.Concurrency, lo, lo*2)
	}
	positive := map[string]time.Duration{
		"ScanInterval": c.ScanInterval, "PollTimeout": c.PollTimeout,
		"LockExpiry": c.LockExpiry, "HeartbeatInterval": c.HeartbeatInterval,
		"ConsumerTimeout": c.ConsumerTimeout, "ShutdownTimeout": c.ShutdownTimeout,
	}
	for _, name := range []string{"ScanInterval", "PollTimeout", "LockExpiry",
		"HeartbeatInterval", "ConsumerTimeout", "ShutdownTimeout"} {
		if positive[name] <= 0 {
			bad("%s %v must be positive", name, positive[name])
		}
	}
	if c.ConsumeTimeout < 0 {
		bad("ConsumeTimeout %v must not be negative", c.ConsumeTimeout)
	}
	if c.LockExpiry > 0 && c.LockExpiry < 10*time.Millisecond {
		bad("LockExpiry %v is below 10ms", c.LockExpiry)
	}
	if c.ConsumerTimeout > 0 && c.HeartbeatInterval >= c.ConsumerTimeout {
		bad("HeartbeatInterval %v must be shorter than ConsumerTimeout %v", c.HeartbeatInterval, c.ConsumerTimeout)
	}
	if c.MoveBatch < 1 || c.MoveBatch > MaxMoveBatch {
		bad("MoveBatch %d is out of range 1..%d", c.MoveBatch, MaxMoveBatch)
	}
	if c.MaxPool < 1 {
		bad("MaxPool %d must be positive", c.MaxPool)
	}
	if c.MaxBodyBytes < 1 || c.MaxBodyBytes > MaxBodyLimit {
		bad("MaxBodyBytes %d is out of range 1..%d", c.MaxBodyBytes, MaxBodyLimit)
	}
	if c.Retry < -1 || c.Retry > MaxRetriesLimit {
		bad("Retry %d is out of range -1..%d", c.Retry, MaxRetriesLimit)
	}
	if err := CheckIntervals("RetryIntervals", c.RetryIntervals); err != nil {
		bad("%v", err)
	} else if len(c.RetryIntervals) == 0 {
		bad("RetryIntervals is empty")
	}
	if c.Workers < 1 || c.Workers > 10_000 {
		bad("Workers %d is out of range 1..10000", c.Workers)
	}
	if c.DeadRetention < 1 {
		bad("DeadRetention %d must be positive", c.DeadRetention)
	}
	if c.MaxRecoveries < 1 {
		bad("MaxRecoveries %d must be positive", c.MaxRecoveries)
	}
	return errors.Join(errs...)
}

// CheckName reports why s cannot be a topic, id or prefix: empty, longer
// than MaxName bytes, or holding '{', '}', whitespace or a control character.
func CheckName(field, s string) error {
	if s == "" {
		return fmt.Errorf("%s is empty", field)
	}
	if len(s) > MaxName {
		return fmt.Errorf("%s is %d bytes, longer than %d", field, len(s), MaxName)
	}
	if i := strings.IndexFunc(s, badRune); i >= 0 {
		return fmt.Errorf("%s %q has %q at byte %d (no braces, whitespace or control characters)", field, s, s[i:i+1], i)
	}
	return nil
}

func badRune(r rune) bool {
	switch {
	case r == '{' || r == '}':
		return true
	case r < 0x21 || r == 0x7f:
		return true
	case r >= 0x80 && r <= 0x9f, r == 0x85, r == 0xa0, r == 0x1680, r == 0x2028, r == 0x2029,
		r >= 0x2000 && r <= 0x200a, r == 0x202f, r == 0x205f, r == 0x3000, r == 0xfeff, r == 0xfffd:
		return true
	}
	return false
}

// CheckIntervals reports why list cannot be a retry schedule: too long, or
// holding an interval that is not positive or not a whole millisecond count
// of at most a year.
func CheckIntervals(field string, list []time.Duration) error {
	if len(list) > MaxIntervals {
		return fmt.Errorf("%s has %d intervals, more than %d", field, len(list), MaxIntervals)
	}
	for i, d := range list {
		if d < time.Millisecond {
			return fmt.Errorf("%s[%d] = %v must be at least 1ms", field, i, d)
		}
		if d > 365*24*time.Hour {
			return fmt.Errorf("%s[%d] = %v is longer than a year", field, i, d)
		}
	}
	return nil
}

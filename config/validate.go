package config

import (
	"errors"
	"fmt"
	"math/bits"
	"reflect"
	"strings"
	"sync"
	"time"
	"unicode"
)

// FieldError is one invalid setting. Validate returns them joined.
type FieldError struct {
	// Field is the Go name: "ScanInterval", "RetryIntervals[2]", "Redis.URL".
	Field string
	// Key is the YAML key: "scan_interval", "retry_intervals[2]", "redis.url".
	Key string
	// File is the file the setting was loaded from, set by Load.
	File string
	// Env is the REDEQ_* variable that set the value, set by Load.
	Env string
	// Reason says what is wrong with the value: "-1s must be positive".
	Reason string

	keyed bool // loaded: name the setting by its YAML key even without a file
}

// Error names the setting the way its author wrote it: by YAML key and
// file, by environment variable, or by Go field for a Config built in code.
func (e *FieldError) Error() string {
	switch {
	case e.Env != "":
		return e.Env + ": " + e.Reason
	case e.File != "":
		return e.File + ": " + e.Key + ": " + e.Reason
	case e.keyed:
		return "config: " + e.Key + ": " + e.Reason
	default:
		return "config: " + e.Field + " " + e.Reason
	}
}

// Validate reports every invalid field of c, joined, each a *FieldError
// naming its Go field. Zero values are invalid where a default exists:
// call WithDefaults first. The Redis section may be empty (New takes a
// client); when given it must name a server (see RedisConfig).
func (c Config) Validate() error {
	errs := c.problems(goName)
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = e
	}
	return errors.Join(out...)
}

// goName and yamlKey name a field in a reason that mentions another one.
func goName(field string) string { return field }

func yamlKey(field string) string { return fieldKey(field) }

// problems lists the invalid fields of c; name renders a field that a
// reason mentions.
func (c Config) problems(name func(string) string) []*FieldError {
	var out []*FieldError
	bad := func(field, format string, args ...any) {
		out = append(out, &FieldError{Field: field, Key: fieldKey(field), Reason: fmt.Sprintf(format, args...)})
	}
	if reason := nameProblem(c.Prefix); reason != "" {
		bad("Prefix", "%s", reason)
	}
	if len(c.ClientName) > MaxClientName {
		bad("ClientName", "is %d bytes, longer than %d", len(c.ClientName), MaxClientName)
	} else if i := strings.IndexFunc(c.ClientName, unicode.IsControl); i >= 0 {
		bad("ClientName", "%q has a control character at byte %d", c.ClientName, i)
	}
	if c.Concurrency < 1 || c.Concurrency > MaxConcurrency {
		bad("Concurrency", "%d is out of range 1..%d", c.Concurrency, MaxConcurrency)
	} else if c.Concurrency&(c.Concurrency-1) != 0 {
		lo := 1 << (bits.Len(uint(c.Concurrency)) - 1)
		bad("Concurrency", "%d is not a power of two (use %d or %d)", c.Concurrency, lo, lo*2)
	}

	inRange := func(field string, d, lo, hi time.Duration) bool {
		switch {
		case d <= 0:
			bad(field, "%v must be positive", d)
		case d < lo:
			bad(field, "%v is below the minimum %v", d, lo)
		case d > hi:
			bad(field, "%v is above the maximum %v", d, hi)
		default:
			return true
		}
		return false
	}
	scanOK := inRange("ScanInterval", c.ScanInterval, MinInterval, MaxInterval)
	inRange("PollTimeout", c.PollTimeout, MinInterval, MaxInterval)
	if inRange("LockExpiry", c.LockExpiry, MinLockExpiry, MaxInterval) && scanOK && c.LockExpiry <= c.ScanInterval {
		bad("LockExpiry", "%v must be longer than %s %v", c.LockExpiry, name("ScanInterval"), c.ScanInterval)
	}
	timeoutOK := inRange("ConsumerTimeout", c.ConsumerTimeout, MinConsumerTimeout, MaxTimeout)
	if inRange("HeartbeatInterval", c.HeartbeatInterval, MinInterval, MaxInterval) && timeoutOK &&
		3*c.HeartbeatInterval > c.ConsumerTimeout {
		bad("HeartbeatInterval", "%v must be at most a third of %s %v (%v), so a consumer misses two heartbeats before it counts as silent",
			c.HeartbeatInterval, name("ConsumerTimeout"), c.ConsumerTimeout, c.ConsumerTimeout/3)
	}
	inRange("ShutdownTimeout", c.ShutdownTimeout, MinInterval, MaxTimeout)
	if c.ConsumeTimeout != 0 {
		if c.ConsumeTimeout < 0 {
			bad("ConsumeTimeout", "%v must not be negative (0 means no bound)", c.ConsumeTimeout)
		} else {
			inRange("ConsumeTimeout", c.ConsumeTimeout, MinInterval, MaxTimeout)
		}
	}

	if c.MoveBatch < 1 || c.MoveBatch > MaxMoveBatch {
		bad("MoveBatch", "%d is out of range 1..%d", c.MoveBatch, MaxMoveBatch)
	}
	if c.MaxPool < 1 || c.MaxPool > MaxPoolLimit {
		bad("MaxPool", "%d is out of range 1..%d (1<<40)", c.MaxPool, MaxPoolLimit)
	}
	if c.MaxBodyBytes < 1 || c.MaxBodyBytes > MaxBodyLimit {
		bad("MaxBodyBytes", "%d is out of range 1..%d", c.MaxBodyBytes, MaxBodyLimit)
	}
	if c.Retry < -1 || c.Retry > MaxRetriesLimit {
		bad("Retry", "%d is out of range -1..%d", c.Retry, MaxRetriesLimit)
	}
	if len(c.RetryIntervals) == 0 {
		bad("RetryIntervals", "is empty")
	} else if i, reason := intervalsProblem(c.RetryIntervals); reason != "" {
		if i < 0 {
			bad("RetryIntervals", "%s", reason)
		} else {
			bad(fmt.Sprintf("RetryIntervals[%d]", i), "%s", reason)
		}
	}
	if c.Workers < 1 || c.Workers > MaxWorkers {
		bad("Workers", "%d is out of range 1..%d", c.Workers, MaxWorkers)
	}
	if c.DeadRetention < 1 {
		bad("DeadRetention", "%d must be positive", c.DeadRetention)
	}
	if c.Retention < 0 || c.Retention > MaxRetention {
		bad("Retention", "%v is out of range 0..%v", c.Retention, MaxRetention)
	}
	if c.RetentionMax < 1 {
		bad("RetentionMax", "%d must be positive", c.RetentionMax)
	}
	if c.MaxRecoveries < MinMaxRecoveries {
		bad("MaxRecoveries", "%d is below %d, the recoveries from which a job runs alone (a healthy job in flight beside a poison job would go dead with it)", c.MaxRecoveries, MinMaxRecoveries)
	}
	if c.RetireAfter >= 0 { // negative: never
		inRange("RetireAfter", c.RetireAfter, MinRetireAfter, MaxRetireAfter)
	}
	if c.WaitReplicas < 0 || c.WaitReplicas > MaxWaitReplicas {
		bad("WaitReplicas", "%d is out of range 0..%d (0 is off)", c.WaitReplicas, MaxWaitReplicas)
	}
	inRange("WaitTimeout", c.WaitTimeout, MinInterval, MaxWaitTimeout)
	c.Redis.problems(bad, name)
	out = append(out, scheduleProblems(c.Schedules)...)
	out = append(out, listenerProblems(c.Listeners, c.Concurrency)...)
	return out
}

// CheckName reports why s cannot be a topic, id or prefix: empty, longer
// than MaxName bytes, or holding '{', '}', whitespace or a control character.
func CheckName(field, s string) error {
	if reason := nameProblem(s); reason != "" {
		return fmt.Errorf("%s %s", field, reason)
	}
	return nil
}

func nameProblem(s string) string {
	if s == "" {
		return "is empty"
	}
	if len(s) > MaxName {
		return fmt.Sprintf("is %d bytes, longer than %d", len(s), MaxName)
	}
	if i := strings.IndexFunc(s, badRune); i >= 0 {
		return fmt.Sprintf("%q has %q at byte %d (no braces, whitespace or control characters)", s, s[i:i+1], i)
	}
	return ""
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

// CheckIntervals reports why list cannot be a retry schedule: more than
// MaxIntervals intervals, or one shorter than 1ms or longer than
// MaxRetryInterval (a year). It accepts an empty list (whether that means
// the default is the caller's call) and fractions of a millisecond (retry
// times are whole milliseconds: a fraction is rounded up).
func CheckIntervals(field string, list []time.Duration) error {
	i, reason := intervalsProblem(list)
	switch {
	case reason == "":
		return nil
	case i < 0:
		return fmt.Errorf("%s %s", field, reason)
	default:
		return fmt.Errorf("%s[%d] = %s", field, i, reason)
	}
}

// intervalsProblem returns the index of the bad interval (-1 for the
// list as a whole) and the reason, "" when list is fine.
func intervalsProblem(list []time.Duration) (int, string) {
	if len(list) > MaxIntervals {
		return -1, fmt.Sprintf("has %d intervals, more than %d", len(list), MaxIntervals)
	}
	for i, d := range list {
		if d < time.Millisecond {
			return i, fmt.Sprintf("%v must be at least 1ms", d)
		}
		if d > MaxRetryInterval {
			return i, fmt.Sprintf("%v is longer than a year", d)
		}
	}
	return -1, ""
}

// setting is one YAML key of Config, found through the struct tags: a
// value, or a section (redis, redis.tls) that has no variable of its own.
type setting struct {
	field string // Go path: "Redis.TLS.CAFile"
	key   string // YAML path: "redis.tls.ca_file"
	env   string // variable: "REDEQ_REDIS_TLS_CA_FILE"; "" for a section
	index []int  // for reflect.Value.FieldByIndex
}

// settings lists every setting of Config.
var settings = sync.OnceValue(func() []setting {
	var out []setting
	var walk func(t reflect.Type, field, key string, index []int)
	walk = func(t reflect.Type, field, key string, index []int) {
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("yaml")
			if tag == "" || tag == "-" {
				continue
			}
			s := setting{field: field + f.Name, key: key + tag, index: append(append([]int(nil), index...), i)}
			if f.Type.Kind() == reflect.Struct {
				out = append(out, s) // a section: named in messages, set key by key
				walk(f.Type, s.field+".", s.key+".", s.index)
				continue
			}
			if f.Type.Kind() == reflect.Slice && f.Type.Elem().Kind() == reflect.Struct {
				out = append(out, s) // a list of sections (schedules): no variable
				continue
			}
			s.env = EnvPrefix + strings.ToUpper(strings.ReplaceAll(s.key, ".", "_"))
			out = append(out, s)
		}
	}
	walk(reflect.TypeOf(Config{}), "", "", nil)
	return out
})

// fieldKey turns a Go field path into its YAML key, keeping an index
// suffix: "RetryIntervals[2]" -> "retry_intervals[2]".
func fieldKey(field string) string {
	base, suffix := field, ""
	if i := strings.IndexByte(field, '['); i >= 0 {
		base, suffix = field[:i], field[i:]
	}
	for _, s := range settings() {
		if s.field == base {
			return s.key + suffix
		}
	}
	return field
}

// fieldEnv returns the variable that sets field, without index.
func fieldEnv(field string) string {
	base, _, _ := strings.Cut(field, "[")
	for _, s := range settings() {
		if s.field == base {
			return s.env
		}
	}
	return "" // a section, or not a setting
}

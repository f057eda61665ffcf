package pool

import (
	"strconv"
	"strings"
	"time"
)

// A job's errors-hash entry (keys.Bucket.Errors) is its trace: the
// failures of its deliveries, newest first, each as
//
//	"\x1f" <unix ms> ["@" <consumer id>] "," <length of the error> ":" <error>
//
// written by the settle script on the Redis clock; it keeps the last
// MaxFailures. An entry stored before failures carried their time is the
// bare error text: it reads as a failure at an unknown (zero) time; one
// stored before they carried their consumer reads with no consumer.

// MaxFailures bounds the failures a trace keeps.
const MaxFailures = 10

// Failure is one failed delivery of a job.
type Failure struct {
	// At is when the delivery failed, by the Redis clock; zero when not
	// recorded.
	At time.Time
	// Error is the handler's error, cut to 512 bytes.
	Error string
	// Consumer is the id of the consumer whose delivery failed ("" when
	// not recorded); Client.Consumers names it while it runs.
	Consumer string
}

// ParseTrace reads a job's errors-hash entry: its failures, newest first
// (at most MaxFailures). A malformed tail is dropped.
func ParseTrace(v string) []Failure {
	if v == "" {
		return nil
	}
	if v[0] != '\x1f' {
		return []Failure{{Error: v}}
	}
	var out []Failure
	for len(v) > 0 && v[0] == '\x1f' && len(out) < MaxFailures {
		comma := strings.IndexByte(v, ',')
		if comma < 0 {
			break
		}
		colon := strings.IndexByte(v[comma:], ':')
		if colon < 0 {
			break
		}
		colon += comma
		stamp, consumer, _ := strings.Cut(v[1:comma], "@")
		ms, err1 := strconv.ParseInt(stamp, 10, 64)
		n, err2 := strconv.Atoi(v[comma+1 : colon])
		if err1 != nil || err2 != nil || n < 0 || colon+1+n > len(v) {
			break
		}
		out = append(out, Failure{At: time.UnixMilli(ms), Error: v[colon+1 : colon+1+n], Consumer: consumer})
		v = v[colon+1+n:]
	}
	return out
}

// setTrace sets the fields of j that its trace v gives: LastError and
// FailedAt from its newest failure, Failures from all it keeps.
func (j *Job) setTrace(v string) {
	fs := ParseTrace(v)
	if len(fs) == 0 {
		return
	}
	j.LastError, j.FailedAt, j.Failures = fs[0].Error, fs[0].At, fs
}

// SetTrace sets j's LastError, FailedAt and Failures from its errors-hash
// entry v (see ParseTrace).
func (j *Job) SetTrace(v string) { j.setTrace(v) }

// LastErrorOf is the newest failure's error in the errors-hash entry v.
func LastErrorOf(v string) string {
	if fs := ParseTrace(v); len(fs) > 0 {
		return fs[0].Error
	}
	return ""
}

package dashboard

import (
	"fmt"
	"strings"
	"time"

	"github.com/redeq-go/redeq/redeq"
)

// story is what a job's record tells of its failures and of what comes
// next, as the job page shows it.
type story struct {
	// Policy is the retry policy: "5 retries (the job's), then dead".
	Policy string
	// Intervals lists the waits before each retry.
	Intervals string
	// Failed is when the last failure was, as recorded with its error;
	// for one recorded before failures carried their time, FailedAbout
	// says it is worked out from the due time and the job's own retry interval (a job
	// rescheduled by hand since makes it wrong), not recorded. With the
	// default intervals it is not worked out: a listener's may differ.
	Failed      time.Time
	FailedAbout bool
	// Next is what happens next, in words; NextAt when, if known.
	Next   string
	NextAt time.Time
}

// retryPolicy resolves a job's retry settings: its own, else the
// defaults of cfg (a listener's WithRetry, which the dashboard cannot
// see, overrides those).
func retryPolicy(j *redeq.Job, defRetries int, defIntervals []time.Duration) (retries int, own bool, intervals []time.Duration, ownIntervals bool) {
	retries, own = j.MaxRetries, j.MaxRetries != 0
	if !own {
		retries = defRetries
	}
	intervals, ownIntervals = j.RetryIntervals, j.RetryIntervals != nil
	if !ownIntervals {
		intervals = defIntervals
	}
	return retries, own, intervals, ownIntervals
}

// interval is the wait before the retry that follows failure n (from 1).
func interval(intervals []time.Duration, n int) time.Duration {
	if len(intervals) == 0 || n < 1 {
		return 0
	}
	return intervals[min(n, len(intervals))-1]
}

func storyOf(j *redeq.Job, defRetries int, defIntervals []time.Duration) (s story) {
	retries, own, intervals, ownIntervals := retryPolicy(j, defRetries, defIntervals)
	whose := "the job's"
	if !own {
		whose = "the default; a listener's WithRetry may differ"
	}
	switch {
	case retries < 0:
		s.Policy = fmt.Sprintf("never retried (%s): a failure sends it to dead", whose)
	default:
		s.Policy = fmt.Sprintf("attempt %d of %d: %d retries (%s), then dead", j.Attempt+1, retries+1, retries, whose)
	}
	var iv []string
	for _, d := range intervals {
		iv = append(iv, d.String())
	}
	s.Intervals = strings.Join(iv, ", ")
	if s.Intervals == "" {
		s.Intervals = "none"
	}
	if !ownIntervals {
		s.Intervals += " (the default)"
	}
	defer func() {
		if !j.FailedAt.IsZero() { // recorded with the error: no estimate
			s.Failed, s.FailedAbout = j.FailedAt, false
		}
	}()
	switch j.State {
	case redeq.StateDone:
		s.Next = "none: done, acked at"
		s.NextAt = j.FinishedAt
	case redeq.StateDead:
		s.Failed = j.RunAt
		s.Next = "none: " + map[bool]string{true: "sent to dead (" + j.Reason + ")", false: "its retries ran out"}[j.Reason != ""]
	case redeq.StateScheduled:
		if j.Attempt > 0 && !j.RunAt.IsZero() && ownIntervals {
			s.Failed, s.FailedAbout = j.RunAt.Add(-interval(intervals, j.Attempt)), true
			s.Next = fmt.Sprintf("retry %d, due", j.Attempt)
		} else {
			s.Next = "first delivery, due"
		}
		s.NextAt = j.RunAt
	case redeq.StateReady:
		if j.Attempt > 0 && !j.RunAt.IsZero() && ownIntervals {
			s.Failed, s.FailedAbout = j.RunAt.Add(-interval(intervals, j.Attempt)), true
		}
		s.Next = "waiting for a consumer, due since"
		s.NextAt = j.RunAt
	case redeq.StateInFlight:
		s.Next = "running now, held by " + j.Consumer
		if !j.ConsumerSilentSince.IsZero() {
			s.Next = "consumer " + j.Consumer + " silent since"
			s.NextAt = j.ConsumerSilentSince
		}
	case redeq.StateUnAck:
		s.Next = "none: parked in unack until requeued or processed by hand, since"
		s.NextAt = j.RunAt
	}
	return s
}

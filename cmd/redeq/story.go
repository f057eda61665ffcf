package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/redeq-go/redeq/redeq"
)

// storyJSON is what `get -o json` adds about a job's failures and what
// comes next. MaxRetries is the job's own, or the config's default
// (retry_policy "default": a listener's WithRetry, which the CLI cannot
// see, overrides it).
type storyJSON struct {
	MaxRetries     int      `json:"max_retries"`
	RetryPolicy    string   `json:"retry_policy"`
	RetryIntervals []string `json:"retry_intervals"`
	// LastFailureAt is when the job's last delivery failed, as recorded
	// with its error; for a failure recorded before redeq kept its time,
	// when a dead job died, or a retrying job's due time less the retry's
	// interval (last_failure_estimated).
	LastFailureAt        *time.Time `json:"last_failure_at,omitempty"`
	LastFailureEstimated bool       `json:"last_failure_estimated,omitempty"`
	// Next says what comes next; NextAttemptAt when, for a waiting job.
	Next          string     `json:"next"`
	NextAttemptAt *time.Time `json:"next_attempt_at,omitempty"`
}

func storyOf(j *redeq.Job, defRetries int, defIntervals []time.Duration) storyJSON {
	s := storyJSON{MaxRetries: j.MaxRetries, RetryPolicy: "job"}
	if j.MaxRetries == 0 {
		s.MaxRetries, s.RetryPolicy = defRetries, "default"
	}
	intervals := j.RetryIntervals
	if intervals == nil {
		intervals = defIntervals
	}
	s.RetryIntervals = []string{}
	for _, d := range intervals {
		s.RetryIntervals = append(s.RetryIntervals, d.String())
	}
	before := func() {
		if !j.FailedAt.IsZero() {
			s.LastFailureAt = timePtr(j.FailedAt) // recorded with the error
			return
		}
		// Only with the job's own intervals: a listener's WithRetry, which
		// the CLI cannot see, may override the defaults.
		if j.Attempt > 0 && !j.RunAt.IsZero() && len(j.RetryIntervals) > 0 {
			s.LastFailureAt = timePtr(j.RunAt.Add(-intervals[min(j.Attempt, len(intervals))-1]))
			s.LastFailureEstimated = true
		}
	}
	switch j.State {
	case redeq.StateScheduled:
		before()
		s.Next, s.NextAttemptAt = "first delivery", timePtr(j.RunAt)
		if j.Attempt > 0 {
			s.Next = fmt.Sprintf("retry %d", j.Attempt)
		}
	case redeq.StateReady:
		before()
		s.Next, s.NextAttemptAt = "due, waiting for a consumer", timePtr(j.RunAt)
	case redeq.StateInFlight:
		s.Next = "running, held by " + j.Consumer
		if !j.ConsumerSilentSince.IsZero() {
			s.Next = "consumer " + j.Consumer + " silent since " + fmtTime(j.ConsumerSilentSince) + ": a reaper returns the job to ready"
		}
	case redeq.StateDone:
		s.Next = "none: done, acked at " + fmtTime(j.FinishedAt)
	case redeq.StateUnAck:
		s.Next = "none: parked in unack until requeued"
	case redeq.StateDead:
		s.LastFailureAt = timePtr(j.RunAt)
		if !j.FailedAt.IsZero() {
			s.LastFailureAt = timePtr(j.FailedAt)
		}
		s.Next = "none: dead"
	}
	return s
}

// storyRows prints the story under a job's fields.
func storyRows(row func(k, v string), j *redeq.Job, s storyJSON) {
	policy := fmt.Sprintf("attempt %d of %d (%d retries, the job's)", j.Attempt+1, s.MaxRetries+1, s.MaxRetries)
	if s.RetryPolicy == "default" {
		policy = fmt.Sprintf("attempt %d of %d (%d retries, the default: a listener's WithRetry may differ)", j.Attempt+1, s.MaxRetries+1, s.MaxRetries)
	}
	if s.MaxRetries < 0 {
		policy = "never retried: a failure sends it to dead"
	}
	row("retries", policy)
	row("intervals", strings.Join(s.RetryIntervals, ", "))
	switch {
	case s.LastFailureAt != nil && s.LastFailureEstimated:
		row("last failure", "about "+fmtTime(*s.LastFailureAt)+" (due time less the retry interval)")
	case s.LastFailureAt != nil:
		row("last failure", fmtTime(*s.LastFailureAt))
	}
	next := s.Next
	if s.NextAttemptAt != nil {
		next += ", " + fmtTime(*s.NextAttemptAt)
	}
	row("next attempt", next)
}

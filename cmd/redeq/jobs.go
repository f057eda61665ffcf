package main

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/redeq"
)

// jobJSON is a job as -o json writes it: the body as text when it is
// printable UTF-8, else in base64.
type jobJSON struct {
	Topic      string      `json:"topic"`
	ID         string      `json:"id"`
	State      redeq.State `json:"state,omitempty"`
	Attempt    int         `json:"attempt"`
	Recoveries int         `json:"recoveries"`
	CreatedAt  *time.Time  `json:"created_at,omitempty"`
	RunAt      *time.Time  `json:"run_at,omitempty"`
	Consumer   string      `json:"consumer,omitempty"`
	Reason     string      `json:"reason,omitempty"`
	LastError  string      `json:"last_error,omitempty"`
	// FailedAt is when LastError's delivery failed; Failures the failed
	// deliveries kept, newest first (the last nine before it too, on a
	// topic with retention).
	FailedAt *time.Time    `json:"failed_at,omitempty"`
	Failures []failureJSON `json:"failures,omitempty"`
	// ConsumerSilentSince: the consumer holding a job in flight missed its
	// heartbeats past its timeout since then, and no reaper recovered the
	// job yet.
	ConsumerSilentSince *time.Time `json:"consumer_silent_since,omitempty"`
	// FinishedAt: when a done job was acked (by Consumer).
	FinishedAt *time.Time        `json:"finished_at,omitempty"`
	Headers    map[string]string `json:"headers,omitempty"`
	Body       *string           `json:"body,omitempty"`
	BodyBase64 *string           `json:"body_base64,omitempty"`
	Size       int               `json:"size"`
	// Mark names this stay of an un_acked or dead job (redeq's Job.Mark).
	Mark string `json:"mark,omitempty"`
	storyJSON
}

// fullJSON is a job as get and list -o json write it: its fields, body
// and retry settings (the story get shows).
func fullJSON(j *redeq.Job, cfg config.Config) jobJSON {
	out := toJSON(j, true)
	st := storyOf(j, cfg.Retry, cfg.RetryIntervals)
	out.storyJSON = st
	out.Mark = j.Mark()
	if j.State == redeq.StateInFlight {
		// List gives an in-flight job its fetch time, Get gives none: the
		// JSON of both is one record (the table of list shows how long it
		// has run; `redeq servers` does too).
		out.RunAt = nil
	}
	return out
}

// failureJSON is one failed delivery.
type failureJSON struct {
	At       *time.Time `json:"at,omitempty"`
	Error    string     `json:"error"`
	Consumer string     `json:"consumer,omitempty"`
}

func toJSON(j *redeq.Job, withBody bool) jobJSON {
	out := jobJSON{Topic: j.Topic, ID: j.ID, State: j.State, Attempt: j.Attempt, Recoveries: j.Recoveries,
		CreatedAt: timePtr(j.CreatedAt), RunAt: timePtr(j.RunAt), Consumer: j.Consumer, Reason: j.Reason,
		LastError: j.LastError, FailedAt: timePtr(j.FailedAt), ConsumerSilentSince: timePtr(j.ConsumerSilentSince),
		FinishedAt: timePtr(j.FinishedAt), Headers: j.Headers, Size: len(j.Body)}
	for _, f := range j.Failures {
		out.Failures = append(out.Failures, failureJSON{At: timePtr(f.At), Error: f.Error, Consumer: f.Consumer})
	}
	if withBody {
		if printable(j.Body) {
			s := string(j.Body)
			out.Body = &s
		} else {
			s := base64.StdEncoding.EncodeToString(j.Body)
			out.BodyBase64 = &s
		}
	}
	return out
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// writeJob prints one job for a person, with its story when s is given.
func writeJob(w io.Writer, j *redeq.Job, s *storyJSON) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", safe(k), safe(v)) }
	row("topic", j.Topic)
	row("id", j.ID)
	row("state", string(j.State))
	row("attempt", fmt.Sprint(j.Attempt))
	row("recoveries", fmt.Sprint(j.Recoveries))
	row("created", fmtTime(j.CreatedAt))
	switch j.State {
	case redeq.StateUnAck, redeq.StateDead:
		row("since", fmtTime(j.RunAt))
	case redeq.StateDone:
		row("finished", fmtTime(j.FinishedAt))
	default:
		row("due", fmtTime(j.RunAt))
	}
	if j.Consumer != "" {
		row("consumer", j.Consumer)
	}
	if !j.ConsumerSilentSince.IsZero() {
		row("consumer silent since", fmtTime(j.ConsumerSilentSince)+" (missed its heartbeats; a reaper returns the job to ready)")
	}
	if j.Reason != "" {
		row("reason", j.Reason)
	}
	if j.LastError != "" {
		row("last error", j.LastError)
	}
	if !j.FailedAt.IsZero() {
		row("failed at", fmtTime(j.FailedAt))
	}
	if len(j.Failures) > 1 {
		for i, f := range j.Failures {
			on := ""
			if f.Consumer != "" {
				on = "  on " + f.Consumer
			}
			row(fmt.Sprintf("failure %d", i+1), fmtTime(f.At)+on+"  "+oneLine(f.Error))
		}
	}
	if s != nil {
		storyRows(row, j, *s)
	}
	keys := make([]string, 0, len(j.Headers))
	for k := range j.Headers {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		row("header "+k, j.Headers[k])
	}
	_ = tw.Flush()
	if printable(j.Body) {
		fmt.Fprintf(w, "body (%d bytes):\n%s\n", len(j.Body), j.Body)
	} else {
		fmt.Fprintf(w, "body (%d bytes, hex):\n%s", len(j.Body), hex.Dump(j.Body))
	}
}

// writeJobs prints a list of jobs as a table.
func writeJobs(w io.Writer, jobs []*redeq.Job) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATE\tATTEMPT\tCREATED\tDUE/SINCE\tFAILED AT\tREASON")
	for _, j := range jobs {
		reason := j.Reason
		if reason == "" {
			reason = j.LastError
		}
		at := j.RunAt
		if j.State == redeq.StateDone {
			at = j.FinishedAt // when it finished
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\n", safe(j.ID), j.State, j.Attempt, fmtTime(j.CreatedAt), fmtTime(at), fmtTime(j.FailedAt), safe(oneLine(reason)))
	}
	_ = tw.Flush()
}

// writeInFlight prints a list of jobs in flight as a table: who runs
// each (the consumer's id, as `redeq servers` lists it) and for how long,
// counted from its fetch to now (the server's clock).
func writeInFlight(w io.Writer, jobs []*redeq.Job, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tATTEMPT\tCONSUMER\tFETCHED\tRUNNING\tLAST ERROR")
	for _, j := range jobs {
		running := "-"
		if !j.RunAt.IsZero() {
			running = max(now.Sub(j.RunAt), 0).Round(time.Millisecond).String()
		}
		if !j.ConsumerSilentSince.IsZero() {
			running = "consumer silent since " + fmtTime(j.ConsumerSilentSince)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", safe(j.ID), j.Attempt, safe(j.Consumer), fmtTime(j.RunAt), running, safe(oneLine(j.LastError)))
	}
	_ = tw.Flush()
}

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}

// safe escapes what a terminal would act on instead of showing (escape
// sequences, carriage returns, other control characters, invalid UTF-8)
// in a field printed for a person: headers and errors come from producers
// and handlers, not from the operator.
func safe(s string) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || !unicode.IsPrint(r) {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	q := strconv.QuoteToGraphic(s)
	return q[1 : len(q)-1]
}

// printable reports whether b is UTF-8 text a terminal shows as is.
func printable(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if !unicode.IsPrint(r) && r != '\n' && r != '\r' && r != '\t' {
			return false
		}
	}
	return true
}

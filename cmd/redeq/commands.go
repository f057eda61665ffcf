package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/redeq-go/redeq/redeq"
)

func topicsCmd(o *opts) *cobra.Command {
	return &cobra.Command{
		Use:   "topics",
		Short: "List every topic with its buckets, consumers and pause flag",
		Args:  args(cobra.NoArgs),
		RunE: withClient(o, func(ctx context.Context, c *redeq.Client, cmd *cobra.Command, _ []string) error {
			topics, err := c.Topics(ctx)
			if err != nil {
				return err
			}
			if len(topics) == 0 {
				noTopicsHint(c, cmd)
			}
			if o.json() {
				type topicJSON struct {
					Name      string `json:"name"`
					Buckets   int    `json:"buckets"`
					Consumers int64  `json:"consumers"`
					Paused    bool   `json:"paused"`
				}
				out := []topicJSON{}
				for _, t := range topics {
					out = append(out, topicJSON{t.Name, t.Buckets, t.Consumers, t.Paused})
				}
				return writeJSON(cmd.OutOrStdout(), out)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TOPIC\tBUCKETS\tCONSUMERS\tPAUSED")
			for _, t := range topics {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%v\n", t.Name, t.Buckets, t.Consumers, t.Paused)
			}
			return tw.Flush()
		}),
	}
}

type statsJSON struct {
	Topic     string `json:"topic"`
	Pool      int64  `json:"pool"`
	Scheduled int64  `json:"scheduled"`
	Ready     int64  `json:"ready"`
	InFlight  int64  `json:"inflight"`
	UnAck     int64  `json:"unack"`
	Dead      int64  `json:"dead"`
	Consumers int64  `json:"consumers"`
	Buckets   int    `json:"buckets"`
	Paused    bool   `json:"paused"`
	// Running and Waiting count the jobs holding a slot of the topic's
	// global limits and those held back by them; Limits is absent when
	// the topic has none.
	Running int64       `json:"running"`
	Waiting int64       `json:"waiting"`
	Limits  *limitsJSON `json:"limits,omitempty"`
}

type limitsJSON struct {
	MaxRunning int    `json:"max_running,omitempty"`
	Rate       int    `json:"rate,omitempty"`
	Per        string `json:"per,omitempty"`
	Key        string `json:"key,omitempty"`
}

func limitsOf(l redeq.Limits) *limitsJSON {
	if !l.Set() {
		return nil
	}
	out := &limitsJSON{MaxRunning: l.MaxRunning, Rate: l.Rate, Key: l.Key}
	if l.Rate > 0 {
		out.Per = l.Per.String()
	}
	return out
}

// text is the limits as the stats table shows them: "max 5, 50/1s per
// tenant", "-" for none.
func (l *limitsJSON) text() string {
	if l == nil {
		return "-"
	}
	var parts []string
	if l.MaxRunning > 0 {
		parts = append(parts, fmt.Sprintf("max %d", l.MaxRunning))
	}
	if l.Rate > 0 {
		parts = append(parts, fmt.Sprintf("%d/%s", l.Rate, l.Per))
	}
	s := strings.Join(parts, ", ")
	if l.Key != "" {
		s += " per " + l.Key
	}
	return s
}

func statsCmd(o *opts) *cobra.Command {
	var watch bool
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "stats [TOPIC]",
		Short: "Count the jobs of a topic, or of every topic, by state (--watch: again every --interval)",
		Args:  args(cobra.MaximumNArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			if interval < 100*time.Millisecond {
				return usagef("--interval %v: want at least 100ms", interval)
			}
			return withClient(o, func(ctx context.Context, c *redeq.Client, cmd *cobra.Command, a []string) error {
				if !watch {
					return printStats(ctx, o, c, cmd, a)
				}
				// Until interrupted: the command's context ends on SIGINT or
				// SIGTERM, which is a normal end of a watch.
				t := time.NewTicker(interval)
				defer t.Stop()
				for {
					if !o.json() {
						fmt.Fprintf(cmd.OutOrStdout(), "%s\n", time.Now().UTC().Format(time.RFC3339))
					}
					if err := printStats(ctx, o, c, cmd, a); err != nil {
						switch {
						case ctx.Err() != nil:
							return nil
						case exitCode(err) != exitError:
							return err // a topic that is not there will not come
						}
						// Redis may come back: say so and try again.
						fmt.Fprintf(cmd.ErrOrStderr(), "redeq: %v\n", err)
					}
					if !o.json() {
						fmt.Fprintln(cmd.OutOrStdout())
					}
					select {
					case <-ctx.Done():
						return nil
					case <-t.C:
					}
				}
			})(cmd, a)
		},
	}
	cmd.Flags().BoolVar(&watch, "watch", false, "print again every --interval until interrupted (JSON: one document a line)")
	cmd.Flags().DurationVar(&interval, "interval", 2*time.Second, "how often --watch prints")
	return cmd
}

// printStats prints the counts of the topics named, or of every topic.
func printStats(ctx context.Context, o *opts, c *redeq.Client, cmd *cobra.Command, a []string) error {
	names := a
	if len(a) == 0 {
		topics, err := c.Topics(ctx)
		if err != nil {
			return err
		}
		if len(topics) == 0 {
			noTopicsHint(c, cmd)
		}
		for _, t := range topics {
			names = append(names, t.Name)
		}
	}
	out := []statsJSON{}
	for _, n := range names {
		s, err := c.Stats(ctx, n)
		if err != nil {
			return fmt.Errorf("stats %s: %w", n, err)
		}
		out = append(out, statsJSON{n, s.Pool, s.Scheduled, s.Ready, s.InFlight, s.UnAck, s.Dead, s.Consumers, s.Buckets, s.Paused,
			s.Running, s.Waiting, limitsOf(s.Limits)})
	}
	if o.json() {
		// An array whether one topic was named or none: one shape to parse.
		return writeJSON(cmd.OutOrStdout(), out)
	}
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TOPIC\tSCHEDULED\tREADY\tINFLIGHT\tUNACK\tDEAD\tPOOL\tCONSUMERS\tPAUSED\tRUNNING\tWAITING\tLIMITS")
	for _, s := range out {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%v\t%d\t%d\t%s\n", s.Topic, s.Scheduled, s.Ready, s.InFlight, s.UnAck, s.Dead, s.Pool, s.Consumers, s.Paused,
			s.Running, s.Waiting, s.Limits.text())
	}
	return tw.Flush()
}

func listCmd(o *opts) *cobra.Command {
	var limit int
	var cursor string
	cmd := &cobra.Command{
		Use:   "list TOPIC STATE",
		Short: "List a page of a topic's jobs in a state (scheduled, ready, inflight, unack, dead; retrying: scheduled after a failure; done: acked, on a topic with retention)",
		Args:  args(cobra.ExactArgs(2)),
		RunE: withClient(o, func(ctx context.Context, c *redeq.Client, cmd *cobra.Command, a []string) error {
			var page redeq.Page
			var err error
			if a[1] == "retrying" {
				page, err = retryingPage(ctx, c, a[0], limit, cursor)
			} else {
				// Scheduled jobs in due order across the buckets.
				page, err = c.List(ctx, a[0], redeq.State(a[1]), redeq.ListOptions{Limit: limit, Cursor: cursor, DueOrder: true})
			}
			if err != nil {
				return err
			}
			if o.json() {
				out := struct {
					Jobs []jobJSON `json:"jobs"`
					Next string    `json:"next"`
				}{Jobs: []jobJSON{}, Next: page.Next}
				cfg := c.Config()
				for _, j := range page.Jobs {
					out.Jobs = append(out.Jobs, fullJSON(j, cfg))
				}
				return writeJSON(cmd.OutOrStdout(), out)
			}
			if redeq.State(a[1]) == redeq.StateInFlight {
				now, err := c.ServerTime(ctx) // how long each has run, on the server's clock
				if err != nil {
					return err
				}
				writeInFlight(cmd.OutOrStdout(), page.Jobs, now)
			} else {
				writeJobs(cmd.OutOrStdout(), page.Jobs)
			}
			if page.Next != "" {
				fmt.Fprintf(cmd.OutOrStdout(), "more: --cursor %s\n", page.Next)
			}
			return nil
		}),
	}
	cmd.Flags().IntVar(&limit, "limit", 0, "jobs per page, 1..1000 (default 100)")
	cmd.Flags().StringVar(&cursor, "cursor", "", "the cursor a previous page printed")
	return cmd
}

// retryingPage is a page of the scheduled jobs of topic that failed before
// (attempt > 0), from at most 10 pages of List: it may hold fewer jobs
// than limit, or none, while its Next says there are more to read.
func retryingPage(ctx context.Context, c *redeq.Client, topic string, limit int, cursor string) (redeq.Page, error) {
	want := limit
	if want == 0 {
		want = redeq.DefaultListLimit
	}
	var out redeq.Page
	for range 10 {
		p, err := c.List(ctx, topic, redeq.StateScheduled, redeq.ListOptions{Limit: limit, Cursor: cursor, DueOrder: true})
		if err != nil {
			return redeq.Page{}, err
		}
		for _, j := range p.Jobs {
			if j.Attempt > 0 {
				out.Jobs = append(out.Jobs, j)
			}
		}
		out.Next, cursor = p.Next, p.Next
		if p.Next == "" || len(out.Jobs) >= want {
			break
		}
	}
	return out, nil
}

func getCmd(o *opts) *cobra.Command {
	var raw bool
	cmd := &cobra.Command{
		Use:   "get TOPIC ID",
		Short: "Show a job: state, attempts, headers and body (text when printable, else hex)",
		Args:  args(cobra.ExactArgs(2)),
		RunE: withClient(o, func(ctx context.Context, c *redeq.Client, cmd *cobra.Command, a []string) error {
			j, err := c.Get(ctx, a[0], a[1])
			if err != nil {
				return err
			}
			if raw {
				_, err = cmd.OutOrStdout().Write(j.Body)
				return err
			}
			cfg := c.Config()
			if o.json() {
				return writeJSON(cmd.OutOrStdout(), fullJSON(j, cfg))
			}
			st := storyOf(j, cfg.Retry, cfg.RetryIntervals)
			writeJob(cmd.OutOrStdout(), j, &st)
			return nil
		}),
	}
	cmd.Flags().BoolVar(&raw, "raw", false, "write the body's bytes only")
	return cmd
}

func addCmd(o *opts) *cobra.Command {
	var delay time.Duration
	var at, body string
	var headers []string
	var maxRetries int
	var create bool
	cmd := &cobra.Command{
		Use:   "add TOPIC [ID]",
		Short: "Add a job (an id is generated when none is given)",
		Long: `Add a job, due after --delay or at --at (RFC 3339), now by default.
--body is the body: text, @FILE for a file's bytes, or - for standard input.`,
		Args: args(cobra.RangeArgs(1, 2)),
		RunE: func(cmd *cobra.Command, a []string) error {
			j := &redeq.Job{Topic: a[0], Delay: delay, MaxRetries: maxRetries}
			if len(a) == 2 {
				j.ID = a[1]
			}
			if cmd.Flags().Changed("delay") && at != "" {
				return usagef("give --delay or --at, not both")
			}
			if at != "" {
				t, err := parseTime(at)
				if err != nil {
					return err
				}
				j.RunAt = t
			}
			b, err := readBody(body, o.stdin)
			if err != nil {
				return err
			}
			j.Body = b
			for _, h := range headers {
				k, v, ok := strings.Cut(h, "=")
				if !ok || k == "" {
					return usagef("--header %q: want KEY=VALUE", h)
				}
				if j.Headers == nil {
					j.Headers = map[string]string{}
				}
				j.Headers[k] = v
			}
			return withClient(o, func(ctx context.Context, c *redeq.Client, cmd *cobra.Command, _ []string) error {
				if !create {
					if _, err := c.Stats(ctx, j.Topic); errors.Is(err, redeq.ErrUnknownTopic) {
						return fmt.Errorf("topic %q is not in use under the prefix %q (no job was ever added to it): check its name, or add --create to start it: %w", j.Topic, c.Config().Prefix, redeq.ErrUnknownTopic)
					} else if err != nil {
						return err
					}
				}
				if err := c.Add(ctx, j); err != nil {
					return err
				}
				if o.json() {
					return writeJSON(cmd.OutOrStdout(), map[string]string{"topic": j.Topic, "id": j.ID})
				}
				fmt.Fprintln(cmd.OutOrStdout(), j.ID)
				return nil
			})(cmd, a)
		},
	}
	f := cmd.Flags()
	f.DurationVar(&delay, "delay", 0, "due after this long (1m30s)")
	f.StringVar(&at, "at", "", "due at this time, RFC 3339 (2026-01-02T15:04:05Z)")
	f.StringVar(&body, "body", "", "the body: text, @FILE, or - for standard input")
	f.StringArrayVar(&headers, "header", nil, "a header KEY=VALUE (repeatable)")
	f.IntVar(&maxRetries, "max-retries", 0, "retries after a failure (0: the listener's or config's; -1: never)")
	f.BoolVar(&create, "create", false, "add to a topic nobody has used yet (without it, a typo in the name is refused)")
	return cmd
}

func parseTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, usagef("--at %q: want an RFC 3339 time such as 2026-01-02T15:04:05Z", s)
	}
	return t, nil
}

func readBody(spec string, stdin io.Reader) ([]byte, error) {
	switch {
	case spec == "-":
		return io.ReadAll(stdin)
	case strings.HasPrefix(spec, "@"):
		b, err := os.ReadFile(spec[1:])
		if err != nil {
			return nil, usageError{fmt.Errorf("--body: %w", err)}
		}
		return b, nil
	}
	return []byte(spec), nil
}

func deleteCmd(o *opts) *cobra.Command {
	var b bulkFlags
	cmd := &cobra.Command{
		Use:   "delete TOPIC ID|--all --state S",
		Short: "Delete a job from wherever it waits, or --all jobs of a state that match the filters (asks first unless --yes)",
		Long: `Delete a job from wherever it waits.

With --all --state scheduled|ready|unack|dead and the filters (--error,
--min-attempt, --due-before, --due-after), it takes the jobs that match
when it starts, asks about them (unless --yes), and deletes them: scheduled
and ready jobs wherever they are by then, unack and dead jobs while they
are still parked there. --dry-run counts them and changes nothing.`,
		Args: args(cobra.RangeArgs(1, 2)),
		RunE: func(cmd *cobra.Command, a []string) error {
			if err := b.check(cmd); err != nil {
				return err
			}
			if b.all != (len(a) == 1) {
				return usagef("give a job id or --all, not both")
			}
			return withClient(o, func(ctx context.Context, c *redeq.Client, cmd *cobra.Command, a []string) error {
				if b.all {
					state, err := bulkState(b.state)
					if err != nil {
						return err
					}
					return runBulk(ctx, o, c, cmd, &b, a[0], state, deleteAction)
				}
				j, err := c.Delete(ctx, a[0], a[1])
				if err != nil {
					return err
				}
				return done(o, cmd, "deleted", j.Topic, j.ID, string(j.State))
			})(cmd, a)
		},
	}
	b.add(cmd, true)
	return cmd
}

// done reports an action that succeeded.
func done(o *opts, cmd *cobra.Command, what, topic, id, detail string) error {
	if o.json() {
		return writeJSON(cmd.OutOrStdout(), map[string]string{"done": what, "topic": topic, "id": id})
	}
	s := what + " " + topic
	if id != "" {
		s += " " + id
	}
	if detail != "" {
		s += " (" + detail + ")"
	}
	fmt.Fprintln(cmd.OutOrStdout(), s)
	return nil
}

func rescheduleCmd(o *opts) *cobra.Command {
	var at string
	var in time.Duration
	cmd := &cobra.Command{
		Use:   "reschedule TOPIC ID",
		Short: "Give a waiting job a new due time: --at T or --in D by the server's clock (--in 0 runs it now)",
		Args:  args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, a []string) error {
			hasIn := cmd.Flags().Changed("in")
			if (at == "") == !hasIn {
				return usagef("give one of --at and --in")
			}
			if in < 0 {
				return usagef("--in %v: want 0 or more (0 runs the job now)", in)
			}
			var when time.Time
			if at != "" {
				t, err := parseTime(at)
				if err != nil {
					return err
				}
				when = t
			}
			return withClient(o, func(ctx context.Context, c *redeq.Client, cmd *cobra.Command, a []string) error {
				if hasIn {
					// Counted on the Redis server's clock, the one the
					// movers go by: this machine's may be off.
					if err := c.RescheduleIn(ctx, a[0], a[1], in); err != nil {
						return err
					}
					return done(o, cmd, "rescheduled", a[0], a[1], "due in "+in.String()+" by the server's clock")
				}
				if err := c.Reschedule(ctx, a[0], a[1], when); err != nil {
					return err
				}
				return done(o, cmd, "rescheduled", a[0], a[1], "due "+fmtTime(when))
			})(cmd, a)
		},
	}
	cmd.Flags().StringVar(&at, "at", "", "new due time, RFC 3339")
	cmd.Flags().DurationVar(&in, "in", 0, "new due time, this long from now by the Redis server's clock")
	return cmd
}

func requeueCmd(o *opts) *cobra.Command {
	var in time.Duration
	var b bulkFlags
	cmd := &cobra.Command{
		Use:   "requeue unack|dead TOPIC ID|--all, or requeue TOPIC --all --state S",
		Short: "Move a parked (unack) or dead job, or --all jobs of a state that match the filters, back to its bucket, due now or --in D",
		Long: `Move a parked (unack) or dead job back to its bucket, due now or after
--in by the Redis server's clock (a dead job with a fresh count of attempts).

--all takes every job of the state that matches the filters (--error,
--min-attempt, --due-before, --due-after) when it starts, once each:
"requeue dead orders --all", or "requeue orders --all --state S" for any of
scheduled, ready, unack and dead (scheduled and ready jobs get the new due
time, their attempts unchanged; ready jobs need --in). --dry-run counts
them and changes nothing.`,
		Args: args(cobra.RangeArgs(1, 3)),
		RunE: func(cmd *cobra.Command, a []string) error {
			if err := b.check(cmd); err != nil {
				return err
			}
			if in < 0 {
				return usagef("--in %v: want 0 or more (0: due now)", in)
			}
			var topic string
			var state redeq.State
			if b.stateSeen {
				if len(a) != 1 || !b.all {
					return usagef("with --state: requeue TOPIC --all --state S")
				}
				st, err := bulkState(b.state)
				if err != nil {
					return err
				}
				topic, state = a[0], st
			} else {
				if len(a) < 2 {
					return usagef("requeue unack|dead TOPIC ID|--all, or requeue TOPIC --all --state S")
				}
				from := a[0]
				if from != "unack" && from != "dead" {
					return usagef("requeue %q: want unack or dead", from)
				}
				if b.all != (len(a) == 2) {
					return usagef("give a job id or --all, not both")
				}
				topic, state = a[1], redeq.State(from)
			}
			if state == redeq.StateReady && in == 0 {
				return usagef("ready jobs are due already: give --in")
			}
			if b.all {
				return withClient(o, func(ctx context.Context, c *redeq.Client, cmd *cobra.Command, _ []string) error {
					if !b.stateSeen && !b.filterSet && !b.dryRun {
						// The form of old, and its report.
						r, err := requeueAll(ctx, c, string(state), topic, in)
						if err != nil {
							return fmt.Errorf("after requeuing %d jobs: %w", r.Done, err)
						}
						if o.json() {
							return writeJSON(cmd.OutOrStdout(), map[string]any{"done": "requeued", "topic": topic, "from": state, "state": state, "count": r.Done, "skipped": r.Skipped, "changed": r.Changed})
						}
						fmt.Fprintf(cmd.OutOrStdout(), "requeued %d jobs of %s from %s%s\n", r.Done, topic, state, skipped(r, string(state)))
						return nil
					}
					return runBulk(ctx, o, c, cmd, &b, topic, state, requeueAction("requeue", "requeued", in))
				})(cmd, a)
			}
			return withClient(o, func(ctx context.Context, c *redeq.Client, cmd *cobra.Command, _ []string) error {
				var err error
				if state == redeq.StateUnAck {
					err = c.RequeueUnAck(ctx, topic, a[2], in)
				} else {
					err = c.RequeueDead(ctx, topic, a[2], in)
				}
				if err != nil {
					return err
				}
				return done(o, cmd, "requeued", topic, a[2], "from "+string(state))
			})(cmd, a)
		},
	}
	cmd.Flags().DurationVar(&in, "in", 0, "due this long from now by the Redis server's clock")
	b.add(cmd, false)
	return cmd
}

// parkedIDs returns the ids of topic's jobs in state (unack or dead) as
// List pages them now, with their marks: the fixed set a bulk command acts
// on, whatever is parked after (a job of one of the ids added or parked
// again too). It holds them in memory (about 150 bytes a job).
func parkedIDs(ctx context.Context, c *redeq.Client, topic string, state redeq.State) ([]string, map[string]string, error) {
	var ids []string
	marks := map[string]string{}
	seen := map[string]bool{}
	cursor := ""
	for {
		page, err := c.List(ctx, topic, state, redeq.ListOptions{Limit: redeq.MaxListLimit, Cursor: cursor})
		if err != nil {
			return nil, nil, err
		}
		for _, j := range page.Jobs {
			if !seen[j.ID] {
				seen[j.ID] = true
				ids = append(ids, j.ID)
				marks[j.ID] = j.Mark()
			}
		}
		if page.Next == "" {
			return ids, marks, nil
		}
		cursor = page.Next
	}
}

// inBatches runs do on ids, at most redeq.MaxBulk at a time, and adds up
// what it did.
func inBatches(ids []string, do func([]string) (redeq.BulkResult, error)) (redeq.BulkResult, error) {
	var total redeq.BulkResult
	for len(ids) > 0 {
		n := min(len(ids), redeq.MaxBulk)
		r, err := do(ids[:n])
		total.Done += r.Done
		total.Skipped += r.Skipped
		total.Changed += r.Changed
		if err != nil {
			return total, err
		}
		ids = ids[n:]
	}
	return total, nil
}

// requeueAll requeues, once each, the jobs of topic parked in from (unack
// or dead) when it starts. Jobs parked after it started (a requeued job
// that fails again at once, for one, or a job of a listed id added and
// parked again) are left, so it ends however fast jobs die; jobs that
// left the set meanwhile are skipped and counted, those parked again
// counted as changed.
func requeueAll(ctx context.Context, c *redeq.Client, from, topic string, in time.Duration) (redeq.BulkResult, error) {
	state := redeq.State(from)
	ids, marks, err := c.SelectMarks(ctx, topic, state, redeq.Filter{}, 0)
	if err != nil {
		return redeq.BulkResult{}, err
	}
	return inBatches(ids, func(b []string) (redeq.BulkResult, error) {
		return c.RequeueJobs(ctx, topic, state, b, in, redeq.Marks(marks))
	})
}

// skipped is the note a bulk command adds when jobs left its set before
// it reached them, or were added or parked again since it listed them.
func skipped(r redeq.BulkResult, where string) string {
	s := ""
	if r.Skipped > 0 {
		s = fmt.Sprintf("; %d skipped, no longer %s", r.Skipped, where)
	}
	if r.Changed > 0 {
		s += fmt.Sprintf("; %d left, %s again since listed", r.Changed, where)
	}
	return s
}

func purgeCmd(o *opts) *cobra.Command {
	var yes bool
	cmd := &cobra.Command{
		Use:   "purge dead TOPIC",
		Short: "Remove the dead jobs of a topic, for good (asks first unless --yes)",
		Long: `Remove the dead jobs of a topic, for good.

It takes the ids of the jobs dead when it starts, asks about them (unless
--yes), and removes those of them still dead: jobs that die while it asks
or works stay.`,
		Args: args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, a []string) error {
			if a[0] != "dead" {
				return usagef("purge %q: only the dead set can be purged", a[0])
			}
			return withClient(o, func(ctx context.Context, c *redeq.Client, cmd *cobra.Command, _ []string) error {
				topic := a[1]
				ids, marks, err := parkedIDs(ctx, c, topic, redeq.StateDead)
				if err != nil {
					return err
				}
				if !yes {
					fmt.Fprintf(cmd.ErrOrStderr(), "Remove the %d dead jobs of %s, for good? [y/N] ", len(ids), topic)
					line, _ := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
					if ans := strings.ToLower(strings.TrimSpace(line)); ans != "y" && ans != "yes" {
						return errors.New("not confirmed: nothing removed (--yes skips the question)")
					}
				}
				r, err := inBatches(ids, func(b []string) (redeq.BulkResult, error) { return c.PurgeDeadJobs(ctx, topic, b, redeq.Marks(marks)) })
				if err != nil {
					return fmt.Errorf("after purging %d dead jobs: %w", r.Done, err)
				}
				if o.json() {
					return writeJSON(cmd.OutOrStdout(), map[string]any{"done": "purged", "topic": topic, "count": r.Done, "skipped": r.Skipped, "changed": r.Changed})
				}
				fmt.Fprintf(cmd.OutOrStdout(), "purged %d dead jobs of %s%s\n", r.Done, topic, skipped(r, "dead"))
				return nil
			})(cmd, a)
		},
	}
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask")
	return cmd
}

func pauseCmd(o *opts, pause bool) *cobra.Command {
	use, short := "pause TOPIC", "Stop every listener from fetching a topic's jobs"
	if !pause {
		use, short = "resume TOPIC", "Let listeners fetch a paused topic's jobs again"
	}
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  args(cobra.ExactArgs(1)),
		RunE: withClient(o, func(ctx context.Context, c *redeq.Client, cmd *cobra.Command, a []string) error {
			if pause {
				if err := c.Pause(ctx, a[0]); err != nil {
					return err
				}
				return done(o, cmd, "paused", a[0], "", "")
			}
			if err := c.Resume(ctx, a[0]); err != nil {
				return err
			}
			return done(o, cmd, "resumed", a[0], "", "")
		}),
	}
}

// noTopicsHint tells, on standard error, that the prefix holds no topic:
// a wrong --prefix would otherwise read as an empty, healthy system.
func noTopicsHint(c *redeq.Client, cmd *cobra.Command) {
	fmt.Fprintf(cmd.ErrOrStderr(), "redeq: no topic under the prefix %q on this Redis: is --prefix (or the config's prefix) the one your services use?\n", c.Config().Prefix)
}

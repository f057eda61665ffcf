package main

import (
	"context"
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
}

func statsCmd(o *opts) *cobra.Command {
	return &cobra.Command{
		Use:   "stats [TOPIC]",
		Short: "Count the jobs of a topic, or of every topic, by state",
		Args:  args(cobra.MaximumNArgs(1)),
		RunE: withClient(o, func(ctx context.Context, c *redeq.Client, cmd *cobra.Command, a []string) error {
			names := a
			if len(a) == 0 {
				topics, err := c.Topics(ctx)
				if err != nil {
					return err
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
				out = append(out, statsJSON{n, s.Pool, s.Scheduled, s.Ready, s.InFlight, s.UnAck, s.Dead, s.Consumers, s.Buckets, s.Paused})
			}
			if o.json() {
				if len(a) == 1 {
					return writeJSON(cmd.OutOrStdout(), out[0])
				}
				return writeJSON(cmd.OutOrStdout(), out)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TOPIC\tSCHEDULED\tREADY\tINFLIGHT\tUNACK\tDEAD\tPOOL\tCONSUMERS\tPAUSED")
			for _, s := range out {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%v\n", s.Topic, s.Scheduled, s.Ready, s.InFlight, s.UnAck, s.Dead, s.Pool, s.Consumers, s.Paused)
			}
			return tw.Flush()
		}),
	}
}

func listCmd(o *opts) *cobra.Command {
	var limit int
	var cursor string
	cmd := &cobra.Command{
		Use:   "list TOPIC STATE",
		Short: "List a page of a topic's jobs in a state (scheduled, ready, inflight, unack, dead)",
		Args:  args(cobra.ExactArgs(2)),
		RunE: withClient(o, func(ctx context.Context, c *redeq.Client, cmd *cobra.Command, a []string) error {
			page, err := c.List(ctx, a[0], redeq.State(a[1]), redeq.ListOptions{Limit: limit, Cursor: cursor})
			if err != nil {
				return err
			}
			if o.json() {
				out := struct {
					Jobs []jobJSON `json:"jobs"`
					Next string    `json:"next"`
				}{Jobs: []jobJSON{}, Next: page.Next}
				for _, j := range page.Jobs {
					out.Jobs = append(out.Jobs, toJSON(j, false))
				}
				return writeJSON(cmd.OutOrStdout(), out)
			}
			writeJobs(cmd.OutOrStdout(), page.Jobs)
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
			switch {
			case raw:
				_, err = cmd.OutOrStdout().Write(j.Body)
				return err
			case o.json():
				return writeJSON(cmd.OutOrStdout(), toJSON(j, true))
			}
			writeJob(cmd.OutOrStdout(), j)
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
	return &cobra.Command{
		Use:   "delete TOPIC ID",
		Short: "Delete a job from wherever it waits",
		Args:  args(cobra.ExactArgs(2)),
		RunE: withClient(o, func(ctx context.Context, c *redeq.Client, cmd *cobra.Command, a []string) error {
			j, err := c.Delete(ctx, a[0], a[1])
			if err != nil {
				return err
			}
			return done(o, cmd, "deleted", j.Topic, j.ID, string(j.State))
		}),
	}
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
		Short: "Give a waiting job a new due time: --at T or --in D (--in 0 runs it now)",
		Args:  args(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, a []string) error {
			hasIn := cmd.Flags().Changed("in")
			if (at == "") == !hasIn {
				return usagef("give one of --at and --in")
			}
			when := time.Now().Add(in)
			if at != "" {
				t, err := parseTime(at)
				if err != nil {
					return err
				}
				when = t
			}
			return withClient(o, func(ctx context.Context, c *redeq.Client, cmd *cobra.Command, a []string) error {
				if err := c.Reschedule(ctx, a[0], a[1], when); err != nil {
					return err
				}
				return done(o, cmd, "rescheduled", a[0], a[1], "due "+fmtTime(when))
			})(cmd, a)
		},
	}
	cmd.Flags().StringVar(&at, "at", "", "new due time, RFC 3339")
	cmd.Flags().DurationVar(&in, "in", 0, "new due time, this long from now")
	return cmd
}

func requeueCmd(o *opts) *cobra.Command {
	var in time.Duration
	cmd := &cobra.Command{
		Use:   "requeue unack|dead TOPIC ID",
		Short: "Move a parked (unack) or dead job back to its bucket, due now or --in D",
		Args:  args(cobra.ExactArgs(3)),
		RunE: func(cmd *cobra.Command, a []string) error {
			from := a[0]
			if from != "unack" && from != "dead" {
				return usagef("requeue %q: want unack or dead", from)
			}
			return withClient(o, func(ctx context.Context, c *redeq.Client, cmd *cobra.Command, _ []string) error {
				var err error
				if from == "unack" {
					err = c.RequeueUnAck(ctx, a[1], a[2], in)
				} else {
					err = c.RequeueDead(ctx, a[1], a[2], in)
				}
				if err != nil {
					return err
				}
				return done(o, cmd, "requeued", a[1], a[2], "from "+from)
			})(cmd, a)
		},
	}
	cmd.Flags().DurationVar(&in, "in", 0, "due this long from now")
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

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/redeq-go/redeq/redeq"
)

// bulkFlags select the jobs a bulk command (delete, run, requeue with
// --all) acts on: a state and filters.
type bulkFlags struct {
	all                  bool
	state                string
	errText              string
	minAttempt           int
	dueBefore, dueAfter  string
	dryRun, yes, canAsk  bool
	filterSet, stateSeen bool
}

// add registers the flags on cmd; ask adds --yes, for the commands that
// ask before they act.
func (b *bulkFlags) add(cmd *cobra.Command, ask bool) {
	f := cmd.Flags()
	f.BoolVar(&b.all, "all", false, "every job of the topic in --state that matches the filters when the command starts, once each")
	f.StringVar(&b.state, "state", "", "with --all: the state to act on: scheduled, ready, unack or dead")
	f.StringVar(&b.errText, "error", "", "with --all: only jobs whose last error (or dead reason) contains this text")
	f.IntVar(&b.minAttempt, "min-attempt", 0, "with --all: only jobs that failed at least this many times")
	f.StringVar(&b.dueBefore, "due-before", "", "with --all: only jobs due (unack, dead: parked) before this RFC 3339 time")
	f.StringVar(&b.dueAfter, "due-after", "", "with --all: only jobs due (unack, dead: parked) at or after this RFC 3339 time")
	f.BoolVar(&b.dryRun, "dry-run", false, "with --all: count the jobs that match and change nothing")
	if ask {
		b.canAsk = true
		f.BoolVarP(&b.yes, "yes", "y", false, "do not ask")
	}
}

// check reads the flags after parsing: a filter, --state or --dry-run
// without --all is a usage error.
func (b *bulkFlags) check(cmd *cobra.Command) error {
	for _, n := range []string{"error", "min-attempt", "due-before", "due-after"} {
		if cmd.Flags().Changed(n) {
			b.filterSet = true
			if !b.all {
				return usagef("--%s filters the jobs of --all: give --all", n)
			}
		}
	}
	b.stateSeen = cmd.Flags().Changed("state")
	if !b.all && (b.stateSeen || b.dryRun) {
		return usagef("--state and --dry-run go with --all")
	}
	if b.minAttempt < 0 {
		return usagef("--min-attempt %d: want 0 or more", b.minAttempt)
	}
	return nil
}

func (b *bulkFlags) filter() (redeq.Filter, error) {
	f := redeq.Filter{ErrorContains: b.errText, MinAttempt: b.minAttempt}
	var err error
	if b.dueBefore != "" {
		if f.DueBefore, err = time.Parse(time.RFC3339Nano, b.dueBefore); err != nil {
			return f, usagef("--due-before %q: want an RFC 3339 time such as 2026-01-02T15:04:05Z", b.dueBefore)
		}
	}
	if b.dueAfter != "" {
		if f.DueAfter, err = time.Parse(time.RFC3339Nano, b.dueAfter); err != nil {
			return f, usagef("--due-after %q: want an RFC 3339 time such as 2026-01-02T15:04:05Z", b.dueAfter)
		}
	}
	return f, nil
}

// describe says which jobs the flags pick, for the question and the
// report: "scheduled jobs of orders with attempt >= 2".
func (b *bulkFlags) describe(topic string, state redeq.State) string {
	s := fmt.Sprintf("%s jobs of %s", state, topic)
	var parts []string
	if b.errText != "" {
		parts = append(parts, fmt.Sprintf("error containing %q", b.errText))
	}
	if b.minAttempt > 0 {
		parts = append(parts, fmt.Sprintf("attempt >= %d", b.minAttempt))
	}
	if b.dueAfter != "" {
		parts = append(parts, "due at or after "+b.dueAfter)
	}
	if b.dueBefore != "" {
		parts = append(parts, "due before "+b.dueBefore)
	}
	if len(parts) > 0 {
		s += " with " + strings.Join(parts, ", ")
	}
	return safe(s)
}

// bulkAction is what a bulk command does to the ids it selected.
type bulkAction struct {
	verb, done string // "delete", "deleted"
	do         func(ctx context.Context, c *redeq.Client, topic string, state redeq.State, ids []string, opts ...redeq.BulkOption) (redeq.BulkResult, error)
}

// runBulk selects the jobs the flags pick (the fixed set it acts on,
// whatever joins the state after), counts them (--dry-run stops there),
// asks when the command asks (delete, unless --yes), and acts in batches
// of redeq.MaxBulk.
func runBulk(ctx context.Context, o *opts, c *redeq.Client, cmd *cobra.Command, b *bulkFlags, topic string, state redeq.State, a bulkAction) error {
	f, err := b.filter()
	if err != nil {
		return err
	}
	ids, marks, err := c.SelectMarks(ctx, topic, state, f, 0)
	if err != nil {
		return err
	}
	what := b.describe(topic, state)
	if b.dryRun {
		if o.json() {
			return writeJSON(cmd.OutOrStdout(), map[string]any{"dry_run": a.verb, "topic": topic, "state": state, "count": len(ids)})
		}
		fmt.Fprintf(cmd.OutOrStdout(), "would %s %d %s (dry run: nothing changed)\n", a.verb, len(ids), what)
		return nil
	}
	if b.canAsk && !b.yes && len(ids) > 0 {
		fmt.Fprintf(cmd.ErrOrStderr(), "%s the %d %s? [y/N] ", strings.ToUpper(a.verb[:1])+a.verb[1:], len(ids), what)
		line, _ := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
		if ans := strings.ToLower(strings.TrimSpace(line)); ans != "y" && ans != "yes" {
			return errors.New("not confirmed: nothing changed (--yes skips the question)")
		}
	}
	r, err := inBatches(ids, func(batch []string) (redeq.BulkResult, error) {
		return a.do(ctx, c, topic, state, batch, redeq.Marks(marks))
	})
	if err != nil {
		return fmt.Errorf("after %s %d of %d %s (run the same command again to go on): %w", a.done, r.Done, len(ids), what, err)
	}
	if o.json() {
		return writeJSON(cmd.OutOrStdout(), map[string]any{"done": a.done, "topic": topic, "state": state, "count": r.Done, "skipped": r.Skipped, "changed": r.Changed})
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s %d %s%s\n", a.done, r.Done, what, skipped(r, string(state)))
	return nil
}

// bulkState is the --state of a bulk command, checked.
func bulkState(s string) (redeq.State, error) {
	switch st := redeq.State(s); st {
	case redeq.StateScheduled, redeq.StateReady, redeq.StateUnAck, redeq.StateDead:
		return st, nil
	case "":
		return "", usagef("--all needs --state: scheduled, ready, unack or dead")
	}
	return "", usagef("--state %q: want scheduled, ready, unack or dead", s)
}

var deleteAction = bulkAction{verb: "delete", done: "deleted",
	do: func(ctx context.Context, c *redeq.Client, topic string, state redeq.State, ids []string, opts ...redeq.BulkOption) (redeq.BulkResult, error) {
		return c.DeleteJobs(ctx, topic, state, ids, opts...)
	}}

func requeueAction(verb, done string, in time.Duration) bulkAction {
	return bulkAction{verb: verb, done: done,
		do: func(ctx context.Context, c *redeq.Client, topic string, state redeq.State, ids []string, opts ...redeq.BulkOption) (redeq.BulkResult, error) {
			return c.RequeueJobs(ctx, topic, state, ids, in, opts...)
		}}
}

func runCmd(o *opts) *cobra.Command {
	var b bulkFlags
	cmd := &cobra.Command{
		Use:   "run TOPIC ID|--all --state S",
		Short: "Run a waiting job now, or --all jobs of a state that match the filters (due now by the server's clock)",
		Long: `Run a waiting job now: it is due at once by the Redis server's clock.

With --all --state scheduled|unack|dead and the filters (--error,
--min-attempt, --due-before, --due-after), every job that matches when the
command starts, once each: scheduled jobs become due now, unack and dead
ones go back to their bucket due now (dead ones with a fresh count of
attempts). --dry-run counts them first.`,
		Args: args(cobra.RangeArgs(1, 2)),
		RunE: func(cmd *cobra.Command, a []string) error {
			if err := b.check(cmd); err != nil {
				return err
			}
			if b.all != (len(a) == 1) {
				return usagef("give a job id or --all, not both")
			}
			return withClient(o, func(ctx context.Context, c *redeq.Client, cmd *cobra.Command, a []string) error {
				if !b.all {
					if err := c.RescheduleIn(ctx, a[0], a[1], 0); err != nil {
						return err
					}
					return done(o, cmd, "run now", a[0], a[1], "due now by the server's clock")
				}
				state, err := bulkState(b.state)
				if err != nil {
					return err
				}
				if state == redeq.StateReady {
					return usagef("ready jobs are due already: run --all takes scheduled, unack or dead")
				}
				return runBulk(ctx, o, c, cmd, &b, a[0], state, requeueAction("run now", "run now:", 0))
			})(cmd, a)
		},
	}
	b.add(cmd, false)
	return cmd
}

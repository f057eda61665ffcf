package main

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/redeq-go/redeq/redeq"
)

// minuteJSON is one minute of history as -o json writes it. Lateness is
// in milliseconds; lateness_capped says the quantile fell past the
// histogram's last bound, so it is a lower bound ("at least").
type minuteJSON struct {
	Start       time.Time `json:"start"`
	Processed   int64     `json:"processed"`
	Failed      int64     `json:"failed"`
	Timed       int64     `json:"timed"`
	LatenessP50 int64     `json:"lateness_p50_ms"`
	LatenessP99 int64     `json:"lateness_p99_ms"`
	Capped      bool      `json:"lateness_capped,omitempty"`
}

// latenessTop is the last bound of the lateness histogram: a quantile at
// it may be more.
var latenessTop = redeq.LatenessBound(redeq.LatenessBuckets - 2)

func minuteOf(m redeq.Minute) minuteJSON {
	return minuteJSON{Start: m.Start.UTC(), Processed: m.Processed, Failed: m.Failed, Timed: m.Lateness.Count(),
		LatenessP50: m.LatenessP50().Milliseconds(), LatenessP99: m.LatenessP99().Milliseconds(),
		Capped: m.Lateness.Count() > 0 && m.LatenessP99() >= latenessTop}
}

func historyCmd(o *opts) *cobra.Command {
	var since time.Duration
	cmd := &cobra.Command{
		Use:   "history TOPIC",
		Short: "Per minute of the last --since (1h, at most 89m kept): jobs processed, failed, and lateness p50 / p99",
		Long: `Per minute of the Redis server's clock, over the last --since: the jobs
whose outcome was applied (processed), those that failed (an error, a panic
or a timeout, retried or dead), how many were timed (fetched by a consumer
after the mover made them due), and the lateness of those, p50 and p99 (how
long after its due time a job started). A p99 past the histogram's last
bound (60s) reads ">=60s": it may be more. The last row adds the minutes up.`,
		Args: args(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, a []string) error {
			if since <= 0 || since > redeq.HistoryRetention+time.Minute {
				return usagef("--since %v: want more than 0 and at most %v (the history kept)", since, redeq.HistoryRetention)
			}
			return withClient(o, func(ctx context.Context, c *redeq.Client, cmd *cobra.Command, a []string) error {
				if _, err := c.Stats(ctx, a[0]); err != nil {
					return err // a topic nobody used: say so, not an empty history
				}
				// The minutes are the server's: count back from its clock.
				now, err := c.ServerTime(ctx)
				if err != nil {
					return err
				}
				ms, err := c.History(ctx, a[0], now.Add(-since))
				if err != nil {
					return err
				}
				total := redeq.SumMinutes(ms)
				if o.json() {
					out := struct {
						Topic   string       `json:"topic"`
						Minutes []minuteJSON `json:"minutes"`
						Total   minuteJSON   `json:"total"`
					}{Topic: a[0], Minutes: []minuteJSON{}, Total: minuteOf(total)}
					for _, m := range ms {
						out.Minutes = append(out.Minutes, minuteOf(m))
					}
					return writeJSON(cmd.OutOrStdout(), out)
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', tabwriter.AlignRight)
				fmt.Fprintln(tw, "MINUTE\tPROCESSED\tFAILED\tTIMED\tLATE P50\tLATE P99\t")
				row := func(label string, m redeq.Minute) {
					p50, p99 := "-", "-"
					if m.Lateness.Count() > 0 {
						p50, p99 = lateness(m.LatenessP50()), lateness(m.LatenessP99())
					}
					fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%s\t\n", label, m.Processed, m.Failed, m.Lateness.Count(), p50, p99)
				}
				for _, m := range ms {
					row(m.Start.UTC().Format("2006-01-02 15:04"), m)
				}
				row("total", total)
				return tw.Flush()
			})(cmd, a)
		},
	}
	cmd.Flags().DurationVar(&since, "since", time.Hour, "how far back, at most 89m")
	return cmd
}

func lateness(d time.Duration) string {
	if d >= latenessTop {
		return ">=" + latenessTop.String()
	}
	return d.Round(time.Millisecond).String()
}

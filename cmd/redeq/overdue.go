package main

import (
	"context"
	"fmt"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/redeq-go/redeq/redeq"
)

// overdueRow is one topic behind its due work.
type overdueRow struct {
	Topic     string  `json:"topic"`
	Overdue   float64 `json:"overdue_seconds"`
	Ready     int64   `json:"ready"`
	Scheduled int64   `json:"scheduled"`
	Consumers int64   `json:"consumers"`
	Paused    bool    `json:"paused"`
	// NoConsumer flags due work that no started client listens for.
	NoConsumer bool `json:"no_consumer"`
}

func overdueCmd(o *opts) *cobra.Command {
	var threshold time.Duration
	cmd := &cobra.Command{
		Use:   "overdue [TOPIC...]",
		Short: "List the topics whose oldest due job waits longer than --threshold, worst first",
		Long: `List the topics (every topic, or those named) whose oldest job that is due
and not started fell due more than --threshold ago, by the Redis server's
clock, worst first, with their ready and scheduled counts and consumers. A
topic with due work and no consumer is flagged: nothing will run it.`,
		RunE: withClient(o, func(ctx context.Context, c *redeq.Client, cmd *cobra.Command, a []string) error {
			if threshold < 0 {
				return usagef("--threshold %v: want 0 or more", threshold)
			}
			names := a
			if len(names) == 0 {
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
			rows, err := overdueRows(ctx, c, names, threshold)
			if err != nil {
				return err
			}
			if o.json() {
				return writeJSON(cmd.OutOrStdout(), rows)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TOPIC\tOVERDUE\tREADY\tSCHEDULED\tCONSUMERS\tNOTE")
			for _, r := range rows {
				note := ""
				switch {
				case r.NoConsumer:
					note = "no consumer"
				case r.Paused:
					note = "paused"
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\n", r.Topic, (time.Duration(r.Overdue * float64(time.Second))).Round(time.Millisecond),
					r.Ready, r.Scheduled, r.Consumers, note)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if len(rows) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "no topic behind by more than %v\n", threshold)
			}
			return nil
		}),
	}
	cmd.Flags().DurationVar(&threshold, "threshold", time.Minute, "list topics behind by more than this")
	return cmd
}

// overdueRows returns the topics of names behind by more than threshold,
// worst first.
func overdueRows(ctx context.Context, c *redeq.Client, names []string, threshold time.Duration) ([]overdueRow, error) {
	if len(names) == 0 {
		return []overdueRow{}, nil
	}
	late, err := c.OldestOverdue(ctx, names...)
	if err != nil {
		return nil, err
	}
	rows := []overdueRow{}
	for _, n := range names {
		d, ok := late[n]
		if !ok {
			if _, err := c.Stats(ctx, n); err != nil {
				return nil, fmt.Errorf("overdue %s: %w", n, err)
			}
			continue
		}
		if d <= threshold || d == 0 {
			continue
		}
		st, err := c.Stats(ctx, n)
		if err != nil {
			return nil, fmt.Errorf("overdue %s: %w", n, err)
		}
		rows = append(rows, overdueRow{Topic: n, Overdue: d.Seconds(), Ready: st.Ready, Scheduled: st.Scheduled,
			Consumers: st.Consumers, Paused: st.Paused, NoConsumer: st.Consumers == 0})
	}
	slices.SortStableFunc(rows, func(a, b overdueRow) int {
		switch {
		case a.Overdue > b.Overdue:
			return -1
		case a.Overdue < b.Overdue:
			return 1
		}
		return 0
	})
	return rows, nil
}

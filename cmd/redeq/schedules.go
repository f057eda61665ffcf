package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/redeq-go/redeq/redeq"
)

// scheduleJSON is a schedule as -o json writes it. Times carry the
// schedule's zone offset; Upcoming are the next --next ticks, the first
// being Next.
type scheduleJSON struct {
	Name     string      `json:"name"`
	Topic    string      `json:"topic"`
	Spec     string      `json:"spec"`
	Zone     string      `json:"time_zone"`
	CatchUp  string      `json:"catch_up"`
	Next     *time.Time  `json:"next,omitempty"`
	Upcoming []time.Time `json:"upcoming"`
	LastTick *time.Time  `json:"last_tick,omitempty"`
	Paused   bool        `json:"paused"`
	Skipped  int64       `json:"skipped"`
}

func zoneName(z string) string {
	if z == "" {
		return "UTC"
	}
	return z
}

// inZone is t in the zone of s, or zero.
func inZone(t time.Time, s redeq.Schedule) *time.Time {
	if t.IsZero() {
		return nil
	}
	if loc, err := time.LoadLocation(zoneName(s.TimeZone)); err == nil {
		t = t.In(loc)
	}
	return &t
}

// upcoming is the next n ticks of a schedule from NextTicks, Next first;
// none while paused.
func upcoming(in redeq.ScheduleInfo, n int) ([]time.Time, error) {
	out := []time.Time{}
	if in.Next.IsZero() || n <= 0 {
		return out, nil
	}
	out = append(out, in.Next)
	more, err := redeq.NextTicks(in.Schedule, in.Next, n-1)
	if err != nil {
		return nil, err
	}
	return append(out, more...), nil
}

func schedulesCmd(o *opts) *cobra.Command {
	var next int
	cmd := &cobra.Command{
		Use:   "schedules",
		Short: "List the periodic schedules: topic, spec, zone, next tick, last tick, paused, skipped ticks",
		Long: `List the periodic schedules under the prefix, by name: the topic their jobs
go to, the cron spec and the zone it is read in, the next tick (in the
schedule's zone; - while paused), the last tick whose job was added, whether
it is paused, and how many ticks were skipped (missed by the catch-up policy
or passed while paused). --next N lists N upcoming ticks, as redeq.NextTicks
computes them.`,
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, a []string) error {
			if next < 1 || next > 100 {
				return usagef("--next %d: want 1..100", next)
			}
			return withClient(o, func(ctx context.Context, c *redeq.Client, cmd *cobra.Command, _ []string) error {
				infos, err := c.Schedules(ctx)
				if err != nil {
					return err
				}
				rows := []scheduleJSON{}
				for _, in := range infos {
					up, err := upcoming(in, next)
					if err != nil {
						return fmt.Errorf("schedule %q: %w", in.Name, err)
					}
					rows = append(rows, scheduleJSON{Name: in.Name, Topic: in.Topic, Spec: in.Spec, Zone: zoneName(in.TimeZone),
						CatchUp: in.CatchUp.String(), Next: inZone(in.Next, in.Schedule), Upcoming: up,
						LastTick: inZone(in.LastTick, in.Schedule), Paused: in.Paused, Skipped: in.Skipped})
				}
				if o.json() {
					return writeJSON(cmd.OutOrStdout(), rows)
				}
				if len(rows) == 0 {
					fmt.Fprintf(cmd.ErrOrStderr(), "redeq: no schedule under the prefix %q\n", c.Config().Prefix)
					return nil
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "NAME\tTOPIC\tSPEC\tZONE\tNEXT\tLAST TICK\tPAUSED\tSKIPPED")
				for _, r := range rows {
					nexts := make([]string, 0, len(r.Upcoming))
					for _, t := range r.Upcoming {
						nexts = append(nexts, t.Format(time.RFC3339))
					}
					if len(nexts) == 0 {
						nexts = append(nexts, "-")
					}
					last := "-"
					if r.LastTick != nil {
						last = r.LastTick.Format(time.RFC3339)
					}
					fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%v\t%d\n", safe(r.Name), safe(r.Topic), safe(r.Spec), safe(r.Zone),
						strings.Join(nexts, ","), last, r.Paused, r.Skipped)
				}
				return tw.Flush()
			})(cmd, a)
		},
	}
	cmd.Flags().IntVar(&next, "next", 1, "how many upcoming ticks to list, 1..100")
	return cmd
}

func scheduleCmd(o *opts) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedule pause|resume|delete NAME",
		Short: "Pause, resume or delete a periodic schedule (delete asks first unless --yes)",
		Args:  args(cobra.NoArgs),
		RunE: func(*cobra.Command, []string) error {
			return usagef("schedule: want pause, resume or delete and a schedule name")
		},
	}
	var yes bool
	del := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a schedule and its waiting tick's job, for good (asks first unless --yes); jobs of earlier ticks stay",
		Args:  args(cobra.ExactArgs(1)),
		RunE: withClient(o, func(ctx context.Context, c *redeq.Client, cmd *cobra.Command, a []string) error {
			if !yes {
				// Ask about a schedule that is there: a typo is not found
				// before any question.
				if _, err := findSchedule(ctx, c, a[0]); err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "Delete the schedule %s, for good? Its ticks stop on every client. [y/N] ", safe(a[0]))
				line, _ := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
				if ans := strings.ToLower(strings.TrimSpace(line)); ans != "y" && ans != "yes" {
					return errors.New("not confirmed: nothing deleted (--yes skips the question)")
				}
			}
			if err := c.DeleteSchedule(ctx, a[0]); err != nil {
				return err
			}
			return scheduleDone(o, cmd, "deleted", a[0])
		}),
	}
	del.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask")
	pause := &cobra.Command{
		Use:   "pause NAME",
		Short: "Stop a schedule's ticks on every client; ticks that pass meanwhile are skipped",
		Args:  args(cobra.ExactArgs(1)),
		RunE: withClient(o, func(ctx context.Context, c *redeq.Client, cmd *cobra.Command, a []string) error {
			if err := c.PauseSchedule(ctx, a[0]); err != nil {
				return err
			}
			return scheduleDone(o, cmd, "paused", a[0])
		}),
	}
	resume := &cobra.Command{
		Use:   "resume NAME",
		Short: "Let a paused schedule tick again, from its first tick after now",
		Args:  args(cobra.ExactArgs(1)),
		RunE: withClient(o, func(ctx context.Context, c *redeq.Client, cmd *cobra.Command, a []string) error {
			if err := c.ResumeSchedule(ctx, a[0]); err != nil {
				return err
			}
			return scheduleDone(o, cmd, "resumed", a[0])
		}),
	}
	cmd.AddCommand(pause, resume, del)
	return cmd
}

// findSchedule returns the schedule name, or ErrScheduleNotFound.
func findSchedule(ctx context.Context, c *redeq.Client, name string) (redeq.ScheduleInfo, error) {
	infos, err := c.Schedules(ctx)
	if err != nil {
		return redeq.ScheduleInfo{}, err
	}
	for _, in := range infos {
		if in.Name == name {
			return in, nil
		}
	}
	return redeq.ScheduleInfo{}, fmt.Errorf("schedule %q: %w", name, redeq.ErrScheduleNotFound)
}

// scheduleDone reports a schedule action that succeeded.
func scheduleDone(o *opts, cmd *cobra.Command, what, name string) error {
	if o.json() {
		return writeJSON(cmd.OutOrStdout(), map[string]string{"done": what, "schedule": name})
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s schedule %s\n", what, safe(name))
	return nil
}

package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/redeq-go/redeq/redeq"
)

// serverRow is one consumer as `servers -o json` prints it.
type serverRow struct {
	ID               string       `json:"id"`
	Name             string       `json:"name"`
	Host             string       `json:"host"`
	PID              int          `json:"pid"`
	Started          *time.Time   `json:"started"`
	LastHeartbeat    time.Time    `json:"last_heartbeat"`
	HeartbeatSeconds float64      `json:"heartbeat_age_seconds"`
	TimeoutSeconds   float64      `json:"timeout_seconds"`
	Silent           bool         `json:"silent"`
	Topics           []string     `json:"topics"`
	InFlight         int64        `json:"inflight"`
	Running          []runningRow `json:"running"`
}

type runningRow struct {
	Topic      string    `json:"topic"`
	ID         string    `json:"id"`
	Since      time.Time `json:"since"`
	ForSeconds float64   `json:"running_seconds"`
}

func serversCmd(o *opts) *cobra.Command {
	var long bool
	cmd := &cobra.Command{
		Use:   "servers",
		Short: "List the running consumers: name, host, pid, topics, jobs in flight and for how long",
		Long: `List the consumers (started clients with listeners) of the prefix, as their
heartbeats record them: client name (config client_name, else the host
name), host, pid, when each started and last heartbeat (by the Redis
server's clock), its topics, the jobs it holds in flight and how long the
longest has run. A consumer silent longer than its timeout is flagged: it
died or is cut off, and a reaper will give its jobs back. With --jobs,
each consumer's longest running jobs are listed under it.`,
		Args: args(cobra.NoArgs),
		RunE: withClient(o, func(ctx context.Context, c *redeq.Client, cmd *cobra.Command, _ []string) error {
			cs, err := c.Consumers(ctx)
			if err != nil {
				return err
			}
			if o.json() {
				rows := make([]serverRow, 0, len(cs))
				for _, ci := range cs {
					r := serverRow{ID: ci.ID, Name: ci.Name, Host: ci.Host, PID: ci.PID, Started: timePtr(ci.Started),
						LastHeartbeat: ci.LastHeartbeat.UTC(), HeartbeatSeconds: ci.HeartbeatAge.Seconds(),
						TimeoutSeconds: ci.Timeout.Seconds(), Silent: ci.Silent, Topics: ci.Topics, InFlight: ci.InFlight,
						Running: []runningRow{}}
					if r.Topics == nil {
						r.Topics = []string{}
					}
					for _, j := range ci.Running {
						r.Running = append(r.Running, runningRow{Topic: j.Topic, ID: j.ID, Since: j.Since.UTC(), ForSeconds: j.For.Seconds()})
					}
					rows = append(rows, r)
				}
				return writeJSON(cmd.OutOrStdout(), rows)
			}
			w := cmd.OutOrStdout()
			if len(cs) == 0 {
				fmt.Fprintln(w, "no consumer heartbeats under this prefix")
				return nil
			}
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tHOST\tPID\tUP\tHEARTBEAT\tTOPICS\tIN FLIGHT\tLONGEST\tID\tNOTE")
			for _, ci := range cs {
				up, longest, pid := "-", "-", "-"
				if !ci.Started.IsZero() {
					up = short(ci.HeartbeatAge + ci.LastHeartbeat.Sub(ci.Started))
				}
				if len(ci.Running) > 0 {
					longest = short(ci.Running[0].For)
				}
				if ci.PID > 0 {
					pid = fmt.Sprint(ci.PID)
				}
				note := ""
				if ci.Silent {
					note = "silent"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s ago\t%s\t%d\t%s\t%s\t%s\n", orDash(safe(ci.Name)), orDash(safe(ci.Host)), pid, up,
					short(ci.HeartbeatAge), safe(clipList(ci.Topics, 60)), ci.InFlight, longest, ci.ID, note)
				if long {
					for _, j := range ci.Running {
						fmt.Fprintf(tw, "  %s %s\t\t\t\t\t\t\t%s\t\t\n", safe(j.Topic), safe(j.ID), short(j.For))
					}
				}
			}
			return tw.Flush()
		}),
	}
	cmd.Flags().BoolVar(&long, "jobs", false, fmt.Sprintf("list each consumer's longest running jobs (at most %d)", redeq.RunningListed))
	return cmd
}

func redisCmd(o *opts) *cobra.Command {
	return &cobra.Command{
		Use:     "redis",
		Aliases: []string{"info"},
		Short:   "Show the Redis servers: version, memory, clients, keys and the keys of this prefix",
		Long: fmt.Sprintf(`Show the Redis server, or each master of a cluster: version, mode, used and
peak memory, maxmemory and its policy, clients, uptime, its keys, and the
keys under this prefix. The prefix's keys are counted with a SCAN that
examines at most %d keys per server; past that the count is an estimate
from the share of matching keys seen, marked "~".`, redeq.RedisScanBudget),
		Args: args(cobra.NoArgs),
		RunE: withClient(o, func(ctx context.Context, c *redeq.Client, cmd *cobra.Command, _ []string) error {
			info, err := c.RedisInfo(ctx)
			if err != nil {
				return err
			}
			if o.json() {
				return writeJSON(cmd.OutOrStdout(), redisJSON(info))
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SERVER\tVERSION\tMODE\tUSED\tPEAK\tMAXMEMORY\tPOLICY\tCLIENTS\tUPTIME\tKEYS\tPREFIX KEYS")
			for _, s := range info.Servers {
				maxm := "none"
				if s.MaxMemory > 0 {
					maxm = bytesIEC(s.MaxMemory)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%d\t%s\n", orDash(s.Addr), orDash(safe(s.Version)), orDash(safe(s.Mode)),
					bytesIEC(s.UsedMemory), bytesIEC(s.PeakMemory), maxm, orDash(safe(s.MaxMemoryPolicy)), s.Clients, short(s.Uptime), s.Keys,
					approx(s.PrefixKeys, s.Exact))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			how := "exact"
			if !info.Exact {
				how = fmt.Sprintf("estimated: a server has more keys than the scan examines (%d)", redeq.RedisScanBudget)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "prefix %q: %s keys (%s); used memory %s in all\n", c.Config().Prefix,
				approx(info.PrefixKeys, info.Exact), how, bytesIEC(info.UsedMemory))
			return nil
		}),
	}
}

type redisServerJSON struct {
	Addr            string  `json:"addr"`
	Version         string  `json:"version"`
	Mode            string  `json:"mode"`
	UsedMemory      int64   `json:"used_memory_bytes"`
	PeakMemory      int64   `json:"peak_memory_bytes"`
	MaxMemory       int64   `json:"maxmemory_bytes"`
	MaxMemoryPolicy string  `json:"maxmemory_policy"`
	Clients         int64   `json:"clients"`
	Uptime          float64 `json:"uptime_seconds"`
	Keys            int64   `json:"keys"`
	PrefixKeys      int64   `json:"prefix_keys"`
	Exact           bool    `json:"prefix_keys_exact"`
	Scanned         int64   `json:"scanned"`
}

type redisInfoJSON struct {
	Prefix     string            `json:"prefix"`
	PrefixKeys int64             `json:"prefix_keys"`
	Exact      bool              `json:"prefix_keys_exact"`
	UsedMemory int64             `json:"used_memory_bytes"`
	Servers    []redisServerJSON `json:"servers"`
}

func redisJSON(info redeq.RedisInfo) redisInfoJSON {
	out := redisInfoJSON{PrefixKeys: info.PrefixKeys, Exact: info.Exact, UsedMemory: info.UsedMemory, Servers: []redisServerJSON{}}
	for _, s := range info.Servers {
		out.Servers = append(out.Servers, redisServerJSON{Addr: s.Addr, Version: s.Version, Mode: s.Mode, UsedMemory: s.UsedMemory,
			PeakMemory: s.PeakMemory, MaxMemory: s.MaxMemory, MaxMemoryPolicy: s.MaxMemoryPolicy, Clients: s.Clients,
			Uptime: s.Uptime.Seconds(), Keys: s.Keys, PrefixKeys: s.PrefixKeys, Exact: s.Exact, Scanned: s.Scanned})
	}
	return out
}

// short is d for a person: whole seconds past a minute, ms below.
func short(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// clipList joins names with commas, cut to about n bytes with a count of
// the rest.
func clipList(names []string, n int) string {
	var b strings.Builder
	for i, s := range names {
		if i > 0 && b.Len()+len(s) > n {
			fmt.Fprintf(&b, ", +%d", len(names)-i)
			break
		}
		if i > 0 {
			b.WriteString(",")
		}
		b.WriteString(s)
	}
	return orDash(b.String())
}

func approx(n int64, exact bool) string {
	if exact {
		return fmt.Sprint(n)
	}
	return fmt.Sprintf("~%d", n)
}

// bytesIEC is n bytes in KiB, MiB, GiB.
func bytesIEC(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

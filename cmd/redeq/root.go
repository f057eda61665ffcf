package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/redeq"
)

// Exit codes.
const (
	exitOK       = 0
	exitError    = 1
	exitUsage    = 2
	exitNotFound = 3
)

// usageError is a command line that does not parse or make sense.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

func exitCode(err error) int {
	var ue usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ue), errors.Is(err, redeq.ErrInvalidArgument), errors.Is(err, redeq.ErrInvalidJob), errors.Is(err, redeq.ErrInvalidSchedule):
		return exitUsage
	case errors.Is(err, redeq.ErrJobNotFound), errors.Is(err, redeq.ErrUnknownTopic), errors.Is(err, redeq.ErrScheduleNotFound):
		return exitNotFound
	}
	// Cobra's own complaints about the command line.
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "required flag", "invalid argument", "flag needs an argument", "accepts ", "requires at least", "requires at most"} {
		if strings.HasPrefix(msg, p) {
			return exitUsage
		}
	}
	return exitError
}

// opts are the flags every command shares.
type opts struct {
	redisURL string
	cluster  bool   // --cluster: the URL is a cluster seed
	sentinel string // --sentinel NAME: --redis lists Sentinels
	config   string
	prefix   string
	output   string
	stdin    io.Reader
}

func (o *opts) json() bool { return o.output == "json" }

// client connects as the flags say: the settings of --config (REDEQ_*
// variables override them), the Redis of --redis over the file's.
func (o *opts) client(ctx context.Context) (*redeq.Client, func(), error) {
	cfg, err := config.Load(o.config)
	if err != nil {
		return nil, nil, err
	}
	if o.redisURL != "" {
		if cfg.Redis, err = redisFromFlags(o.redisURL, o.cluster, o.sentinel); err != nil {
			return nil, nil, err
		}
	} else if o.cluster || o.sentinel != "" {
		return nil, nil, usagef("--cluster and --sentinel need --redis")
	}
	if o.prefix != "" {
		cfg.Prefix = o.prefix
	}
	if cfg.Redis.IsZero() {
		return nil, nil, usagef("no Redis to connect to: give --redis URL or --config FILE (or set REDEQ_REDIS_URL)")
	}
	rdb, err := cfg.Redis.NewClient()
	if err != nil {
		return nil, nil, usageError{err}
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		_ = rdb.Close()
		return nil, nil, fmt.Errorf("redis at %s does not answer: %w", cfg.Redis.Address(), err)
	}
	c, err := redeq.New(rdb, cfg)
	if err != nil {
		_ = rdb.Close()
		return nil, nil, err
	}
	return c, func() { closeRedis(rdb) }, nil
}

func closeRedis(rdb redis.UniversalClient) { _ = rdb.Close() }

// redisFromFlags is the Redis that --redis, --cluster and --sentinel name.
// A password for Sentinel comes from REDEQ_REDIS_PASSWORD.
func redisFromFlags(url string, cluster bool, sentinel string) (config.RedisConfig, error) {
	if sentinel == "" {
		return config.RedisConfig{URL: url, Cluster: cluster}, nil
	}
	if cluster {
		return config.RedisConfig{}, usagef("--cluster and --sentinel: a Sentinel master or a cluster, not both")
	}
	var addrs []string
	for _, a := range strings.Split(url, ",") {
		if a = strings.TrimSpace(a); a != "" {
			if strings.Contains(a, "://") {
				return config.RedisConfig{}, usagef("--sentinel: --redis lists the Sentinels as host:port, not a URL (%q)", a)
			}
			addrs = append(addrs, a)
		}
	}
	r := config.RedisConfig{Addrs: addrs, MasterName: sentinel}
	if os.Getenv("REDEQ_REDIS_PASSWORD") != "" {
		r.PasswordEnv = "REDEQ_REDIS_PASSWORD"
	}
	return r, nil
}

func newRoot(stdin io.Reader) *cobra.Command {
	o := &opts{stdin: stdin}
	root := &cobra.Command{
		Use:   "redeq",
		Short: "Inspect and operate redeq's delayed-job queues",
		Long: `redeq inspects and operates the queues of redeq, delayed jobs on Redis.

Connect with --redis URL (redis://, rediss:// for TLS) or --config redeq.yaml
(the file redeq.Open reads; REDEQ_* variables override it).

Exit codes: 0 ok, 1 error, 2 usage, 3 not found.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if o.output != "text" && o.output != "json" {
				return usagef("-o %q: want text or json", o.output)
			}
			return nil
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	f := root.PersistentFlags()
	f.StringVar(&o.redisURL, "redis", "", "Redis URL: redis://[user@]host:port/db, rediss:// for TLS, ?addr=host:port for more cluster seeds; with --sentinel, the Sentinels' host:port list, comma-separated")
	f.BoolVar(&o.cluster, "cluster", false, "the --redis URL is a Redis Cluster seed (a configuration endpoint)")
	f.StringVar(&o.sentinel, "sentinel", "", "the Sentinel name of the master: --redis lists the Sentinels (host:port,host:port)")
	f.StringVar(&o.config, "config", "", "settings file (as redeq.Open reads it), with its redis section")
	f.StringVar(&o.prefix, "prefix", "", "key prefix, when not the config's (default redeq)")
	f.StringVarP(&o.output, "output", "o", "text", "output format: text or json")
	root.AddCommand(
		topicsCmd(o), statsCmd(o), listCmd(o), getCmd(o), addCmd(o), deleteCmd(o),
		rescheduleCmd(o), requeueCmd(o), purgeCmd(o), pauseCmd(o, true), pauseCmd(o, false), dashboardCmd(o),
		overdueCmd(o), runCmd(o), historyCmd(o), serversCmd(o), redisCmd(o), schedulesCmd(o), scheduleCmd(o), upgradeFormatCmd(o),
	)
	return root
}

// args wraps a cobra argument check so that its failure is a usage error.
func args(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, a []string) error {
		if err := check(cmd, a); err != nil {
			return usageError{err}
		}
		return nil
	}
}

// withClient runs fn with a connected client.
func withClient(o *opts, fn func(ctx context.Context, c *redeq.Client, cmd *cobra.Command, a []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, a []string) error {
		ctx := cmd.Context()
		c, done, err := o.client(ctx)
		if err != nil {
			return err
		}
		defer done()
		return fn(ctx, c, cmd, a)
	}
}

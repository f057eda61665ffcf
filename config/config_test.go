package config_test

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/testutil"
)

func TestDefaults(t *testing.T) {
	c := config.Default()
	require.NoError(t, c.Validate())
	require.Equal(t, "redeq", c.Prefix)
	require.Equal(t, 1, c.Concurrency)
	require.Equal(t, time.Second, c.ScanInterval)
	require.Equal(t, 100, c.MoveBatch)
	require.Equal(t, 5_000_000, c.MaxPool)
	require.Equal(t, 1<<20, c.MaxBodyBytes)
	require.Equal(t, 3, c.Retry)
	require.Equal(t, []time.Duration{5 * time.Second, 30 * time.Second, 5 * time.Minute}, c.RetryIntervals)
	require.Zero(t, c.ConsumeTimeout)
	require.Equal(t, 8, c.Workers)
	require.Equal(t, 20*time.Second, c.LockExpiry)
	require.Equal(t, 5*time.Second, c.HeartbeatInterval)
	require.Equal(t, 15*time.Second, c.ConsumerTimeout)
	require.Equal(t, 10*time.Second, c.ShutdownTimeout)
	require.True(t, c.Rollback())
	require.False(t, c.AutoAck)
	require.Equal(t, 10_000, c.DeadRetention)
	require.NotNil(t, c.Logger)
}

func TestValidateNamesTheField(t *testing.T) {
	cases := []struct {
		mod  func(*config.Config)
		want string
	}{
		{func(c *config.Config) { c.Concurrency = 6 }, "Concurrency 6 is not a power of two (use 4 or 8)"},
		{func(c *config.Config) { c.Concurrency = 3 }, "Concurrency 3 is not a power of two (use 2 or 4)"},
		{func(c *config.Config) { c.Concurrency = 2048 }, "Concurrency 2048 is out of range"},
		{func(c *config.Config) { c.Prefix = "a{b" }, "Prefix"},
		{func(c *config.Config) { c.Prefix = "a b" }, "Prefix"},
		{func(c *config.Config) { c.ClientName = strings.Repeat("n", config.MaxClientName+1) }, "ClientName is 129 bytes, longer than 128"},
		{func(c *config.Config) { c.ClientName = "web\x1b[2J" }, "ClientName"},
		{func(c *config.Config) { c.ScanInterval = -1 }, "ScanInterval"},
		{func(c *config.Config) { c.MoveBatch = 100_000 }, "MoveBatch"},
		{func(c *config.Config) { c.MaxBodyBytes = -1 }, "MaxBodyBytes"},
		{func(c *config.Config) { c.Retry = -2 }, "Retry -2"},
		{func(c *config.Config) { c.RetryIntervals = []time.Duration{0} }, "RetryIntervals[0]"},
		{func(c *config.Config) { c.ConsumeTimeout = -time.Second }, "ConsumeTimeout"},
		{func(c *config.Config) { c.HeartbeatInterval = 20 * time.Second }, "HeartbeatInterval"},
		{func(c *config.Config) { c.Workers = -1 }, "Workers"},
		{func(c *config.Config) { c.DeadRetention = -1 }, "DeadRetention"},
	}
	for _, tc := range cases {
		c := config.Default()
		tc.mod(&c)
		require.ErrorContains(t, c.Validate(), tc.want)
	}
}

func write(t *testing.T, text string) string {
	p := filepath.Join(t.TempDir(), "redeq.yaml")
	require.NoError(t, os.WriteFile(p, []byte(text), 0o600))
	return p
}

func TestLoad(t *testing.T) {
	p := write(t, `
prefix: shop
concurrency: 8
scan_interval: 500ms
retry_intervals: [1m, 5m, 10m, 30m, 1h]
crash_rollback: false
`)
	t.Setenv("REDEQ_WORKERS", "32")
	t.Setenv("REDEQ_SCAN_INTERVAL", "250ms")
	c, err := config.Load(p)
	require.NoError(t, err)
	require.Equal(t, "shop", c.Prefix)
	require.Equal(t, 8, c.Concurrency)
	require.Equal(t, 250*time.Millisecond, c.ScanInterval, "the environment wins")
	require.Equal(t, 32, c.Workers)
	require.Equal(t, []time.Duration{time.Minute, 5 * time.Minute, 10 * time.Minute, 30 * time.Minute, time.Hour}, c.RetryIntervals)
	require.False(t, c.Rollback())
	require.Equal(t, 100, c.MoveBatch, "defaults fill the rest")
}

func TestLoadRejects(t *testing.T) {
	_, err := config.Load(write(t, "concurency: 8\n"))
	require.ErrorContains(t, err, "concurency")
	_, err = config.Load(write(t, "concurrency: 6\n"))
	require.ErrorContains(t, err, "concurrency: 6 is not a power of two")
	_, err = config.Load(write(t, "scan_interval: soon\n"))
	require.Error(t, err)
	_, err = config.Load(filepath.Join(t.TempDir(), "missing.yaml"))
	require.Error(t, err)

	t.Setenv("REDEQ_WORKERS", "many")
	_, err = config.Load("")
	require.ErrorContains(t, err, "REDEQ_WORKERS")
}

func TestLoadIgnoresForeignEnv(t *testing.T) {
	t.Setenv("REDEQ_PORT", "tcp://10.0.0.1:6379") // set by Kubernetes for a Service named redeq
	c, err := config.Load("")
	require.NoError(t, err)
	require.Equal(t, config.WorkersDefault, c.Workers)
}

func TestLoadEnvOnly(t *testing.T) {
	t.Setenv("REDEQ_RETRY_INTERVALS", "1s, 10s")
	t.Setenv("REDEQ_AUTO_ACK", "true")
	c, err := config.Load("")
	require.NoError(t, err)
	require.Equal(t, []time.Duration{time.Second, 10 * time.Second}, c.RetryIntervals)
	require.True(t, c.AutoAck)
	t.Setenv("REDEQ_AUTO_ACK", "maybe")
	_, err = config.Load("")
	require.ErrorContains(t, err, "REDEQ_AUTO_ACK")
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("prefix: x\nconcurrency: 4\nretry_intervals: [1s]\n"))
	f.Add([]byte("scan_interval: 1h\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := config.Parse(data)
		if err != nil {
			return
		}
		_ = c.WithDefaults().Validate()
	})
}

func TestBucketLimit(t *testing.T) {
	cases := []struct{ pool, buckets, want int }{
		{1, 1, 1},
		{1, 1024, 1},
		{3, 2, 2},
		{4, 2, 2},
		{5_000_000, 8, 625_000},
		{config.MaxPoolLimit, 1024, config.MaxPoolLimit / 1024},
		{math.MaxInt, 8, math.MaxInt/8 + 1}, // (MaxPool + n - 1) / n wraps negative here
		{math.MaxInt, 1, math.MaxInt},
	}
	for _, tc := range cases {
		c := config.Config{MaxPool: tc.pool, Concurrency: tc.buckets}
		require.Equal(t, tc.want, c.BucketLimit(), "MaxPool %d over %d buckets", tc.pool, tc.buckets)
	}
}

func TestValidateBounds(t *testing.T) {
	cases := []struct {
		name string
		mod  func(*config.Config)
		want string // "" when valid
	}{
		{"max pool at the limit", func(c *config.Config) { c.MaxPool = config.MaxPoolLimit }, ""},
		{"max pool near MaxInt", func(c *config.Config) { c.MaxPool = math.MaxInt },
			"config: MaxPool 9223372036854775807 is out of range 1..1099511627776"},
		{"heartbeat a third of the timeout", func(c *config.Config) {
			c.HeartbeatInterval, c.ConsumerTimeout = 5*time.Second, 15*time.Second
		}, ""},
		{"heartbeat just under the timeout", func(c *config.Config) { c.HeartbeatInterval = c.ConsumerTimeout - 1 },
			"config: HeartbeatInterval 14.999999999s must be at most a third of ConsumerTimeout 15s (5s)"},
		{"heartbeat over a third", func(c *config.Config) { c.HeartbeatInterval = 5*time.Second + 1 }, "HeartbeatInterval"},
		{"consumer timeout at the minimum", func(c *config.Config) {
			c.ConsumerTimeout, c.HeartbeatInterval = 100*time.Millisecond, 10*time.Millisecond
		}, ""},
		{"consumer timeout under 100ms", func(c *config.Config) {
			c.ConsumerTimeout, c.HeartbeatInterval = 99*time.Millisecond, time.Millisecond
		}, "config: ConsumerTimeout 99ms is below the minimum 100ms"},
		{"consumer timeout over a day", func(c *config.Config) { c.ConsumerTimeout = 25 * time.Hour }, "ConsumerTimeout 25h0m0s is above the maximum 24h0m0s"},
		{"1ns scan interval", func(c *config.Config) { c.ScanInterval = 1 }, "config: ScanInterval 1ns is below the minimum 1ms"},
		{"1ms scan interval", func(c *config.Config) { c.ScanInterval = time.Millisecond }, ""},
		{"2h scan interval", func(c *config.Config) { c.ScanInterval = 2 * time.Hour }, "ScanInterval 2h0m0s is above the maximum 1h0m0s"},
		{"negative scan interval", func(c *config.Config) { c.ScanInterval = -time.Second }, "config: ScanInterval -1s must be positive"},
		{"1ns poll timeout", func(c *config.Config) { c.PollTimeout = 1 }, "PollTimeout 1ns is below the minimum 1ms"},
		{"1ns heartbeat", func(c *config.Config) { c.HeartbeatInterval = 1 }, "HeartbeatInterval 1ns is below the minimum 1ms"},
		{"lock expiry at the minimum", func(c *config.Config) {
			c.LockExpiry, c.ScanInterval = 10*time.Millisecond, time.Millisecond
		}, ""},
		{"lock expiry under 10ms", func(c *config.Config) { c.LockExpiry = 5 * time.Millisecond }, "LockExpiry 5ms is below the minimum 10ms"},
		{"lock expiry equal to the scan interval", func(c *config.Config) { c.LockExpiry = c.ScanInterval },
			"config: LockExpiry 1s must be longer than ScanInterval 1s"},
		{"1ns shutdown timeout", func(c *config.Config) { c.ShutdownTimeout = 1 }, "ShutdownTimeout 1ns is below the minimum 1ms"},
		{"no consume timeout", func(c *config.Config) { c.ConsumeTimeout = 0 }, ""},
		{"1ns consume timeout", func(c *config.Config) { c.ConsumeTimeout = 1 }, "ConsumeTimeout 1ns is below the minimum 1ms"},
		{"negative consume timeout", func(c *config.Config) { c.ConsumeTimeout = -1 }, "ConsumeTimeout -1ns must not be negative (0 means no bound)"},
		{"empty retry schedule", func(c *config.Config) { c.RetryIntervals = []time.Duration{} }, "config: RetryIntervals is empty"},
		{"retry interval over a year", func(c *config.Config) { c.RetryIntervals = []time.Duration{time.Second, 366 * 24 * time.Hour} },
			"config: RetryIntervals[1] 8784h0m0s is longer than a year"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := config.Default()
			tc.mod(&c)
			err := c.Validate()
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.want)
			var fe *config.FieldError
			require.ErrorAs(t, err, &fe)
		})
	}
}

// TestTestSettingsValid: the short intervals the suites run with stay valid.
func TestTestSettingsValid(t *testing.T) {
	require.NoError(t, testutil.Fast().Validate())
}

func TestValidateJoinsEveryError(t *testing.T) {
	c := config.Default()
	c.ScanInterval, c.Workers, c.MaxPool = -1, -1, -1
	err := c.Validate()
	require.ErrorContains(t, err, "ScanInterval")
	require.ErrorContains(t, err, "Workers")
	require.ErrorContains(t, err, "MaxPool")
}

func TestLoadNamesFileAndKey(t *testing.T) {
	p := write(t, "scan_interval: -1s\nheartbeat_interval: 10s\nconsumer_timeout: 15s\nretry_intervals: [1s, 0s]\n")
	_, err := config.Load(p)
	require.ErrorContains(t, err, p+": scan_interval: -1s must be positive")
	require.ErrorContains(t, err, p+": heartbeat_interval: 10s must be at most a third of consumer_timeout 15s (5s)")
	require.ErrorContains(t, err, p+": retry_intervals[1]: 0s must be at least 1ms")
	var fe *config.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, p, fe.File)

	// A value from the environment is named by its variable.
	t.Setenv("REDEQ_LOCK_EXPIRY", "1ms")
	_, err = config.Load(p)
	require.ErrorContains(t, err, "REDEQ_LOCK_EXPIRY: 1ms is below the minimum 10ms")
	_, err = config.Load("")
	require.EqualError(t, err, "REDEQ_LOCK_EXPIRY: 1ms is below the minimum 10ms")
}

func TestLoadRejectsSecondDocument(t *testing.T) {
	p := write(t, "prefix: shop\n---\nconcurency: 8\n")
	_, err := config.Load(p)
	require.EqualError(t, err, p+": a second YAML document starts at line 2: a config file holds one")
	_, err = config.Load(write(t, "prefix: shop\n---\n"))
	require.ErrorContains(t, err, "second YAML document")

	c, err := config.Load(write(t, "---\nprefix: shop\n...\n"))
	require.NoError(t, err, "one document with its markers is fine")
	require.Equal(t, "shop", c.Prefix)
	c, err = config.Load(write(t, "# nothing set\n"))
	require.NoError(t, err)
	require.Equal(t, config.Default().Prefix, c.Prefix)
}

package config_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
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
	require.ErrorContains(t, err, "Concurrency 6")
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

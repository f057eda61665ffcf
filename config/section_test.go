package config_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
)

// writeFile writes body to a file of its own and returns its path.
func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
	return path
}

// TestLoadSection: redeq's settings are read from one section of a
// service's own YAML file, with Load's environment overrides, defaults and
// validation, and errors that name the file and the section's key.
func TestLoadSection(t *testing.T) {
	const service = `
http:
  addr: ":8080"
  anything: [the service's, own, keys]
jobs:
  redeq:
    prefix: orders
    scan_interval: 250ms
    redis:
      addrs: ["127.0.0.1:6379"]
`
	t.Run("ReadsTheNestedSection", func(t *testing.T) {
		c, err := config.LoadSection(writeFile(t, "service.yaml", service), "jobs.redeq")
		require.NoError(t, err)
		require.Equal(t, "orders", c.Prefix)
		require.Equal(t, 250*time.Millisecond, c.ScanInterval)
		require.Equal(t, []string{"127.0.0.1:6379"}, c.Redis.Addrs)
		require.Equal(t, config.WorkersDefault, c.Workers, "defaults fill what the section leaves out")
	})
	t.Run("EnvironmentOverrides", func(t *testing.T) {
		t.Setenv("REDEQ_SCAN_INTERVAL", "2s")
		c, err := config.LoadSection(writeFile(t, "service.yaml", service), "jobs.redeq")
		require.NoError(t, err)
		require.Equal(t, 2*time.Second, c.ScanInterval)
	})
	t.Run("ErrorsNameFileAndKey", func(t *testing.T) {
		path := writeFile(t, "service.yaml", "redeq:\n  scan_interval: -1s\n")
		_, err := config.LoadSection(path, "redeq")
		require.ErrorContains(t, err, path+": redeq.scan_interval: ")
		var fe *config.FieldError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, "redeq.scan_interval", fe.Key)
	})
	t.Run("UnknownKeyNamed", func(t *testing.T) {
		path := writeFile(t, "service.yaml", "redeq:\n  scan_intervl: 1s\n")
		_, err := config.LoadSection(path, "redeq")
		require.ErrorContains(t, err, "line 2: redeq.scan_intervl: no such setting")
		path = writeFile(t, "service.yaml", "redeq:\n  redis:\n    adrs: [x]\n")
		_, err = config.LoadSection(path, "redeq")
		require.ErrorContains(t, err, "line 3: redeq.redis.adrs: no such setting")
	})
	t.Run("MissingSectionIsAnError", func(t *testing.T) {
		_, err := config.LoadSection(writeFile(t, "service.yaml", service), "redeq")
		require.ErrorContains(t, err, "no section redeq")
		_, err = config.LoadSection(writeFile(t, "service.yaml", "http: 1\n"), "http.redeq")
		require.ErrorContains(t, err, "http is not a mapping")
		_, err = config.LoadSection(writeFile(t, "service.yaml", ""), "redeq")
		require.ErrorContains(t, err, "no section redeq")
	})
	t.Run("EmptySectionIsEveryDefault", func(t *testing.T) {
		c, err := config.LoadSection(writeFile(t, "service.yaml", "redeq:\nhttp: {}\n"), "redeq")
		require.NoError(t, err)
		require.Equal(t, config.Default().ScanInterval, c.ScanInterval)
	})
	t.Run("BadKeyRefused", func(t *testing.T) {
		for _, key := range []string{"", ".", "jobs..redeq"} {
			_, err := config.LoadSection(writeFile(t, "service.yaml", service), key)
			require.Error(t, err, "key %q", key)
		}
		_, err := config.LoadSection("", "redeq")
		require.Error(t, err)
	})
	t.Run("PasswordInFileRefused", func(t *testing.T) {
		path := writeFile(t, "service.yaml", "redeq:\n  redis:\n    url: redis://user:secret@127.0.0.1:6379\n")
		_, err := config.LoadSection(path, "redeq")
		require.ErrorContains(t, err, "redeq.redis.url: holds a password")
	})
}

// TestDefaultsFollowTheSettingsThatBoundThem: a default that another
// setting bounds follows that setting, so setting one alone is valid.
func TestDefaultsFollowTheSettingsThatBoundThem(t *testing.T) {
	cases := []struct {
		name  string
		given config.Config
		check func(t *testing.T, c config.Config)
	}{
		{"ShortConsumerTimeout", config.Config{ConsumerTimeout: 3 * time.Second}, func(t *testing.T, c config.Config) {
			require.Equal(t, time.Second, c.HeartbeatInterval)
		}},
		{"TinyConsumerTimeout", config.Config{ConsumerTimeout: config.MinConsumerTimeout}, func(t *testing.T, c config.Config) {
			require.LessOrEqual(t, 3*c.HeartbeatInterval, c.ConsumerTimeout)
		}},
		{"LongConsumerTimeoutKeepsHeartbeat", config.Config{ConsumerTimeout: time.Hour}, func(t *testing.T, c config.Config) {
			require.Equal(t, config.HeartbeatIntervalDefault, c.HeartbeatInterval)
		}},
		{"LongHeartbeat", config.Config{HeartbeatInterval: 20 * time.Second}, func(t *testing.T, c config.Config) {
			require.Equal(t, time.Minute, c.ConsumerTimeout)
		}},
		{"ShortHeartbeatKeepsTimeout", config.Config{HeartbeatInterval: time.Second}, func(t *testing.T, c config.Config) {
			require.Equal(t, config.ConsumerTimeoutDefault, c.ConsumerTimeout)
		}},
		{"LongScanInterval", config.Config{ScanInterval: 30 * time.Second}, func(t *testing.T, c config.Config) {
			require.Equal(t, time.Minute, c.LockExpiry)
		}},
		{"ShortScanIntervalKeepsLock", config.Config{ScanInterval: 100 * time.Millisecond}, func(t *testing.T, c config.Config) {
			require.Equal(t, config.LockExpiryDefault, c.LockExpiry)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.given.WithDefaults()
			require.NoError(t, c.Validate())
			tc.check(t, c)
		})
	}
	t.Run("BothGivenAreKeptAndChecked", func(t *testing.T) {
		c := config.Config{ConsumerTimeout: 3 * time.Second, HeartbeatInterval: 2 * time.Second}.WithDefaults()
		require.ErrorContains(t, c.Validate(), "HeartbeatInterval")
	})
}

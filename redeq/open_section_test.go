package redeq_test

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// indent puts every line of text under a YAML key, n spaces in.
func indent(text string, n int) string {
	pad := strings.Repeat(" ", n)
	return pad + strings.ReplaceAll(strings.TrimRight(text, "\n"), "\n", "\n"+pad) + "\n"
}

// TestOpenSection: a service's own file, with redeq's settings (the redis
// section included) under a key of its choosing, starts a working client
// on every deployment; a bad setting is named by file and key, and the
// rest of the file is the service's.
func TestOpenSection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			file := "http:\n  addr: \":8080\"\njobs:\n  redeq:\n" + indent(fastYAML(t)+redisSection(be), 4)
			c, err := redeq.OpenSection(ctx, writeConfig(t, file), "jobs.redeq")
			require.NoError(t, err)
			roundTrip(t, c)
			require.NoError(t, c.Shutdown(ctx))
			_, err = c.Get(ctx, "secure", "a")
			require.ErrorIs(t, err, redis.ErrClosed, "Shutdown closed the connection OpenSection made")
		})
	}
	t.Run("BadSettingNamed", func(t *testing.T) {
		p := writeConfig(t, "redeq:\n  scan_interval: -1s\n  redis: {url: redis://127.0.0.1:1}\n")
		_, err := redeq.OpenSection(ctx, p, "redeq")
		require.ErrorContains(t, err, p+": redeq.scan_interval: -1s must be positive")
	})
	t.Run("NoRedisNamed", func(t *testing.T) {
		p := writeConfig(t, "redeq:\n  prefix: x\n")
		_, err := redeq.OpenSection(ctx, p, "redeq")
		require.ErrorContains(t, err, p+" (redeq) names no Redis")
	})
}

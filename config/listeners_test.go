package config_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
)

// TestListenersSection: the listeners section gives a topic's global
// limits, read from YAML with rate_per's default; each bad value is an
// error naming its key, and limits on a client of several buckets per
// topic are refused.
func TestListenersSection(t *testing.T) {
	t.Run("ReadsTheLimits", func(t *testing.T) {
		path := writeFile(t, "redeq.yaml", `
listeners:
  - topic: partner.callback
    max_running: 5
    rate: 100
    limit_key: tenant
  - topic: mail
    rate: 10
    rate_per: 1m
`)
		c, err := config.Load(path)
		require.NoError(t, err)
		l, ok := c.ListenerOf("partner.callback")
		require.True(t, ok)
		require.Equal(t, config.Listener{Topic: "partner.callback", MaxRunning: 5, Rate: 100, RatePer: time.Second, LimitKey: "tenant"}, l)
		l, ok = c.ListenerOf("mail")
		require.True(t, ok)
		require.Equal(t, config.Listener{Topic: "mail", Rate: 10, RatePer: time.Minute}, l)
		_, ok = c.ListenerOf("other")
		require.False(t, ok)
	})
	cases := []struct {
		name, body, key, reason string
	}{
		{"NoTopic", "  - max_running: 1\n", "listeners[0].topic", "is missing"},
		{"BadTopic", "  - topic: 'a{b}'\n    max_running: 1\n", "listeners[0].topic", "{"},
		{"TopicTwice", "  - topic: a\n    max_running: 1\n  - topic: a\n    rate: 1\n", "listeners[1].topic", `"a" is listeners[0]'s topic too`},
		{"NegativeMaxRunning", "  - topic: a\n    max_running: -1\n", "listeners[0].max_running", "-1 is negative"},
		{"NegativeRate", "  - topic: a\n    rate: -5\n", "listeners[0].rate", "out of range"},
		{"RateTooHigh", "  - topic: a\n    rate: 2000000\n", "listeners[0].rate", "out of range"},
		{"PeriodWithoutRate", "  - topic: a\n    max_running: 1\n    rate_per: 1s\n", "listeners[0].rate_per", "without a rate"},
		{"PeriodTooLong", "  - topic: a\n    rate: 1\n    rate_per: 25h\n", "listeners[0].rate_per", "out of range 1ms..24h"},
		{"KeyWithoutLimit", "  - topic: a\n    limit_key: tenant\n", "listeners[0].limit_key", "without a limit"},
		{"UnknownKey", "  - topic: a\n    max_runing: 1\n", "line 3", "max_runing"},
		{"NotADuration", "  - topic: a\n    rate: 1\n    rate_per: soon\n", "", "soon"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := writeFile(t, "redeq.yaml", "listeners:\n"+tc.body)
			_, err := config.Load(path)
			require.Error(t, err)
			require.ErrorContains(t, err, tc.key)
			require.ErrorContains(t, err, tc.reason)
		})
	}
	t.Run("UnknownKeyInASection", func(t *testing.T) {
		path := writeFile(t, "service.yaml", "redeq:\n  listeners:\n    - topic: a\n      max_runing: 1\n")
		_, err := config.LoadSection(path, "redeq")
		require.ErrorContains(t, err, "line 4: redeq.listeners[0].max_runing: no such setting")
	})
	t.Run("LimitsNeedOneBucket", func(t *testing.T) {
		path := writeFile(t, "redeq.yaml", "concurrency: 4\nlisteners:\n  - topic: a\n    max_running: 2\n")
		_, err := config.Load(path)
		require.ErrorContains(t, err, "listeners[0]: global limits need a topic of one bucket (concurrency 1), not 4")
		var fe *config.FieldError
		require.ErrorAs(t, err, &fe)
		require.Equal(t, "listeners[0]", fe.Key)
	})
}

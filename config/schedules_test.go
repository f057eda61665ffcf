package config_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
)

// TestLoadSchedules: a schedules section loads every field of each
// schedule, in a file of its own and under a service's section; no
// REDEQ_* variable sets it.
func TestLoadSchedules(t *testing.T) {
	const list = `schedules:
  - name: digest
    topic: mail
    spec: "0 8 * * *"
    time_zone: Europe/Paris
    catch_up: all
    catch_up_window: 6h
    body: '{"kind":"daily"}'
    headers: {team: growth}
    max_retries: 2
    retry_intervals: [1m, 5m]
  - name: sweep
    topic: orders
    spec: "@every 5m"
`
	want := []config.Schedule{
		{Name: "digest", Topic: "mail", Spec: "0 8 * * *", TimeZone: "Europe/Paris", CatchUp: "all", CatchUpWindow: 6 * time.Hour,
			Body: `{"kind":"daily"}`, Headers: map[string]string{"team": "growth"}, MaxRetries: 2, RetryIntervals: []time.Duration{time.Minute, 5 * time.Minute}},
		{Name: "sweep", Topic: "orders", Spec: "@every 5m"},
	}
	t.Setenv("REDEQ_SCHEDULES", "ignored")
	c, err := config.Load(write(t, list))
	require.NoError(t, err)
	require.Equal(t, want, c.Schedules)

	nested := "http: {addr: ':80'}\njobs:\n  redeq:\n    prefix: svc\n"
	for _, line := range strings.Split(strings.TrimRight(list, "\n"), "\n") {
		nested += "    " + line + "\n"
	}
	c, err = config.LoadSection(writeFile(t, "svc.yaml", nested), "jobs.redeq")
	require.NoError(t, err)
	require.Equal(t, want, c.Schedules)
	require.Equal(t, "svc", c.Prefix)

	c, err = config.Load(write(t, "prefix: x\n"))
	require.NoError(t, err)
	require.Empty(t, c.Schedules, "no section, no schedule")
}

// TestLoadRefusesBadSchedules: each bad schedule field is named by file
// and key, all of them at once: a missing name, topic or spec, a spec cron
// cannot parse, an unknown or machine-local zone, an unknown catch-up
// word, a window out of range, a bad retry interval, a name used twice, an
// unknown key (in a file of its own and under a section).
func TestLoadRefusesBadSchedules(t *testing.T) {
	p := write(t, `schedules:
  - topic: mail
    spec: "0 8 * * *"
  - name: a
    spec: "61 * * * *"
  - name: b
    topic: t
    spec: "@daily"
    time_zone: Mars/Olympus
  - name: c
    topic: t
    spec: "@daily"
    time_zone: Local
    catch_up: sometimes
    catch_up_window: 400000h
    retry_intervals: [1s, 0s]
  - name: a
    topic: t
`)
	_, err := config.Load(p)
	for _, want := range []string{
		p + ": schedules[0].name: is missing",
		p + ": schedules[1].topic: is missing",
		p + `: schedules[1].spec: "61 * * * *": `,
		p + `: schedules[2].time_zone: "Mars/Olympus": `,
		p + `: schedules[3].time_zone: "Local" differs between machines`,
		p + `: schedules[3].catch_up: "sometimes" is none of latest, none, all`,
		p + ": schedules[3].catch_up_window: 400000h0m0s is out of range",
		p + ": schedules[3].retry_intervals[1]: 0s must be at least 1ms",
		p + `: schedules[4].name: "a" is schedules[1]'s name too`,
		p + ": schedules[4].spec: is missing",
	} {
		require.ErrorContains(t, err, want)
	}
	var fe *config.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "Schedules[0].Name", fe.Field)

	_, err = config.Load(write(t, "schedules:\n  - name: a\n    topic: t\n    spec: '@daily'\n    zone: UTC\n"))
	require.ErrorContains(t, err, "field zone not found")
	_, err = config.LoadSection(writeFile(t, "svc.yaml", "redeq:\n  schedules:\n    - name: a\n      topic: t\n      spec: '@daily'\n      zone: UTC\n"), "redeq")
	require.ErrorContains(t, err, "line 6: redeq.schedules[0].zone: no such setting")
	_, err = config.LoadSection(writeFile(t, "svc.yaml", "redeq:\n  schedules:\n    - name: a\n      topic: t\n      spec: '61 * * * *'\n"), "redeq")
	require.ErrorContains(t, err, "svc.yaml: redeq.schedules[0].spec: ")
}

// TestCatchUpWords: the catch-up words are redeq's CatchUp constants in
// order, "" reading as latest.
func TestCatchUpWords(t *testing.T) {
	require.Equal(t, 0, config.CatchUpOf(""))
	for i, w := range config.CatchUps {
		require.Equal(t, i, config.CatchUpOf(w))
	}
	require.Equal(t, -1, config.CatchUpOf("Latest"))
}

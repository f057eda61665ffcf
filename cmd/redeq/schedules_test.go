package main

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// scheduleOf returns the schedule name as the library reads it, or false.
func scheduleOf(t *testing.T, c *redeq.Client, name string) (redeq.ScheduleInfo, bool) {
	t.Helper()
	infos, err := c.Schedules(context.Background())
	require.NoError(t, err)
	for _, in := range infos {
		if in.Name == name {
			return in, true
		}
	}
	return redeq.ScheduleInfo{}, false
}

// TestCLISchedules: schedules lists every schedule with its topic, spec,
// zone, next ticks as NextTicks computes them, last tick, paused flag and
// skipped count, as text and as JSON; schedule pause and resume change the
// record for every client; schedule delete asks first and deletes only on
// yes; a name with no schedule is exit 3.
func TestCLISchedules(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := newEnv(t, b)
			ctx := context.Background()
			digest := redeq.Schedule{Name: "digest", Topic: "mail", Spec: "0 8 * * *", TimeZone: "Europe/Paris"}
			sweep := redeq.Schedule{Name: "sweep", Topic: "orders", Spec: "@every 5m", CatchUp: redeq.CatchUpNone}
			require.NoError(t, e.c.PutSchedule(ctx, digest))
			require.NoError(t, e.c.PutSchedule(ctx, sweep))

			out := e.ok(t, "schedules")
			require.Regexp(t, `NAME\s+TOPIC\s+SPEC\s+ZONE\s+NEXT\s+LAST TICK\s+PAUSED\s+SKIPPED`, out)
			require.Regexp(t, `(?m)^digest\s+mail\s+0 8 \* \* \*\s+Europe/Paris\s+\S+T08:00:00\+0[12]:00\s+-\s+false\s+0$`, out)
			require.Regexp(t, `(?m)^sweep\s+orders\s+@every 5m\s+UTC\s+\S+Z\s+-\s+false\s+0$`, out)

			var rows []scheduleJSON
			require.NoError(t, json.Unmarshal([]byte(e.ok(t, "schedules", "--next", "3", "-o", "json")), &rows))
			require.Len(t, rows, 2)
			require.Equal(t, "digest", rows[0].Name)
			require.Equal(t, "Europe/Paris", rows[0].Zone)
			require.Equal(t, "latest", rows[0].CatchUp)
			require.Equal(t, "none", rows[1].CatchUp)
			require.NotNil(t, rows[0].Next)
			want, err := redeq.NextTicks(digest, rows[0].Next.Add(-time.Millisecond), 3)
			require.NoError(t, err)
			require.Len(t, rows[0].Upcoming, 3)
			for i := range want {
				require.True(t, want[i].Equal(rows[0].Upcoming[i]), "upcoming tick %d: %v, NextTicks says %v", i, rows[0].Upcoming[i], want[i])
			}
			require.Equal(t, time.Duration(0), rows[1].Upcoming[1].Sub(rows[1].Upcoming[0])-5*time.Minute)
			require.Nil(t, rows[0].LastTick)

			require.Equal(t, "paused schedule sweep\n", e.ok(t, "schedule", "pause", "sweep"))
			in, ok := scheduleOf(t, e.c, "sweep")
			require.True(t, ok)
			require.True(t, in.Paused)
			require.Regexp(t, `(?m)^sweep\s+orders\s+@every 5m\s+UTC\s+-\s+-\s+true\s+0$`, e.ok(t, "schedules"))
			var paused []scheduleJSON
			require.NoError(t, json.Unmarshal([]byte(e.ok(t, "schedules", "-o", "json")), &paused))
			require.True(t, paused[1].Paused)
			require.Nil(t, paused[1].Next)
			require.Empty(t, paused[1].Upcoming, "a paused schedule has no next tick")

			var res map[string]string
			require.NoError(t, json.Unmarshal([]byte(e.ok(t, "schedule", "resume", "sweep", "-o", "json")), &res))
			require.Equal(t, map[string]string{"done": "resumed", "schedule": "sweep"}, res)
			in, _ = scheduleOf(t, e.c, "sweep")
			require.False(t, in.Paused)

			code, out, errs := e.run(t, "n\n", "schedule", "delete", "sweep")
			require.Equal(t, exitError, code)
			require.Empty(t, out)
			require.Contains(t, errs, "Delete the schedule sweep, for good?")
			require.Contains(t, errs, "not confirmed: nothing deleted")
			_, ok = scheduleOf(t, e.c, "sweep")
			require.True(t, ok, "a delete not confirmed deletes nothing")

			code, out, errs = e.run(t, "y\n", "schedule", "delete", "sweep")
			require.Equal(t, 0, code, errs)
			require.Equal(t, "deleted schedule sweep\n", out)
			_, ok = scheduleOf(t, e.c, "sweep")
			require.False(t, ok)
			require.Equal(t, "deleted schedule digest\n", e.ok(t, "schedule", "delete", "--yes", "digest"))

			code, _, errs = e.run(t, "", "schedules")
			require.Equal(t, 0, code)
			require.Contains(t, errs, "no schedule under the prefix")
			require.Equal(t, "[]\n", e.ok(t, "schedules", "-o", "json"))
		})
	}
}

// TestCLIScheduleErrors: a schedule that is not there is exit 3 for
// pause, resume and delete (before any question); a bad name or command
// line is exit 2; neither writes anything.
func TestCLIScheduleErrors(t *testing.T) {
	e := newEnv(t, testutil.Backends(t)[0])
	for _, args := range [][]string{
		{"schedule", "pause", "nope"},
		{"schedule", "resume", "nope"},
		{"schedule", "delete", "nope"},
		{"schedule", "delete", "--yes", "nope"},
	} {
		code, out, errs := e.run(t, "y\n", args...)
		require.Equal(t, exitNotFound, code, "%v: %s", args, errs)
		require.Empty(t, out)
		require.Contains(t, errs, "schedule not found")
		require.NotContains(t, errs, "[y/N]")
	}
	for _, args := range [][]string{
		{"schedule"},
		{"schedule", "pause"},
		{"schedule", "pause", "a b"},
		{"schedule", "frobnicate", "x"},
		{"schedules", "--next", "0"},
		{"schedules", "extra"},
	} {
		code, _, errs := e.run(t, "", args...)
		require.Equal(t, exitUsage, code, "%v: %s", args, errs)
	}
	code, _, errs := e.run(t, "", "-o", "json", "schedule", "pause", "nope")
	require.Equal(t, exitNotFound, code)
	var got struct {
		Error string `json:"error"`
		Exit  int    `json:"exit"`
	}
	require.NoError(t, json.Unmarshal([]byte(errs), &got), errs)
	require.Equal(t, exitNotFound, got.Exit)
	require.Contains(t, got.Error, "schedule not found")
	require.Empty(t, testutil.Keys(t, e.b.New(t), e.prefix), "nothing was written")
}

// TestCLISchedulesShowTheLastTick: once a started client added a tick's
// job, schedules shows that tick as the last one, in text and JSON, and a
// next tick after it.
func TestCLISchedulesShowTheLastTick(t *testing.T) {
	e := newEnv(t, testutil.Backends(t)[0])
	ctx := context.Background()
	require.NoError(t, e.c.PutSchedule(ctx, redeq.Schedule{Name: "beat", Topic: "beats", Spec: "@every 1s"}))
	require.NoError(t, e.c.Start(ctx))
	t.Cleanup(func() { require.NoError(t, e.c.Shutdown(ctx)) })
	var rows []scheduleJSON
	require.Eventually(t, func() bool {
		require.NoError(t, json.Unmarshal([]byte(e.ok(t, "schedules", "-o", "json")), &rows))
		return len(rows) == 1 && rows[0].LastTick != nil
	}, 20*time.Second, 50*time.Millisecond)
	require.Zero(t, rows[0].LastTick.UnixMilli()%1000, "a tick of @every 1s is a whole second")
	require.True(t, rows[0].Next.After(*rows[0].LastTick))
	require.Regexp(t, `(?m)^beat\s+beats\s+@every 1s\s+UTC\s+\S+Z\s+\S+Z\s+false\s+0$`, e.ok(t, "schedules"))
}

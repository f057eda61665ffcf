package dashboard_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/dashboard"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

func scheduleRow(page, name string) string {
	return regexp.MustCompile(`(?s)<tr data-schedule="` + regexp.QuoteMeta(name) + `">.*?</tr>`).FindString(page)
}

func scheduleInfo(t *testing.T, c *redeq.Client, name string) (redeq.ScheduleInfo, bool) {
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

// TestSchedulesPage: the schedules page, linked from every page's header,
// lists each schedule with its topic, spec, zone, next tick (in its zone),
// last tick, paused flag and skipped count, as Schedules reads them.
func TestSchedulesPage(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := setup(t, b, dashboard.Options{})
			ctx := context.Background()
			_, page := e.get(t, "/")
			require.Contains(t, page, `href="/schedules" id="nav-schedules"`)
			_, page = e.get(t, "/schedules")
			require.Contains(t, page, `id="no-schedule"`)

			require.NoError(t, e.c.PutSchedule(ctx, redeq.Schedule{Name: "digest", Topic: "mail", Spec: "0 8 * * *", TimeZone: "Europe/Paris"}))
			require.NoError(t, e.c.PutSchedule(ctx, redeq.Schedule{Name: "sweep<x>", Topic: "orders", Spec: "@every 5m"}))
			require.NoError(t, e.c.PauseSchedule(ctx, "sweep<x>"))
			code, page := e.get(t, "/schedules")
			require.Equal(t, http.StatusOK, code, page)
			in, _ := scheduleInfo(t, e.c, "digest")
			row := scheduleRow(page, "digest")
			require.Contains(t, row, `<a href="/topic?t=mail">mail</a>`)
			require.Contains(t, row, "<code>0 8 * * *</code>")
			require.Contains(t, row, "<td>Europe/Paris</td>")
			require.Contains(t, row, `data-next="`+strconv.FormatInt(in.Next.UnixMilli(), 10)+`"`)
			require.Regexp(t, ` 08:00:00 CES?T<`, row, "the next tick shows in the schedule's zone")
			require.Contains(t, row, `data-last="">—`)
			require.Contains(t, row, "running")
			require.Contains(t, row, `data-skipped="0"`)
			require.Contains(t, row, `value="pause"`)

			row = scheduleRow(page, "sweep&lt;x&gt;")
			require.NotEmpty(t, row, "the name is escaped")
			require.NotContains(t, page, "sweep<x>")
			require.Contains(t, row, `<span class="paused">paused</span>`)
			require.Contains(t, row, `data-next="">—`, "a paused schedule has no next tick")
			require.Contains(t, row, `value="resume"`)

			ro := setup(t, b, dashboard.Options{ReadOnly: true})
			_, page = ro.get(t, "/schedules")
			require.NotContains(t, page, `action="/schedule"`, "a read-only dashboard shows no action")
		})
	}
}

// TestScheduleActionsAskFirstAndAreAudited: pause, resume and delete of a
// schedule show a confirmation and change nothing until it is confirmed;
// each action taken logs who, what, the schedule and its topic, and the
// result; a name with no schedule is 404; a read-only dashboard or a
// request without the CSRF token changes nothing.
func TestScheduleActionsAskFirstAndAreAudited(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			var log syncBuf
			e := setup(t, b, dashboard.Options{Username: "alice", Password: "pw", Logger: slog.New(slog.NewTextHandler(&log, nil))})
			e.hc.Transport = basicAuth{"alice", "pw"}
			ctx := context.Background()
			require.NoError(t, e.c.PutSchedule(ctx, redeq.Schedule{Name: "sweep", Topic: "orders", Spec: "@every 5m"}))
			tok := e.csrf(t, "/schedules")

			for _, op := range []string{"pause", "delete"} {
				code, page := e.postTo(t, "/schedule", url.Values{"csrf": {tok}, "op": {op}, "name": {"sweep"}})
				require.Equal(t, http.StatusOK, code, page)
				require.Contains(t, page, `id="question"`)
				require.Contains(t, page, "schedule sweep")
				require.Contains(t, page, `action="/schedule"`)
				require.Contains(t, page, `name="confirm" value="1"`)
				require.Contains(t, page, `href="/schedules" id="cancel"`)
			}
			in, ok := scheduleInfo(t, e.c, "sweep")
			require.True(t, ok)
			require.False(t, in.Paused, "nothing happens before the confirmation")
			require.NotContains(t, log.String(), "dashboard: action")

			code, _ := e.postTo(t, "/schedule", url.Values{"csrf": {tok}, "op": {"pause"}, "name": {"sweep"}, "confirm": {"1"}})
			require.Equal(t, http.StatusSeeOther, code)
			in, _ = scheduleInfo(t, e.c, "sweep")
			require.True(t, in.Paused)
			_, page := e.get(t, "/schedules")
			require.Contains(t, page, "Schedule sweep paused")

			code, _ = e.postTo(t, "/schedule", url.Values{"csrf": {tok}, "op": {"resume"}, "name": {"sweep"}, "confirm": {"1"}})
			require.Equal(t, http.StatusSeeOther, code)
			in, _ = scheduleInfo(t, e.c, "sweep")
			require.False(t, in.Paused)

			// Refused: read-only, no CSRF token, an unknown action.
			ro := setup(t, b, dashboard.Options{ReadOnly: true})
			code, _ = ro.postTo(t, "/schedule", url.Values{"op": {"delete"}, "name": {"sweep"}, "confirm": {"1"}})
			require.Equal(t, http.StatusForbidden, code)
			code, _ = e.postTo(t, "/schedule", url.Values{"op": {"delete"}, "name": {"sweep"}, "confirm": {"1"}})
			require.Equal(t, http.StatusForbidden, code)
			code, _ = e.postTo(t, "/schedule", url.Values{"csrf": {tok}, "op": {"frob"}, "name": {"sweep"}, "confirm": {"1"}})
			require.Equal(t, http.StatusBadRequest, code)
			_, ok = scheduleInfo(t, e.c, "sweep")
			require.True(t, ok, "a refused request deletes nothing")

			code, _ = e.postTo(t, "/schedule", url.Values{"csrf": {tok}, "op": {"delete"}, "name": {"sweep"}, "confirm": {"1"}})
			require.Equal(t, http.StatusSeeOther, code)
			_, ok = scheduleInfo(t, e.c, "sweep")
			require.False(t, ok)
			code, _ = e.postTo(t, "/schedule", url.Values{"csrf": {tok}, "op": {"delete"}, "name": {"sweep"}})
			require.Equal(t, http.StatusNotFound, code, "no question about a schedule that is not there")
			code, _ = e.postTo(t, "/schedule", url.Values{"csrf": {tok}, "op": {"delete"}, "name": {"sweep"}, "confirm": {"1"}})
			require.Equal(t, http.StatusNotFound, code)

			lines := log.String()
			require.Regexp(t, `who=alice .*action=schedule-pause topic=orders jobs=0 result=ok schedule=sweep`, lines)
			require.Regexp(t, `action=schedule-resume topic=orders jobs=0 result=ok schedule=sweep`, lines)
			require.Regexp(t, `action=schedule-delete topic=orders jobs=0 result=ok schedule=sweep`, lines)
			require.Regexp(t, `action=schedule-delete topic="" jobs=0 result="error: .*schedule not found" schedule=sweep`, lines)
			require.Equal(t, 4, len(regexp.MustCompile(`dashboard: action`).FindAllString(lines, -1)), "one line per action taken")
		})
	}
}

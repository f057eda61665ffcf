package dashboard

import (
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/redeq-go/redeq/redeq"
)

// scheduleRow is one schedule on the schedules page.
type scheduleRow struct {
	redeq.ScheduleInfo
	// Zone is the zone's name, "UTC" for "".
	Zone string
}

// local prints t in the schedule's zone, "—" when zero.
func (r scheduleRow) local(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	if loc, err := time.LoadLocation(r.Zone); err == nil {
		t = t.In(loc)
	}
	return t.Format("2006-01-02 15:04:05 MST")
}

// NextLocal is the next tick in the schedule's zone.
func (r scheduleRow) NextLocal() string { return r.local(r.Next) }

// LastLocal is the last tick in the schedule's zone.
func (r scheduleRow) LastLocal() string { return r.local(r.LastTick) }

type schedulesData struct {
	Schedules []scheduleRow
}

func (h *handler) schedules(w http.ResponseWriter, r *http.Request) {
	infos, err := h.c.Schedules(r.Context())
	if err != nil {
		h.apiFail(w, r, err)
		return
	}
	d := schedulesData{Schedules: make([]scheduleRow, 0, len(infos))}
	for _, in := range infos {
		zone := in.TimeZone
		if zone == "" {
			zone = "UTC"
		}
		d.Schedules = append(d.Schedules, scheduleRow{ScheduleInfo: in, Zone: zone})
	}
	h.render(w, r, http.StatusOK, "schedules.html", "Schedules", d)
}

// scheduleQuestions are the confirmations of the schedule actions: each
// acts on every client at once.
var scheduleQuestions = map[string]struct{ Question, Label string }{
	"pause":  {"Pause schedule %[1]s? No client adds its ticks until it is resumed; the ticks that pass meanwhile are skipped.", "Pause %[1]s"},
	"resume": {"Resume schedule %[1]s? It ticks again from its first tick after now.", "Resume %[1]s"},
	"delete": {"Delete schedule %[1]s, for good? Its ticks stop on every client and its waiting tick's job goes; jobs of earlier ticks stay.", "Delete %[1]s"},
}

// scheduleAction pauses, resumes or deletes one schedule after a
// confirmation, and logs it with the schedule's topic.
func (h *handler) scheduleAction(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	opName, name := r.PostFormValue("op"), r.PostFormValue("name")
	c, ok := scheduleQuestions[opName]
	if !ok {
		h.fail(w, r, http.StatusBadRequest, "Unknown action.")
		return
	}
	// The schedule as it is now: the question names its topic, and a name
	// with no schedule is refused before any question.
	var in *redeq.ScheduleInfo
	infos, err := h.c.Schedules(ctx)
	if err != nil {
		h.apiFail(w, r, err)
		return
	}
	for i := range infos {
		if infos[i].Name == name {
			in = &infos[i]
		}
	}
	if in == nil {
		err := fmt.Errorf("schedule %q: %w", name, redeq.ErrScheduleNotFound)
		if r.PostFormValue("confirm") == "1" {
			h.audit(r, "schedule-"+opName, "", 0, err, "schedule", name)
		}
		h.apiFail(w, r, err)
		return
	}
	if r.PostFormValue("confirm") != "1" {
		h.render(w, r, http.StatusOK, "confirm.html", "Confirm", confirmData{
			Question: fmt.Sprintf(c.Question, name), Action: "/schedule", Fields: url.Values{"op": {opName}, "name": {name}},
			Label: fmt.Sprintf(c.Label, name), Cancel: h.link("/schedules", nil),
		})
		return
	}
	var msg string
	switch opName {
	case "pause":
		err = h.c.PauseSchedule(ctx, name)
		msg = "Schedule " + name + " paused: no client adds its ticks until it is resumed."
	case "resume":
		err = h.c.ResumeSchedule(ctx, name)
		msg = "Schedule " + name + " resumed."
	case "delete":
		err = h.c.DeleteSchedule(ctx, name)
		msg = "Schedule " + name + " deleted."
	}
	h.audit(r, "schedule-"+opName, in.Topic, 0, err, "schedule", name)
	if err != nil {
		h.apiFail(w, r, err)
		return
	}
	h.flash(w, r, msg)
	http.Redirect(w, r, h.link("/schedules", nil), http.StatusSeeOther)
}

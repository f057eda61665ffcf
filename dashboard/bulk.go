package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/redeq-go/redeq/redeq"
)

// MaxBulk bounds the jobs one bulk action names (a page lists at most
// MaxPageSize).
const MaxBulk = MaxPageSize

// bulkOps are the actions a list of jobs in state offers for the jobs
// selected on it.
func bulkOps(state redeq.State) []op {
	switch state {
	case redeq.StateDead, redeq.StateUnAck:
		return []op{{Name: "requeue", Label: "Requeue selected"}, {Name: "delete", Label: "Delete selected", Danger: true}}
	}
	return nil
}

// confirmData is a confirmation page: the question, the jobs it names, and
// the form that repeats the request with confirm=1.
type confirmData struct {
	Question string
	Action   string // the page the form posts to
	Fields   url.Values
	IDs      []string
	Label    string
	Cancel   string
}

// bulk requeues or deletes the jobs selected on a dead or un_ack list:
// the first POST shows them for confirmation, the second (confirm=1) acts.
// Jobs that left the list meanwhile are skipped and counted.
func (h *handler) bulk(w http.ResponseWriter, r *http.Request) {
	t, state, opName := r.PostFormValue("t"), redeq.State(r.PostFormValue("state")), r.PostFormValue("op")
	if state != redeq.StateDead && state != redeq.StateUnAck {
		h.fail(w, r, http.StatusBadRequest, "Bulk actions apply to dead and un-acked jobs only.")
		return
	}
	if opName != "requeue" && opName != "delete" {
		h.fail(w, r, http.StatusBadRequest, "Unknown action.")
		return
	}
	_ = r.ParseForm()
	var ids []string
	seen := map[string]bool{}
	for _, id := range r.PostForm["id"] {
		if id != "" && !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		h.fail(w, r, http.StatusBadRequest, "No job selected.")
		return
	}
	if len(ids) > MaxBulk {
		h.fail(w, r, http.StatusBadRequest, fmt.Sprintf("%d jobs selected: at most %d at once.", len(ids), MaxBulk))
		return
	}
	back := url.Values{"t": {t}, "state": {string(state)}}
	if r.PostFormValue("confirm") != "1" {
		verb := "Requeue"
		if opName == "delete" {
			verb = "Delete"
		}
		h.render(w, r, http.StatusOK, "confirm.html", "Confirm", confirmData{
			Question: fmt.Sprintf("%s these %d %s jobs of topic %s?", verb, len(ids), state, t),
			Action:   "/bulk", Fields: url.Values{"t": {t}, "state": {string(state)}, "op": {opName}},
			IDs: ids, Label: fmt.Sprintf("%s %d jobs", verb, len(ids)), Cancel: h.link("/topic", back),
		})
		return
	}
	ctx := r.Context()
	done, skipped := 0, 0
	for _, id := range ids {
		var err error
		switch {
		case opName == "delete":
			_, err = h.c.Delete(ctx, t, id)
		case state == redeq.StateDead:
			err = h.c.RequeueDead(ctx, t, id, 0)
		default:
			err = h.c.RequeueUnAck(ctx, t, id, 0)
		}
		switch {
		case err == nil:
			done++
		case errors.Is(err, redeq.ErrJobNotFound), errors.Is(err, redeq.ErrJobNotWaiting):
			skipped++
		default:
			err = fmt.Errorf("%d of %d jobs done, then: %w", done, len(ids), err)
			h.audit(r, "bulk-"+opName, t, done, err, "state", string(state), "named", len(ids), "skipped", skipped)
			h.apiFail(w, r, err)
			return
		}
	}
	h.audit(r, "bulk-"+opName, t, done, nil, "state", string(state), "named", len(ids), "skipped", skipped)
	f := "%d jobs requeued, due now"
	if opName == "delete" {
		f = "%d jobs deleted"
	}
	h.flash(w, r, outcome(f, done, skipped))
	http.Redirect(w, r, h.link("/topic", back), http.StatusSeeOther)
}

// MaxPurge bounds the dead jobs one purge names (its confirmation page
// lists them); a larger dead set takes more than one purge.
const MaxPurge = redeq.MaxBulk

// purge removes dead jobs of a topic after a confirmation page that names
// them: at most MaxPurge of the dead set as List pages it. Its POST
// (confirm=1) removes those of the named jobs still dead, so jobs that die
// while the page is open stay.
func (h *handler) purge(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	t := r.PostFormValue("t")
	back := url.Values{"t": {t}, "state": {string(redeq.StateDead)}}
	if r.PostFormValue("confirm") != "1" {
		st, err := h.c.Stats(ctx, t)
		if err != nil {
			h.apiFail(w, r, err)
			return
		}
		ids, err := h.deadIDs(ctx, t)
		if err != nil {
			h.apiFail(w, r, err)
			return
		}
		if len(ids) == 0 {
			h.flash(w, r, "No dead job to purge.")
			http.Redirect(w, r, h.link("/topic", back), http.StatusSeeOther)
			return
		}
		q := fmt.Sprintf("Remove these %d dead jobs of topic %s, for good?", len(ids), t)
		if st.Dead > int64(len(ids)) {
			q = fmt.Sprintf("Remove these %d of the %d dead jobs of topic %s, for good? (At most %d a purge.)", len(ids), st.Dead, t, MaxPurge)
		}
		h.render(w, r, http.StatusOK, "confirm.html", "Confirm", confirmData{
			Question: q + " Jobs that die after this question stay.",
			Action:   "/purge", Fields: url.Values{"t": {t}},
			IDs: ids, Label: fmt.Sprintf("Purge %d dead jobs", len(ids)), Cancel: h.link("/topic", back),
		})
		return
	}
	_ = r.ParseForm()
	var ids []string
	seen := map[string]bool{}
	for _, id := range r.PostForm["id"] {
		if id != "" && !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		h.fail(w, r, http.StatusBadRequest, "No job named: purge from the confirmation page.")
		return
	}
	if len(ids) > MaxPurge {
		h.fail(w, r, http.StatusBadRequest, fmt.Sprintf("%d jobs named: at most %d at once.", len(ids), MaxPurge))
		return
	}
	res, err := h.c.PurgeDeadJobs(ctx, t, ids)
	if err != nil {
		err = fmt.Errorf("%d of %d jobs purged, then: %w", res.Done, len(ids), err)
		h.audit(r, "purge", t, res.Done, err, "state", string(redeq.StateDead), "named", len(ids))
		h.apiFail(w, r, err)
		return
	}
	h.audit(r, "purge", t, res.Done, nil, "state", string(redeq.StateDead), "named", len(ids), "skipped", res.Skipped)
	h.flash(w, r, outcome("%d dead jobs purged", res.Done, res.Skipped))
	http.Redirect(w, r, h.link("/topic", back), http.StatusSeeOther)
}

// deadIDs returns the ids of at most MaxPurge dead jobs of topic, in the
// order List pages them.
func (h *handler) deadIDs(ctx context.Context, topic string) ([]string, error) {
	var ids []string
	seen := map[string]bool{}
	cursor := ""
	for len(ids) < MaxPurge {
		page, err := h.c.List(ctx, topic, redeq.StateDead, redeq.ListOptions{Limit: min(redeq.MaxListLimit, MaxPurge-len(ids)), Cursor: cursor})
		if err != nil {
			return nil, err
		}
		for _, j := range page.Jobs {
			if !seen[j.ID] && len(ids) < MaxPurge {
				seen[j.ID] = true
				ids = append(ids, j.ID)
			}
		}
		if page.Next == "" {
			break
		}
		cursor = page.Next
	}
	return ids, nil
}

// outcome is the message of a bulk action that did n jobs and skipped
// some.
func outcome(f string, n, skipped int) string {
	s := fmt.Sprintf(f, n)
	if skipped > 0 {
		s += fmt.Sprintf("; %d skipped (no longer there)", skipped)
	}
	return s + "."
}

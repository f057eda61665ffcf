package dashboard

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redeq-go/redeq/redeq"
)

// MaxBulk bounds the jobs one bulk action names (a page lists at most
// MaxPageSize).
const MaxBulk = MaxPageSize

// bulkOps are the actions a list of jobs in state offers for the jobs
// selected on it, or for every job that matches its filters.
func bulkOps(state redeq.State) []op {
	switch state {
	case redeq.StateDead, redeq.StateUnAck:
		return []op{{Name: "requeue", Label: "Requeue"}, {Name: "delete", Label: "Delete", Danger: true}}
	case redeq.StateScheduled:
		return []op{{Name: "run", Label: "Run now"}, {Name: "delete", Label: "Delete", Danger: true}}
	case redeq.StateReady:
		return []op{{Name: "delete", Label: "Delete", Danger: true}}
	}
	return nil
}

// bulkOp checks that op is one of state's bulk actions, and names it:
// its verb for the question, the report's format.
func bulkOp(state redeq.State, name string) (verb, report string, ok bool) {
	for _, o := range bulkOps(state) {
		if o.Name == name {
			switch name {
			case "delete":
				return "Delete", "%d jobs deleted", true
			case "run":
				return "Run now", "%d jobs due now", true
			}
			return "Requeue", "%d jobs requeued, due now", true
		}
	}
	return "", "", false
}

// marksOf reads the marks a form carries, each "<mark> <id>" (the page
// that listed the jobs wrote them), by id.
func marksOf(form url.Values) map[string]string {
	marks := map[string]string{}
	for _, v := range form["mark"] {
		if m, id, ok := strings.Cut(v, " "); ok && m != "" && id != "" {
			marks[id] = m
		}
	}
	return marks
}

// markFields are marks as the fields marksOf reads, for the ids given.
func markFields(ids []string, marks map[string]string) []string {
	var out []string
	for _, id := range ids {
		if m := marks[id]; m != "" {
			out = append(out, m+" "+id)
		}
	}
	return out
}

// act runs the bulk action op on ids, in batches of redeq.MaxBulk. An
// un_acked or dead job of ids with a mark is acted on only while it is the
// stay the page listed (redeq.Marks).
func (h *handler) act(ctx context.Context, t string, state redeq.State, op string, ids []string, marks map[string]string) (redeq.BulkResult, error) {
	var total redeq.BulkResult
	for len(ids) > 0 {
		n := min(len(ids), redeq.MaxBulk)
		var r redeq.BulkResult
		var err error
		if op == "delete" {
			r, err = h.c.DeleteJobs(ctx, t, state, ids[:n], redeq.Marks(marks))
		} else {
			r, err = h.c.RequeueJobs(ctx, t, state, ids[:n], 0, redeq.Marks(marks))
		}
		total.Done += r.Done
		total.Skipped += r.Skipped
		total.Changed += r.Changed
		if err != nil {
			return total, err
		}
		ids = ids[n:]
	}
	return total, nil
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

// bulk acts on the jobs ticked on a list (bulkOps says which actions a
// state offers): the first POST shows them for confirmation, the second
// (confirm=1) acts. Jobs that left the list meanwhile are skipped and
// counted.
func (h *handler) bulk(w http.ResponseWriter, r *http.Request) {
	t, state, opName := r.PostFormValue("t"), redeq.State(r.PostFormValue("state")), r.PostFormValue("op")
	if bulkOps(state) == nil {
		h.fail(w, r, http.StatusBadRequest, "Bulk actions apply to scheduled, ready, unack and dead jobs only.")
		return
	}
	verb, report, ok := bulkOp(state, opName)
	if !ok {
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
	marks := marksOf(r.PostForm)
	if r.PostFormValue("confirm") != "1" {
		fields := url.Values{"t": {t}, "state": {string(state)}, "op": {opName}}
		if ms := markFields(ids, marks); ms != nil {
			fields["mark"] = ms
		}
		h.render(w, r, http.StatusOK, "confirm.html", "Confirm", confirmData{
			Question: fmt.Sprintf("%s these %d %s jobs of topic %s?", verb, len(ids), state, t),
			Action:   "/bulk", Fields: fields,
			IDs: ids, Label: fmt.Sprintf("%s %d jobs", verb, len(ids)), Cancel: h.link("/topic", back),
		})
		return
	}
	res, err := h.act(r.Context(), t, state, opName, ids, marks)
	if err != nil {
		err = fmt.Errorf("%d of %d jobs done, then: %w", res.Done, len(ids), err)
		h.audit(r, "bulk-"+opName, t, res.Done, err, "state", string(state), "named", len(ids), "skipped", res.Skipped)
		h.apiFail(w, r, err)
		return
	}
	h.audit(r, "bulk-"+opName, t, res.Done, nil, "state", string(state), "named", len(ids), "skipped", res.Skipped, "changed", res.Changed)
	h.flash(w, r, outcome(report, res))
	http.Redirect(w, r, h.link("/topic", back), http.StatusSeeOther)
}

// filterForm is the filter of a "select all matching" form, as the topic
// page shows it and the confirmation repeats it.
type filterForm struct {
	Error, MinAttempt, DueBefore, DueAfter string
}

// maxFilterText bounds the error text a filter looks for.
const maxFilterText = 200

func filterFormOf(v url.Values) filterForm {
	return filterForm{Error: v.Get("error"), MinAttempt: v.Get("min_attempt"), DueBefore: v.Get("due_before"), DueAfter: v.Get("due_after")}
}

func (f filterForm) values() url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"error": f.Error, "min_attempt": f.MinAttempt, "due_before": f.DueBefore, "due_after": f.DueAfter} {
		if s != "" {
			v.Set(k, s)
		}
	}
	return v
}

// parse checks the form: a problem is a message for the page.
func (f filterForm) parse() (redeq.Filter, string) {
	var out redeq.Filter
	if len(f.Error) > maxFilterText {
		return out, fmt.Sprintf("The error text is longer than %d bytes.", maxFilterText)
	}
	out.ErrorContains = f.Error
	if f.MinAttempt != "" {
		n, err := strconv.Atoi(f.MinAttempt)
		if err != nil || n < 0 || n > 1_000_000 {
			return out, "Attempt at least: want a whole number from 0 to 1000000."
		}
		out.MinAttempt = n
	}
	for _, tf := range []struct {
		s, name string
		to      *time.Time
	}{{f.DueBefore, "Due before", &out.DueBefore}, {f.DueAfter, "Due after", &out.DueAfter}} {
		if tf.s == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339, tf.s)
		if err != nil {
			return out, tf.name + ": want an RFC 3339 time such as 2026-01-02T15:04:05Z."
		}
		*tf.to = t
	}
	if !out.DueBefore.IsZero() && !out.DueAfter.IsZero() && !out.DueAfter.Before(out.DueBefore) {
		return out, "Due after is not before due before: no job can match."
	}
	return out, ""
}

// describe is the filter in words, for the question: " with attempt >= 2".
func (f filterForm) describe() string {
	var parts []string
	if f.Error != "" {
		parts = append(parts, fmt.Sprintf("error containing %q", f.Error))
	}
	if f.MinAttempt != "" && f.MinAttempt != "0" {
		parts = append(parts, "attempt ≥ "+f.MinAttempt)
	}
	if f.DueAfter != "" {
		parts = append(parts, "due at or after "+f.DueAfter)
	}
	if f.DueBefore != "" {
		parts = append(parts, "due before "+f.DueBefore)
	}
	if len(parts) == 0 {
		return ""
	}
	return " with " + strings.Join(parts, ", ")
}

// bulkAll acts on every job of a state that matches the filter of the
// topic page's "all matching" form. The first POST takes the ids of the
// jobs that match (Select), keeps them in this handler's memory under a
// random token for selectionTTL, and asks, stating the count; the second
// (confirm=1, with the token) acts on exactly those ids: jobs that join
// the state while the question is open are left, those that left it are
// skipped and counted. A token expired, used, or made by another
// dashboard instance (behind a load balancer) is refused: ask again.
func (h *handler) bulkAll(w http.ResponseWriter, r *http.Request) {
	t, state, opName := r.PostFormValue("t"), redeq.State(r.PostFormValue("state")), r.PostFormValue("op")
	if bulkOps(state) == nil {
		h.fail(w, r, http.StatusBadRequest, "Bulk actions apply to scheduled, ready, unack and dead jobs only.")
		return
	}
	verb, report, ok := bulkOp(state, opName)
	if !ok {
		h.fail(w, r, http.StatusBadRequest, "Unknown action.")
		return
	}
	_ = r.ParseForm()
	ff := filterFormOf(r.PostForm)
	f, problem := ff.parse()
	if problem != "" {
		h.fail(w, r, http.StatusBadRequest, problem)
		return
	}
	back := url.Values{"t": {t}, "state": {string(state)}}
	ctx := r.Context()
	if r.PostFormValue("confirm") != "1" {
		ids, marks, err := h.c.SelectMarks(ctx, t, state, f, 0)
		if err != nil {
			h.apiFail(w, r, err)
			return
		}
		if len(ids) == 0 {
			h.flash(w, r, fmt.Sprintf("No %s job matches: nothing to do.", state))
			http.Redirect(w, r, h.link("/topic", back), http.StatusSeeOther)
			return
		}
		tok := h.sel.put(selection{topic: t, state: state, op: opName, ids: ids, marks: marks, filter: ff.describe()})
		fields := ff.values()
		fields.Set("t", t)
		fields.Set("state", string(state))
		fields.Set("op", opName)
		fields.Set("sel", tok)
		h.render(w, r, http.StatusOK, "confirm.html", "Confirm", confirmData{
			Question: fmt.Sprintf("%s all %d %s jobs of topic %s%s? Jobs that join after this question are left.", verb, len(ids), state, t, ff.describe()),
			Action:   "/bulkall", Fields: fields,
			Label: fmt.Sprintf("%s %d jobs", verb, len(ids)), Cancel: h.link("/topic", back),
		})
		return
	}
	sel, ok := h.sel.take(r.PostFormValue("sel"))
	if !ok || sel.topic != t || sel.state != state || sel.op != opName {
		h.fail(w, r, http.StatusBadRequest, fmt.Sprintf("This question expired (after %v), was answered already, or was asked of another dashboard instance: nothing done, ask again.", selectionTTL))
		return
	}
	res, err := h.act(ctx, t, state, opName, sel.ids, sel.marks)
	if err != nil {
		err = fmt.Errorf("%d of %d jobs done, then: %w", res.Done, len(sel.ids), err)
		h.audit(r, "bulkall-"+opName, t, res.Done, err, "state", string(state), "named", len(sel.ids), "skipped", res.Skipped, "filter", sel.filter)
		h.apiFail(w, r, err)
		return
	}
	h.audit(r, "bulkall-"+opName, t, res.Done, nil, "state", string(state), "named", len(sel.ids), "skipped", res.Skipped, "changed", res.Changed, "filter", sel.filter)
	h.flash(w, r, outcome(report, res))
	http.Redirect(w, r, h.link("/topic", back), http.StatusSeeOther)
}

// selectionTTL is how long an "all matching" question waits for its
// answer.
const selectionTTL = 10 * time.Minute

// maxSelections bounds the questions waiting for an answer; a new one
// pushes out the oldest.
const maxSelections = 8

// selection is the fixed set of ids an "all matching" question counted.
type selection struct {
	topic   string
	state   redeq.State
	op      string
	ids     []string
	marks   map[string]string // of the un_acked and dead jobs, by id
	filter  string
	expires time.Time
}

// selections keeps the questions waiting for their answer, in memory.
type selections struct {
	mu sync.Mutex
	m  map[string]selection
}

func (s *selections) put(sel selection) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	tok := hex.EncodeToString(b[:])
	now := time.Now()
	sel.expires = now.Add(selectionTTL)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[string]selection{}
	}
	for k, v := range s.m {
		if now.After(v.expires) {
			delete(s.m, k)
		}
	}
	for len(s.m) >= maxSelections {
		oldest := ""
		for k, v := range s.m {
			if oldest == "" || v.expires.Before(s.m[oldest].expires) {
				oldest = k
			}
		}
		delete(s.m, oldest)
	}
	s.m[tok] = sel
	return tok
}

// take returns the selection of tok and forgets it: a question is
// answered once.
func (s *selections) take(tok string) (selection, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sel, ok := s.m[tok]
	delete(s.m, tok)
	if !ok || time.Now().After(sel.expires) {
		return selection{}, false
	}
	return sel, true
}

// MaxPurge bounds the dead jobs one purge names (its confirmation page
// lists them); a larger dead set takes more than one purge.
const MaxPurge = redeq.MaxBulk

// purge removes dead jobs of a topic after a confirmation page that names
// them: at most MaxPurge of the dead set as List pages it, each with its
// mark. Its POST (confirm=1) removes those of the named jobs still dead as
// the page saw them, so jobs that die while the page is open stay, a job
// of a named id that died again (requeued, or added again) among them.
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
		ids, marks, err := h.deadIDs(ctx, t)
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
			Action:   "/purge", Fields: url.Values{"t": {t}, "mark": markFields(ids, marks)},
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
	marks := marksOf(r.PostForm)
	for _, id := range ids {
		if marks[id] == "" {
			h.fail(w, r, http.StatusBadRequest, fmt.Sprintf("Job %s is named without its mark: purge from the confirmation page.", id))
			return
		}
	}
	res, err := h.c.PurgeDeadJobs(ctx, t, ids, redeq.Marks(marks))
	if err != nil {
		err = fmt.Errorf("%d of %d jobs purged, then: %w", res.Done, len(ids), err)
		h.audit(r, "purge", t, res.Done, err, "state", string(redeq.StateDead), "named", len(ids))
		h.apiFail(w, r, err)
		return
	}
	h.audit(r, "purge", t, res.Done, nil, "state", string(redeq.StateDead), "named", len(ids), "skipped", res.Skipped, "changed", res.Changed)
	h.flash(w, r, outcome("%d dead jobs purged", res))
	http.Redirect(w, r, h.link("/topic", back), http.StatusSeeOther)
}

// deadIDs returns the ids of at most MaxPurge dead jobs of topic, in the
// order List pages them, and their marks.
func (h *handler) deadIDs(ctx context.Context, topic string) ([]string, map[string]string, error) {
	var ids []string
	marks := map[string]string{}
	seen := map[string]bool{}
	cursor := ""
	for len(ids) < MaxPurge {
		page, err := h.c.List(ctx, topic, redeq.StateDead, redeq.ListOptions{Limit: min(redeq.MaxListLimit, MaxPurge-len(ids)), Cursor: cursor})
		if err != nil {
			return nil, nil, err
		}
		for _, j := range page.Jobs {
			if !seen[j.ID] && len(ids) < MaxPurge {
				seen[j.ID] = true
				ids = append(ids, j.ID)
				marks[j.ID] = j.Mark()
			}
		}
		if page.Next == "" {
			break
		}
		cursor = page.Next
	}
	return ids, marks, nil
}

// outcome is the message of a bulk action: what it did, and the jobs it
// skipped (gone) or left (added or parked again since they were listed).
func outcome(f string, r redeq.BulkResult) string {
	s := fmt.Sprintf(f, r.Done)
	if r.Skipped > 0 {
		s += fmt.Sprintf("; %d skipped (no longer there)", r.Skipped)
	}
	if r.Changed > 0 {
		s += fmt.Sprintf("; %d left (added or parked again since listed)", r.Changed)
	}
	return s + "."
}

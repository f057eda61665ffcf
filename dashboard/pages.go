package dashboard

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redeq-go/redeq/redeq"
)

// states are the tabs of a topic page, in the order a job passes them.
var states = []redeq.State{redeq.StateScheduled, redeq.StateReady, redeq.StateInFlight, redeq.StateUnAck, redeq.StateDead}

// PreviewBytes is how much of a body the job page shows.
const PreviewBytes = 4096

// view is what every page's template receives.
type view struct {
	Base     string
	CSRF     string
	ReadOnly bool
	Title    string
	Msg      string
	D        any
}

// done maps an action's outcome code to its message, so the address bar
// carries no text of its own.
var done = map[string]string{
	"deleted":  "Job deleted.",
	"run":      "Job due now.",
	"requeued": "Job requeued, due now.",
	"paused":   "Topic paused: no listener fetches its jobs until it is resumed.",
	"resumed":  "Topic resumed.",
}

func parseTemplates() map[string]*template.Template {
	funcs := template.FuncMap{
		"time": func(t time.Time) string {
			if t.IsZero() {
				return "—"
			}
			return t.UTC().Format("2006-01-02 15:04:05.000Z")
		},
		"count":   func(st redeq.Stats, s redeq.State) int64 { return count(st, s) },
		"ops":     ops,
		"maxBulk": func() int { return MaxBulk },
		"btn": func(v view, op, t, id string, state any, back, label string, danger bool) button {
			return button{Base: v.Base, CSRF: v.CSRF, Op: op, T: t, ID: id, State: fmt.Sprint(state), Back: back, Label: label, Danger: danger}
		},
	}
	out := map[string]*template.Template{}
	for _, p := range []string{"overview.html", "topic.html", "job.html", "error.html", "confirm.html"} {
		out[p] = template.Must(template.New(p).Funcs(funcs).ParseFS(assets, "templates/layout.html", "templates/charts.html", "templates/"+p))
	}
	return out
}

func (h *handler) render(w http.ResponseWriter, r *http.Request, status int, page, title string, data any) {
	v := view{Base: h.opt.Path, ReadOnly: h.opt.ReadOnly, Title: title, Msg: message(r.URL.Query()), D: data}
	if !h.opt.ReadOnly {
		v.CSRF = h.csrfToken(w, r)
	}
	var buf bytes.Buffer
	if err := h.tmpl[page].ExecuteTemplate(&buf, "layout", v); err != nil {
		h.opt.Logger.Error("dashboard: render", "page", page, "err", err)
		http.Error(w, "render failed", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// apiFail answers a failed call with the status its error deserves.
func (h *handler) apiFail(w http.ResponseWriter, r *http.Request, err error) {
	status := http.StatusInternalServerError
	switch {
	case errors.Is(err, redeq.ErrJobNotFound), errors.Is(err, redeq.ErrUnknownTopic):
		status = http.StatusNotFound
	case errors.Is(err, redeq.ErrInvalidArgument), errors.Is(err, redeq.ErrInvalidJob):
		status = http.StatusBadRequest
	case errors.Is(err, redeq.ErrJobNotWaiting):
		status = http.StatusConflict
	case errors.Is(err, context.Canceled):
		return
	default:
		h.opt.Logger.Error("dashboard: redis call", "path", r.URL.Path, "err", err)
	}
	h.fail(w, r, status, err.Error())
}

type topicRow struct {
	redeq.TopicInfo
	Stats redeq.Stats
	Hour  redeq.Minute // the last hour, summed
	Err   string
}

type overviewData struct {
	Topics     []topicRow
	Total      int
	Prev, Next string
	Charts     charts // the topics of this page together
}

func (h *handler) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	topics, err := h.c.Topics(ctx)
	if err != nil {
		h.apiFail(w, r, err)
		return
	}
	// A page past the last shows the last; a bad or huge number, the first
	// or the last: the multiplication below never overflows.
	last := max(len(topics)-1, 0) / TopicsPerPage
	pg, err := strconv.Atoi(r.URL.Query().Get("page"))
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		pg = 0
	}
	pg = min(max(pg, 0), last)
	from := min(pg*TopicsPerPage, len(topics))
	to := min(from+TopicsPerPage, len(topics))
	d := overviewData{Total: len(topics)}
	since := time.Now().Add(-ChartWindow)
	var hist [][]redeq.Minute
	for _, t := range topics[from:to] {
		row := topicRow{TopicInfo: t}
		st, err := h.c.Stats(ctx, t.Name)
		if err == nil {
			var ms []redeq.Minute
			if ms, err = h.c.History(ctx, t.Name, since); err == nil {
				hist = append(hist, ms)
				row.Hour = redeq.SumMinutes(ms)
			}
		}
		if err != nil {
			row.Err = err.Error()
		}
		row.Stats = st
		d.Topics = append(d.Topics, row)
	}
	d.Charts = chartsOf(mergeMinutes(hist))
	if pg > 0 {
		d.Prev = h.link("/", url.Values{"page": {strconv.Itoa(pg - 1)}})
	}
	if to < len(topics) {
		d.Next = h.link("/", url.Values{"page": {strconv.Itoa(pg + 1)}})
	}
	h.render(w, r, http.StatusOK, "overview.html", "Topics", d)
}

type stateTab struct {
	State redeq.State
	Count int64
	Link  string
	On    bool
}

type topicData struct {
	Charts charts
	Topic  string
	State  redeq.State
	Stats  redeq.Stats
	Tabs   []stateTab
	Jobs   []*redeq.Job
	First  string
	Next   string
	Bulk   []op // actions on the jobs selected
}

func (h *handler) topic(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	name := q.Get("t")
	state := redeq.State(q.Get("state"))
	if state == "" {
		state = redeq.StateScheduled
	}
	ctx := r.Context()
	st, err := h.c.Stats(ctx, name)
	if err != nil {
		h.apiFail(w, r, err)
		return
	}
	page, err := h.c.List(ctx, name, state, redeq.ListOptions{Limit: h.opt.PageSize, Cursor: q.Get("cursor")})
	if err != nil {
		h.apiFail(w, r, err)
		return
	}
	ms, err := h.c.History(ctx, name, time.Now().Add(-ChartWindow))
	if err != nil {
		h.apiFail(w, r, err)
		return
	}
	d := topicData{Topic: name, State: state, Stats: st, Jobs: page.Jobs, Charts: chartsOf(ms), Bulk: bulkOps(state)}
	for _, s := range states {
		d.Tabs = append(d.Tabs, stateTab{State: s, Count: count(st, s), On: s == state,
			Link: h.link("/topic", url.Values{"t": {name}, "state": {string(s)}})})
	}
	if q.Get("cursor") != "" {
		d.First = h.link("/topic", url.Values{"t": {name}, "state": {string(state)}})
	}
	if page.Next != "" {
		d.Next = h.link("/topic", url.Values{"t": {name}, "state": {string(state)}, "cursor": {page.Next}})
	}
	h.render(w, r, http.StatusOK, "topic.html", name, d)
}

func count(st redeq.Stats, s redeq.State) int64 {
	switch s {
	case redeq.StateScheduled:
		return st.Scheduled
	case redeq.StateReady:
		return st.Ready
	case redeq.StateInFlight:
		return st.InFlight
	case redeq.StateUnAck:
		return st.UnAck
	case redeq.StateDead:
		return st.Dead
	}
	return 0
}

type jobData struct {
	Job  *redeq.Job
	Body preview
}

func (h *handler) job(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	j, err := h.c.Get(r.Context(), q.Get("t"), q.Get("id"))
	if err != nil {
		h.apiFail(w, r, err)
		return
	}
	h.render(w, r, http.StatusOK, "job.html", j.ID, jobData{Job: j, Body: bodyPreview(j.Body)})
}

// button is one action's form.
type button struct {
	Base, CSRF, Op, T, ID, State, Back, Label string
	Danger                                    bool
}

// op is an action a job's state allows.
type op struct {
	Name, Label string
	Danger      bool
}

func ops(j *redeq.Job) []op {
	var out []op
	switch j.State {
	case redeq.StateScheduled, redeq.StateReady:
		out = append(out, op{Name: "run", Label: "Run now"})
	case redeq.StateUnAck:
		out = append(out, op{Name: "requeue-unack", Label: "Requeue"})
	case redeq.StateDead:
		out = append(out, op{Name: "requeue-dead", Label: "Requeue"})
	}
	return append(out, op{Name: "delete", Label: "Delete", Danger: true})
}

func (h *handler) action(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	t, id := r.PostFormValue("t"), r.PostFormValue("id")
	back := url.Values{"t": {t}}
	if s := r.PostFormValue("state"); s != "" {
		back.Set("state", s)
	}
	var err error
	var code, page string
	switch r.PostFormValue("op") {
	case "delete":
		_, err = h.c.Delete(ctx, t, id)
		code, page = "deleted", "/topic"
	case "run":
		// Due now by the server's clock, which the movers go by: the
		// dashboard's own may be ahead of it.
		err = h.c.RescheduleIn(ctx, t, id, 0)
		code, page = "run", "/job"
	case "requeue-unack":
		err = h.c.RequeueUnAck(ctx, t, id, 0)
		code, page = "requeued", "/job"
	case "requeue-dead":
		err = h.c.RequeueDead(ctx, t, id, 0)
		code, page = "requeued", "/job"
	case "pause":
		err = h.c.Pause(ctx, t)
		code, page = "paused", "/topic"
	case "resume":
		err = h.c.Resume(ctx, t)
		code, page = "resumed", "/topic"
	default:
		h.fail(w, r, http.StatusBadRequest, "Unknown action.")
		return
	}
	if err != nil {
		h.apiFail(w, r, err)
		return
	}
	if page == "/job" {
		back = url.Values{"t": {t}, "id": {id}}
	}
	if r.PostFormValue("back") == "overview" {
		page, back = "/", url.Values{}
	}
	back.Set("done", code)
	http.Redirect(w, r, h.link(page, back), http.StatusSeeOther)
}

// preview is a body as the job page shows it: text when it is printable
// UTF-8, else a hex dump; at most PreviewBytes of it.
type preview struct {
	Text  string
	Hex   bool
	Size  int
	Shown int
}

func bodyPreview(b []byte) preview {
	shown := b[:min(len(b), PreviewBytes)]
	// Do not call a text binary because the cut split its last rune.
	for i := 0; i < utf8.UTFMax-1 && len(shown) < len(b) && !utf8.Valid(shown) && len(shown) > 0; i++ {
		shown = shown[:len(shown)-1]
	}
	p := preview{Size: len(b), Shown: len(shown)}
	if printable(shown) {
		p.Text = string(shown)
	} else {
		p.Hex, p.Text = true, hex.Dump(shown)
	}
	return p
}

// printable reports whether b is UTF-8 text a person can read.
func printable(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if !unicode.IsPrint(r) && r != '\n' && r != '\r' && r != '\t' {
			return false
		}
	}
	return true
}

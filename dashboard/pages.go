package dashboard

import (
	"bytes"
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/redeq-go/redeq/redeq"
)

// states are the tabs of a topic page, in the order a job passes them.
// Done lists what a topic with retention keeps of its acked jobs.
var states = []redeq.State{redeq.StateScheduled, redeq.StateReady, redeq.StateInFlight, redeq.StateUnAck, redeq.StateDead, redeq.StateDone}

// retryingReads bounds the List pages one page of the retrying view reads.
const retryingReads = 10

// retrying is a page of the retrying view: the scheduled jobs of topic
// that failed before (attempt > 0), read from at most retryingReads List
// pages, so that a page may hold fewer jobs than the page size (or none)
// while there are more.
func (h *handler) retrying(ctx context.Context, topic, cursor string) (redeq.Page, error) {
	var out redeq.Page
	for range retryingReads {
		p, err := h.c.List(ctx, topic, redeq.StateScheduled, redeq.ListOptions{Limit: h.opt.PageSize, Cursor: cursor, DueOrder: true})
		if err != nil {
			return redeq.Page{}, err
		}
		for _, j := range p.Jobs {
			if j.Attempt > 0 {
				out.Jobs = append(out.Jobs, j)
			}
		}
		out.Next, cursor = p.Next, p.Next
		if p.Next == "" || len(out.Jobs) >= h.opt.PageSize {
			break
		}
	}
	return out, nil
}

// PreviewBytes is how much of a body the job page shows.
const PreviewBytes = 4096

// view is what every page's template receives.
type view struct {
	Base     string
	CSRF     string
	ReadOnly bool
	Title    string
	Msg      string // the outcome of the last action, from its signed flash
	D        any
	// Refresh is the auto-refresh period in seconds, 0 when off; the
	// links turn it on and off (pages that offer it only).
	Refresh               int
	RefreshOn, RefreshOff string
}

// The bounds of ?refresh=N, in seconds.
const (
	DefaultRefresh = 10
	MinRefresh     = 2
	MaxRefresh     = 3600
)

// refreshOf returns the auto-refresh period q asks for: 0 (off) when it
// is absent or not a number, else bounded to MinRefresh..MaxRefresh.
func refreshOf(q url.Values) int {
	n, err := strconv.Atoi(q.Get("refresh"))
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0
	}
	if n <= 0 {
		return 0
	}
	return min(max(n, MinRefresh), MaxRefresh)
}

// refreshable are the pages that offer auto-refresh: those that only read.
var refreshable = map[string]bool{"overview.html": true, "topic.html": true, "job.html": true, "consumers.html": true, "redis.html": true, "schedules.html": true}

func parseTemplates() map[string]*template.Template {
	funcs := template.FuncMap{
		"time": func(t time.Time) string {
			if t.IsZero() {
				return "—"
			}
			return t.UTC().Format("2006-01-02 15:04:05.000Z")
		},
		"count": func(st redeq.Stats, s redeq.State) int64 { return count(st, s) },
		"ago": func(d time.Duration) string {
			if d <= 0 {
				return "—"
			}
			return ago(d)
		},
		"ops":    ops,
		"uptime": uptime,
		// since is how long ago t was, by this process's clock: an
		// in-flight job's running time from its fetch time (Redis clock),
		// off by the clocks' skew.
		"since": func(t time.Time) time.Duration {
			if t.IsZero() {
				return 0
			}
			return time.Since(t)
		},
		"bytes":   bytesIEC,
		"maxBulk": func() int { return MaxBulk },
		"btn": func(v view, op, t, id string, state any, back, label string, danger bool) button {
			return button{Base: v.Base, CSRF: v.CSRF, Op: op, T: t, ID: id, State: fmt.Sprint(state), Back: back, Label: label, Danger: danger}
		},
		"sbtn": func(v view, op, name, label string, danger bool) button {
			return button{Base: v.Base, CSRF: v.CSRF, Op: op, ID: name, Label: label, Danger: danger}
		},
	}
	out := map[string]*template.Template{}
	for _, p := range []string{"overview.html", "topic.html", "job.html", "error.html", "confirm.html", "consumers.html", "redis.html", "schedules.html"} {
		out[p] = template.Must(template.New(p).Funcs(funcs).ParseFS(assets, "templates/layout.html", "templates/charts.html", "templates/"+p))
	}
	return out
}

func (h *handler) render(w http.ResponseWriter, r *http.Request, status int, page, title string, data any) {
	v := view{Base: h.opt.Path, ReadOnly: h.opt.ReadOnly, Title: title, Msg: h.takeFlash(w, r), D: data}
	if refreshable[page] && status == http.StatusOK {
		q := r.URL.Query()
		v.Refresh = refreshOf(q)
		if v.Refresh > 0 {
			q.Set("refresh", strconv.Itoa(v.Refresh))
		} else {
			q.Set("refresh", strconv.Itoa(DefaultRefresh))
		}
		v.RefreshOn = h.link(r.URL.Path, q)
		q.Del("refresh")
		v.RefreshOff = h.link(r.URL.Path, q)
	}
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
	case errors.Is(err, redeq.ErrJobNotFound), errors.Is(err, redeq.ErrUnknownTopic), errors.Is(err, redeq.ErrScheduleNotFound):
		status = http.StatusNotFound
	case errors.Is(err, redeq.ErrInvalidArgument), errors.Is(err, redeq.ErrInvalidJob), errors.Is(err, redeq.ErrInvalidSchedule):
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
	Stats   redeq.Stats
	Hour    redeq.Minute  // the last hour, summed
	Overdue time.Duration // of its oldest due job not started, 0 when none
	Err     string
}

// Unattended reports a topic with due work (ready jobs, or a job past its
// due time) and no consumer to run it.
func (r topicRow) Unattended() bool { return unattended(r.Stats, r.Overdue) }

func unattended(st redeq.Stats, overdue time.Duration) bool {
	return st.Consumers == 0 && (st.Ready > 0 || overdue > 0)
}

type sortLink struct {
	Key, Label, Link string
	On               bool
}

type overviewData struct {
	Topics     []topicRow
	Total      int // topics of the prefix
	Matched    int // of those, the ones the search matches
	Query      string
	Sort       string
	Sorts      []sortLink
	Refresh    int
	Note       string
	Prev, Next string
	Charts     charts // the topics of this page together
}

// The overview's sort orders: by name, or the topics with the most of a
// figure first.
var sortKeys = []struct{ Key, Label string }{{"name", "name"}, {"ready", "ready"}, {"dead", "dead"}, {"overdue", "overdue"}}

// MaxSorted bounds the topics the overview reads to sort by a figure (one
// Stats call each); past it the overview sorts by name and says so.
const MaxSorted = 1000

// MaxQuery bounds the length of the overview's topic search.
const MaxQuery = 200

func (h *handler) overview(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	q := r.URL.Query()
	all, err := h.c.Topics(ctx)
	if err != nil {
		h.apiFail(w, r, err)
		return
	}
	d := overviewData{Total: len(all), Query: q.Get("q"), Sort: q.Get("sort"), Refresh: refreshOf(q)}
	if len(d.Query) > MaxQuery {
		h.fail(w, r, http.StatusBadRequest, fmt.Sprintf("The search is %d bytes long: at most %d.", len(d.Query), MaxQuery))
		return
	}
	topics := all
	if d.Query != "" {
		topics = nil
		needle := strings.ToLower(d.Query)
		for _, t := range all {
			if strings.Contains(strings.ToLower(t.Name), needle) {
				topics = append(topics, t)
			}
		}
	}
	d.Matched = len(topics)
	switch d.Sort {
	case "ready", "dead", "overdue":
		if len(topics) > MaxSorted {
			d.Note = fmt.Sprintf("Sorted by name: sorting by %s reads every topic, and %d topics match (at most %d).", d.Sort, len(topics), MaxSorted)
			d.Sort = "name"
		}
	default:
		d.Sort = "name"
	}
	// keep builds a link of this view with some parameters changed.
	keep := func(set ...string) string {
		v := url.Values{}
		if d.Query != "" {
			v.Set("q", d.Query)
		}
		if d.Sort != "name" {
			v.Set("sort", d.Sort)
		}
		if d.Refresh > 0 {
			v.Set("refresh", strconv.Itoa(d.Refresh))
		}
		for i := 0; i+1 < len(set); i += 2 {
			if set[i+1] == "" {
				v.Del(set[i])
			} else {
				v.Set(set[i], set[i+1])
			}
		}
		return h.link("/", v)
	}
	for _, k := range sortKeys {
		key := k.Key
		if key == "name" {
			key = ""
		}
		d.Sorts = append(d.Sorts, sortLink{Key: k.Key, Label: k.Label, On: k.Key == d.Sort, Link: keep("sort", key)})
	}
	// A page past the last shows the last; a bad or huge number, the first
	// or the last: the multiplication below never overflows.
	last := max(len(topics)-1, 0) / TopicsPerPage
	pg, err := strconv.Atoi(q.Get("page"))
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		pg = 0
	}
	pg = min(max(pg, 0), last)
	from := min(pg*TopicsPerPage, len(topics))
	to := min(from+TopicsPerPage, len(topics))
	// Sorting by a figure reads every matching topic; by name, the page's.
	read := topics[from:to]
	if d.Sort != "name" {
		read = topics
	}
	rows := make([]topicRow, 0, len(read))
	names := make([]string, 0, len(read))
	for _, t := range read {
		row := topicRow{TopicInfo: t}
		row.Stats, err = h.c.Stats(ctx, t.Name)
		if err != nil {
			row.Err = err.Error()
		}
		rows = append(rows, row)
		names = append(names, t.Name)
	}
	overdue, err := h.c.OldestOverdue(ctx, names...)
	if err != nil {
		h.apiFail(w, r, err)
		return
	}
	for i := range rows {
		rows[i].Overdue = overdue[rows[i].Name]
	}
	if d.Sort != "name" {
		figure := func(r topicRow) int64 {
			switch d.Sort {
			case "ready":
				return r.Stats.Ready
			case "dead":
				return r.Stats.Dead
			}
			return int64(r.Overdue)
		}
		slices.SortStableFunc(rows, func(a, b topicRow) int { return cmp.Compare(figure(b), figure(a)) })
		rows = rows[from:to]
	}
	since := time.Now().Add(-ChartWindow)
	var hist [][]redeq.Minute
	for i := range rows {
		if rows[i].Err != "" {
			continue
		}
		ms, err := h.c.History(ctx, rows[i].Name, since)
		if err != nil {
			rows[i].Err = err.Error()
			continue
		}
		hist = append(hist, ms)
		rows[i].Hour = redeq.SumMinutes(ms)
	}
	d.Topics = rows
	d.Charts = chartsOf(mergeMinutes(hist))
	if pg > 0 {
		d.Prev = keep("page", strconv.Itoa(pg-1))
	}
	if to < len(topics) {
		d.Next = keep("page", strconv.Itoa(pg+1))
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
	// Retrying says the page lists the scheduled jobs that failed before
	// (attempt > 0) only; RetryingLink opens that view.
	Retrying     bool
	RetryingLink string
	Charts       charts
	Topic        string
	State        redeq.State
	Stats        redeq.Stats
	Tabs         []stateTab
	Jobs         []*redeq.Job
	First        string
	Next         string
	Bulk         []op // actions on the jobs selected
	// Overdue is how long ago the topic's oldest due job not started fell
	// due (the server's clock), 0 when none.
	Overdue time.Duration
}

// Unattended reports due work and no consumer to run it.
func (d topicData) Unattended() bool { return unattended(d.Stats, d.Overdue) }

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
	retrying := state == redeq.StateScheduled && q.Get("view") == "retrying"
	var page redeq.Page
	if retrying {
		page, err = h.retrying(ctx, name, q.Get("cursor"))
	} else {
		page, err = h.c.List(ctx, name, state, redeq.ListOptions{Limit: h.opt.PageSize, Cursor: q.Get("cursor"), DueOrder: true})
	}
	if err != nil {
		h.apiFail(w, r, err)
		return
	}
	ms, err := h.c.History(ctx, name, time.Now().Add(-ChartWindow))
	if err != nil {
		h.apiFail(w, r, err)
		return
	}
	overdue, err := h.c.OldestOverdue(ctx, name)
	if err != nil {
		h.apiFail(w, r, err)
		return
	}
	d := topicData{Topic: name, State: state, Stats: st, Jobs: page.Jobs, Charts: chartsOf(ms), Bulk: bulkOps(state), Overdue: overdue[name], Retrying: retrying}
	// The links keep the auto-refresh on.
	link := func(v url.Values) string {
		if n := refreshOf(q); n > 0 {
			v.Set("refresh", strconv.Itoa(n))
		}
		return h.link("/topic", v)
	}
	for _, s := range states {
		d.Tabs = append(d.Tabs, stateTab{State: s, Count: count(st, s), On: s == state && !retrying,
			Link: link(url.Values{"t": {name}, "state": {string(s)}})})
	}
	d.RetryingLink = link(url.Values{"t": {name}, "state": {string(redeq.StateScheduled)}, "view": {"retrying"}})
	here := url.Values{"t": {name}, "state": {string(state)}}
	if retrying {
		here.Set("view", "retrying")
	}
	if q.Get("cursor") != "" {
		d.First = link(here)
	}
	if page.Next != "" {
		next := url.Values{"cursor": {page.Next}}
		for k, v := range here {
			next[k] = v
		}
		d.Next = link(next)
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
	case redeq.StateDone:
		return -1 // not counted: the tab shows none
	}
	return 0
}

type jobData struct {
	Job   *redeq.Job
	Body  preview
	Story story
}

func (h *handler) job(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	j, err := h.c.Get(r.Context(), q.Get("t"), q.Get("id"))
	if err != nil {
		h.apiFail(w, r, err)
		return
	}
	cfg := h.c.Config()
	h.render(w, r, http.StatusOK, "job.html", j.ID, jobData{Job: j, Body: bodyPreview(j.Body), Story: storyOf(j, cfg.Retry, cfg.RetryIntervals)})
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
	case redeq.StateDone:
		return nil // a record of the past: nothing to act on
	case redeq.StateScheduled, redeq.StateReady:
		out = append(out, op{Name: "run", Label: "Run now"})
	case redeq.StateUnAck:
		out = append(out, op{Name: "requeue-unack", Label: "Requeue"})
	case redeq.StateDead:
		out = append(out, op{Name: "requeue-dead", Label: "Requeue"})
	}
	return append(out, op{Name: "delete", Label: "Delete", Danger: true})
}

// confirmed are the actions that ask first: they destroy a job, or act on
// the whole fleet of a topic at once.
var confirmed = map[string]struct{ Question, Label string }{
	"delete": {"Delete job %[2]s of topic %[1]s, for good?", "Delete job %[2]s"},
	"pause":  {"Pause topic %[1]s? No listener of any consumer fetches its jobs until it is resumed.", "Pause %[1]s"},
	"resume": {"Resume topic %[1]s? Every consumer's listeners fetch its jobs again.", "Resume %[1]s"},
}

func (h *handler) action(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	opName, t, id := r.PostFormValue("op"), r.PostFormValue("t"), r.PostFormValue("id")
	back := url.Values{"t": {t}}
	if s := r.PostFormValue("state"); s != "" {
		back.Set("state", s)
	}
	if c, ok := confirmed[opName]; ok && r.PostFormValue("confirm") != "1" {
		cancel := h.link("/topic", back)
		if r.PostFormValue("back") == "overview" {
			cancel = h.link("/", nil)
		} else if opName == "delete" {
			cancel = h.link("/job", url.Values{"t": {t}, "id": {id}})
		}
		fields := url.Values{"op": {opName}, "t": {t}, "state": {r.PostFormValue("state")}, "back": {r.PostFormValue("back")}}
		var ids []string
		if opName == "delete" {
			ids = []string{id}
		}
		h.render(w, r, http.StatusOK, "confirm.html", "Confirm", confirmData{
			Question: fmt.Sprintf(c.Question, t, id), Action: "/action", Fields: fields, IDs: ids,
			Label: fmt.Sprintf(c.Label, t, id), Cancel: cancel,
		})
		return
	}
	var err error
	var msg, page string
	switch opName {
	case "delete":
		_, err = h.c.Delete(ctx, t, id)
		msg, page = "Job "+id+" deleted.", "/topic"
	case "run":
		// Due now by the server's clock, which the movers go by: the
		// dashboard's own may be ahead of it.
		err = h.c.RescheduleIn(ctx, t, id, 0)
		msg, page = "Job due now.", "/job"
	case "requeue-unack":
		err = h.c.RequeueUnAck(ctx, t, id, 0)
		msg, page = "Job requeued, due now.", "/job"
	case "requeue-dead":
		err = h.c.RequeueDead(ctx, t, id, 0)
		msg, page = "Job requeued, due now.", "/job"
	case "pause":
		err = h.c.Pause(ctx, t)
		msg, page = "Topic "+t+" paused: no listener fetches its jobs until it is resumed.", "/topic"
	case "resume":
		err = h.c.Resume(ctx, t)
		msg, page = "Topic "+t+" resumed.", "/topic"
	default:
		h.fail(w, r, http.StatusBadRequest, "Unknown action.")
		return
	}
	jobs := 0
	if id != "" && err == nil {
		jobs = 1
	}
	if id != "" {
		h.audit(r, opName, t, jobs, err, "job", id)
	} else {
		h.audit(r, opName, t, jobs, err)
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
	h.flash(w, r, msg)
	http.Redirect(w, r, h.link(page, back), http.StatusSeeOther)
}

// ago prints how long ago something fell due, to the second.
func ago(d time.Duration) string {
	if d < time.Second {
		return duration(d)
	}
	return d.Round(time.Second).String()
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

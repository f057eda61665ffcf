package dashboard

import (
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"

	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"

	"github.com/redeq-go/redeq/redeq"
)

// The bounds of a topic page.
const (
	DefaultPageSize = 50
	MaxPageSize     = 100
	// TopicsPerPage is how many topics the overview counts at once: one
	// Stats call each.
	TopicsPerPage = 50
)

// Options secure and place the dashboard.
type Options struct {
	// Token, when set, is required of every request: as the header
	// "Authorization: Bearer <token>", or once as ?token=<token>, which
	// the dashboard then keeps in an HttpOnly cookie.
	Token string
	// Username and Password, when Username is set, are required as HTTP
	// Basic authentication. With Token as well, both are required.
	Username, Password string
	// ReadOnly refuses every action (any method but GET and HEAD) with
	// 403 Forbidden, and hides the buttons.
	ReadOnly bool
	// Path is where the handler is mounted, such as "/redeq" for
	// http.Handle("/redeq/", h); it builds the links and the cookies'
	// path. Defaults to the root.
	Path string
	// PageSize is how many jobs a topic page lists, 1..MaxPageSize.
	// Defaults to DefaultPageSize (50).
	PageSize int
	// Logger records failed Redis calls, and one audit line per action
	// taken (who, what, topic, how many, result). Defaults to
	// slog.Default().
	Logger *slog.Logger
}

const (
	tokenCookie = "redeq_token"
	csrfCookie  = "redeq_csrf"
	flashCookie = "redeq_flash"
	csrfField   = "csrf"
)

//go:embed templates/*.html static/*
var assets embed.FS

type handler struct {
	c    *redeq.Client
	opt  Options
	mux  *http.ServeMux
	cop  *http.CrossOriginProtection
	tmpl map[string]*template.Template
	key  [32]byte // signs the flash messages: random per handler
	sel  selections
}

// New returns the dashboard of c's topics. Options out of range take their
// defaults.
func New(c *redeq.Client, opt Options) http.Handler {
	opt.Path = strings.TrimRight(opt.Path, "/")
	if opt.Path != "" && !strings.HasPrefix(opt.Path, "/") {
		opt.Path = "/" + opt.Path
	}
	if opt.PageSize <= 0 || opt.PageSize > MaxPageSize {
		opt.PageSize = DefaultPageSize
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	h := &handler{c: c, opt: opt, mux: http.NewServeMux(), cop: http.NewCrossOriginProtection(), tmpl: parseTemplates()}
	_, _ = rand.Read(h.key[:])
	static, _ := fs.Sub(assets, "static")
	h.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	h.mux.HandleFunc("GET /{$}", h.overview)
	h.mux.HandleFunc("GET /topic", h.topic)
	h.mux.HandleFunc("GET /job", h.job)
	h.mux.HandleFunc("GET /consumers", h.consumers)
	h.mux.HandleFunc("GET /redis", h.redis)
	h.mux.HandleFunc("POST /action", h.action)
	h.mux.HandleFunc("POST /bulk", h.bulk)
	h.mux.HandleFunc("POST /bulkall", h.bulkAll)
	h.mux.HandleFunc("POST /purge", h.purge)
	h.mux.HandleFunc("GET /schedules", h.schedules)
	h.mux.HandleFunc("POST /schedule", h.scheduleAction)
	return h
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	// No script runs on these pages, so none may: an escaping bug in a
	// template still could not run a job body.
	hd.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("Cache-Control", "no-store")

	p := r.URL.Path
	if h.opt.Path != "" {
		if p != h.opt.Path && !strings.HasPrefix(p, h.opt.Path+"/") {
			http.NotFound(w, r)
			return
		}
		p = strings.TrimPrefix(p, h.opt.Path)
		if p == "" {
			p = "/"
		}
	}
	if !h.authorized(w, r) {
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		if h.opt.ReadOnly {
			h.fail(w, r, http.StatusForbidden, "The dashboard is read-only.")
			return
		}
		if err := h.cop.Check(r); err != nil {
			h.fail(w, r, http.StatusForbidden, "Cross-origin request refused.")
			return
		}
		if !h.csrfOK(r) {
			h.fail(w, r, http.StatusForbidden, "Missing or wrong CSRF token: reload the page and try again.")
			return
		}
	}
	r2 := r.Clone(r.Context())
	r2.URL.Path = p
	r2.URL.RawPath = ""
	h.mux.ServeHTTP(w, r2)
}

// authorized checks the configured credentials, answering 401 itself when
// they are missing or wrong.
func (h *handler) authorized(w http.ResponseWriter, r *http.Request) bool {
	if h.opt.Username != "" {
		u, p, ok := r.BasicAuth()
		if !ok || !equal(u, h.opt.Username) || !equal(p, h.opt.Password) {
			w.Header().Set("WWW-Authenticate", `Basic realm="redeq", charset="UTF-8"`)
			h.fail(w, r, http.StatusUnauthorized, "Authentication required.")
			return false
		}
	}
	if h.opt.Token == "" {
		return true
	}
	if a, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && equal(a, h.opt.Token) {
		return true
	}
	if c, err := r.Cookie(tokenCookie); err == nil && equal(c.Value, h.opt.Token) {
		return true
	}
	if q := r.URL.Query(); r.Method == http.MethodGet && q.Has("token") && equal(q.Get("token"), h.opt.Token) {
		// Keep the token in a cookie and drop it from the address bar and
		// the history.
		http.SetCookie(w, h.cookie(r, tokenCookie, h.opt.Token))
		q.Del("token")
		u := *r.URL
		u.RawQuery = q.Encode()
		http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
		return false
	}
	h.fail(w, r, http.StatusUnauthorized, "A token is required: open the dashboard with ?token=<token>.")
	return false
}

func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

func (h *handler) cookie(r *http.Request, name, value string) *http.Cookie {
	path := h.opt.Path
	if path == "" {
		path = "/"
	}
	return &http.Cookie{Name: name, Value: value, Path: path, HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode}
}

// csrfToken returns the browser session's CSRF token, setting its cookie
// when the browser has none yet.
func (h *handler) csrfToken(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) == 64 {
		return c.Value
	}
	var b [32]byte
	_, _ = rand.Read(b[:])
	tok := hex.EncodeToString(b[:])
	http.SetCookie(w, h.cookie(r, csrfCookie, tok))
	return tok
}

// csrfOK checks the double submit: the form's token must be the cookie's,
// which another site can neither read nor set.
func (h *handler) csrfOK(r *http.Request) bool {
	c, err := r.Cookie(csrfCookie)
	if err != nil || c.Value == "" {
		return false
	}
	return equal(r.PostFormValue(csrfField), c.Value)
}

// link builds a dashboard address from a page and its query.
func (h *handler) link(page string, q url.Values) string {
	s := h.opt.Path + page
	if len(q) > 0 {
		s += "?" + q.Encode()
	}
	return s
}

func (h *handler) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	h.render(w, r, status, "error.html", http.StatusText(status), errorData{Status: status, Message: msg})
}

type errorData struct {
	Status  int
	Message string
}

package dashboard

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"log/slog"
	"net/http"
	"strings"
	"time"
)

// flashAge is how long the outcome of an action waits for the page that
// shows it.
const flashAge = time.Minute

// flash records the outcome of an action for the next page the browser
// loads: a short-lived cookie holding the message and the handler's HMAC
// of it, so that no address, link or other site can make the dashboard
// claim an outcome it did not produce.
func (h *handler) flash(w http.ResponseWriter, r *http.Request, msg string) {
	c := h.cookie(r, flashCookie, base64.RawURLEncoding.EncodeToString([]byte(msg))+"."+h.sign(msg))
	c.MaxAge = int(flashAge / time.Second)
	http.SetCookie(w, c)
}

// takeFlash returns the message flash recorded, if its signature is this
// handler's, and clears it so that it shows once.
func (h *handler) takeFlash(w http.ResponseWriter, r *http.Request) string {
	c, err := r.Cookie(flashCookie)
	if err != nil {
		return ""
	}
	clear := h.cookie(r, flashCookie, "")
	clear.MaxAge = -1
	http.SetCookie(w, clear)
	enc, sig, ok := strings.Cut(c.Value, ".")
	if !ok {
		return ""
	}
	b, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil || !hmac.Equal([]byte(sig), []byte(h.sign(string(b)))) {
		return ""
	}
	return string(b)
}

func (h *handler) sign(msg string) string {
	m := hmac.New(sha256.New, h.key[:])
	m.Write([]byte("redeq flash\x00" + msg))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// who names the person behind a request for the audit log: the Basic-auth
// user, else "token" when a token let it in, else "anonymous" (an open
// dashboard).
func (h *handler) who(r *http.Request) string {
	if h.opt.Username != "" {
		if u, _, ok := r.BasicAuth(); ok {
			return u
		}
	}
	if h.opt.Token != "" {
		return "token"
	}
	return "anonymous"
}

// audit logs one action taken: who, what, on which topic, how many jobs,
// and its result ("ok" or the error).
func (h *handler) audit(r *http.Request, action, topic string, jobs int, err error, extra ...any) {
	result := "ok"
	level := slog.LevelInfo
	if err != nil {
		result, level = "error: "+err.Error(), slog.LevelWarn
	}
	args := append([]any{"who", h.who(r), "remote", r.RemoteAddr, "action", action, "topic", topic, "jobs", jobs, "result", result}, extra...)
	h.opt.Logger.Log(r.Context(), level, "dashboard: action", args...)
}

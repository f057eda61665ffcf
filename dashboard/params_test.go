package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/dashboard"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestOverviewPageBounds: a page number past the last, negative, huge or
// not a number shows a page of topics, never a crash or an empty page
// beside a topic count.
func TestOverviewPageBounds(t *testing.T) {
	e := setup(t, testutil.Backends(t)[0], dashboard.Options{})
	for i := range dashboard.TopicsPerPage + 3 {
		add(t, e.c, fmt.Sprintf("bounds%02d", i), "a", "x", time.Hour)
	}
	for _, page := range []string{"0", "1", "2", "99999", "9223372036854775807", "99999999999999999999", "-1", "-9223372036854775808", "x", ""} {
		code, body := e.get(t, "/?page="+url.QueryEscape(page))
		require.Equal(t, http.StatusOK, code, "page %q: %s", page, body)
		require.Contains(t, body, "bounds", "page %q lists topics", page)
	}
	_, last := e.get(t, "/?page=99999")
	require.Contains(t, last, fmt.Sprintf("bounds%02d", dashboard.TopicsPerPage+2), "a page past the last shows the last")
}

// FuzzPageParams: no query string makes a page crash or answer 5xx; each
// GET page parses its parameters with bounds.
func FuzzPageParams(f *testing.F) {
	m := miniredis.NewMiniRedis()
	if err := m.Start(); err != nil {
		f.Fatal(err)
	}
	defer m.Close()
	if err := testutil.AddBitfield(m); err != nil {
		f.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	cfg := testutil.Fast()
	cfg.Prefix = "fuzz"
	c, err := redeq.New(rdb, cfg)
	if err != nil {
		f.Fatal(err)
	}
	ctx := context.Background()
	for i := range 3 {
		if err := c.Add(ctx, &redeq.Job{Topic: "fz", ID: fmt.Sprint(i), Body: []byte("b"), Delay: time.Hour}); err != nil {
			f.Fatal(err)
		}
	}
	h := dashboard.New(c, dashboard.Options{})
	for _, seed := range []string{"page=9223372036854775807", "page=-1", "t=fz&state=scheduled&cursor=zz", "t=fz&id=0", "t=%00&state=dead", "t=fz&state=bogus", "cursor=" + strings.Repeat("A", 5000), "q=fz&sort=overdue&page=9223372036854775807", "sort=dead&q=%00", "refresh=-9223372036854775808", "refresh=99999999999999999999&q=" + strings.Repeat("x", 300)} {
		f.Add("/", seed)
		f.Add("/topic", seed)
		f.Add("/job", seed)
	}
	f.Fuzz(func(t *testing.T, path, query string) {
		if path != "/" && path != "/topic" && path != "/job" {
			return
		}
		req := httptest.NewRequest(http.MethodGet, "http://dash.local"+path, nil)
		req.URL.RawQuery = query
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("GET %s?%s: %d %s", path, query, rec.Code, rec.Body.String())
		}
	})
}

package dashboard_test

import (
	"context"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/dashboard"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestLatenessPastTheTopBoundSaysAtLeast: a lateness past the histogram's
// last bound (60 s) is shown as "at least" that bound, never as the
// figure itself.
func TestLatenessPastTheTopBoundSaysAtLeast(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := setup(t, b, dashboard.Options{})
			require.NoError(t, e.c.Add(context.Background(), &redeq.Job{Topic: "orders", ID: "late", Body: []byte("x"), RunAt: time.Now().Add(-10 * time.Minute)}))
			work(t, b, e.c, "late")
			code, page := e.get(t, "/topic?t=orders")
			require.Equal(t, http.StatusOK, code)
			m := regexp.MustCompile(`<span id="p99">([^<]*)</span>`).FindStringSubmatch(page)
			require.NotNil(t, m)
			require.Equal(t, "≥ 60.00s", m[1])
		})
	}
}

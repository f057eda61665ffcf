package main

import (
	"context"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
)

// startDashboard runs `redeq dashboard` with args until the test ends and
// returns its address and its standard error.
func startDashboard(t *testing.T, e *cliEnv, args ...string) (string, *syncBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb syncBuffer
	codec := make(chan int, 1)
	all := append([]string{"--redis", e.url, "--prefix", e.prefix, "dashboard", "--addr", "127.0.0.1:0"}, args...)
	go func() { codec <- run(ctx, all, nil, &out, &errb) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-codec:
		case <-time.After(10 * time.Second):
			t.Error("the dashboard did not stop")
		}
	})
	re := regexp.MustCompile(`dashboard on (http://\S+)`)
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case code := <-codec:
			t.Fatalf("dashboard exited with %d: %s", code, errb.String())
		default:
		}
		if m := re.FindStringSubmatch(out.String()); m != nil {
			return m[1], &errb
		}
		require.True(t, time.Now().Before(deadline), "the dashboard never said where it listens")
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCLIDashboardOptions: a page size out of bounds and a user name
// without a password are usage errors; Basic authentication guards every
// page; a dashboard that anyone may act on says so when it starts.
func TestCLIDashboardOptions(t *testing.T) {
	e := newEnv(t, testutil.Backends(t)[0])
	e.ok(t, "add", "--create", "orders", "1", "--delay", "1h")
	t.Run("PageSizeBounded", func(t *testing.T) {
		for _, n := range []string{"0", "101", "500", "-3"} {
			code, _, errs := e.run(t, "", "dashboard", "--addr", "127.0.0.1:0", "--page-size", n)
			require.Equal(t, exitUsage, code, errs)
			require.Contains(t, errs, "--page-size "+n+": want 1 to 100")
		}
	})
	t.Run("UsernameNeedsPassword", func(t *testing.T) {
		t.Setenv("REDEQ_DASHBOARD_PASSWORD", "")
		code, _, errs := e.run(t, "", "dashboard", "--addr", "127.0.0.1:0", "--username", "ops")
		require.Equal(t, exitUsage, code, errs)
		require.Contains(t, errs, "--username needs a password")
	})
	t.Run("BasicAuth", func(t *testing.T) {
		t.Setenv("REDEQ_DASHBOARD_PASSWORD", "s3cret")
		base, errb := startDashboard(t, e, "--username", "ops")
		resp, err := http.Get(base)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
		req, err := http.NewRequest(http.MethodGet, base, nil)
		require.NoError(t, err)
		req.SetBasicAuth("ops", "s3cret")
		resp, err = http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.NotContains(t, errb.String(), "warning")
	})
	t.Run("WritableWithoutAuthWarns", func(t *testing.T) {
		_, errb := startDashboard(t, e)
		require.Contains(t, errb.String(), "warning: the dashboard is writable with no --token or --username")
	})
	t.Run("ReadOnlyWithoutAuthIsQuiet", func(t *testing.T) {
		_, errb := startDashboard(t, e, "--read-only")
		require.NotContains(t, errb.String(), "warning")
	})
}

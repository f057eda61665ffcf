package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
)

// TestCLIOverdue: overdue lists the topics whose due work waits longer
// than the threshold by the server's clock, worst first, and flags due
// work that no consumer listens for; a topic on time is left out.
func TestCLIOverdue(t *testing.T) {
	b := testutil.Backends(t)[0]
	require.NotNil(t, b.Mini, "the first backend is miniredis, whose clock the test moves")
	e := newEnv(t, b)
	now := time.Now()
	b.Mini.SetTime(now)
	e.ok(t, "add", "--create", "late.small", "1", "--delay", "1s")
	e.ok(t, "add", "--create", "late.big", "1")
	e.ok(t, "add", "--create", "later", "1", "--delay", "1h")
	b.Mini.SetTime(now.Add(3 * time.Minute)) // late.big 3m behind, late.small 3m-1s
	out := e.ok(t, "overdue")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, out)
	require.True(t, strings.HasPrefix(lines[1], "late.big "), out)
	require.True(t, strings.HasPrefix(lines[2], "late.small "), out)
	require.Contains(t, lines[1], "no consumer")
	require.NotContains(t, out, "later")

	var rows []overdueRow
	require.NoError(t, json.Unmarshal([]byte(e.ok(t, "-o", "json", "overdue", "--threshold", "2m59s")), &rows))
	require.Len(t, rows, 1, "late.small is 2m59s behind: not more than the threshold")
	require.Equal(t, "late.big", rows[0].Topic)
	require.InDelta(t, 180, rows[0].Overdue, 1)
	require.True(t, rows[0].NoConsumer)

	require.Contains(t, e.ok(t, "overdue", "--threshold", "10m"), "no topic behind by more than 10m0s")
	code, _, errs := e.run(t, "", "overdue", "nosuch")
	require.Equal(t, exitNotFound, code, errs)
	code, _, errs = e.run(t, "", "overdue", "--threshold", "-1s")
	require.Equal(t, exitUsage, code, errs)
}

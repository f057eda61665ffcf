package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestCLIErrors: an error says "redeq: " once, whatever the library's
// message starts with; under -o json every error, a usage error included,
// is one JSON object on standard error with the exit code.
func TestCLIErrors(t *testing.T) {
	e := newEnv(t, testutil.Backends(t)[0])
	t.Run("PrefixOnce", func(t *testing.T) {
		code, _, errs := e.run(t, "", "get", "orders", "nope")
		require.Equal(t, exitNotFound, code)
		require.True(t, strings.HasPrefix(errs, "redeq: "), errs)
		require.NotContains(t, errs, "redeq: redeq:")
	})
	for _, args := range [][]string{
		{"-o", "json", "get", "orders", "nope"},
		{"--output=json", "get", "orders", "nope"},
		{"-o", "json", "reschedule", "orders", "x", "--in", "-1h"},
		{"-o", "json", "frobnicate"},
	} {
		t.Run("JSON "+strings.Join(args, " "), func(t *testing.T) {
			code, out, errs := e.run(t, "", args...)
			require.NotZero(t, code)
			require.Empty(t, out)
			var got struct {
				Error string `json:"error"`
				Exit  int    `json:"exit"`
			}
			require.NoError(t, json.Unmarshal([]byte(errs), &got), "stderr %q", errs)
			require.NotEmpty(t, got.Error)
			require.Equal(t, code, got.Exit)
			require.False(t, strings.HasPrefix(got.Error, "redeq: "), got.Error)
		})
	}
}

// TestCLIHintsAtAnEmptyPrefix: stats and topics under a prefix that holds
// no topic say so on standard error, and still succeed.
func TestCLIHintsAtAnEmptyPrefix(t *testing.T) {
	e := newEnv(t, testutil.Backends(t)[0])
	for _, cmd := range []string{"stats", "topics"} {
		code, _, errs := e.run(t, "", cmd)
		require.Zero(t, code, errs)
		require.Contains(t, errs, "no topic under the prefix \""+e.prefix+"\"")
	}
	e.ok(t, "add", "--create", "orders", "1", "--delay", "1h")
	for _, cmd := range []string{"stats", "topics"} {
		code, _, errs := e.run(t, "", cmd)
		require.Zero(t, code, errs)
		require.Empty(t, errs)
	}
}

// TestCLIEscapesControlCharacters: header values and errors that hold
// terminal escape sequences or other control characters are shown
// escaped, never sent to the terminal raw.
func TestCLIEscapesControlCharacters(t *testing.T) {
	e := newEnv(t, testutil.Backends(t)[0])
	require.NoError(t, e.c.Add(context.Background(), &redeq.Job{Topic: "orders", ID: "esc", Delay: time.Hour,
		Headers: map[string]string{"evil": "\x1b[2J\x1b]0;owned\x07", "ok": "plain"}}))
	out := e.ok(t, "get", "orders", "esc")
	require.NotContains(t, out, "\x1b")
	require.NotContains(t, out, "\x07")
	require.Contains(t, out, `\x1b[2J`)
	require.Contains(t, out, "plain")
}

// TestCLIAddToAnUnusedTopicNeedsCreate: add refuses a topic nobody has
// used (a typo would silently start a new topic), writing nothing, unless
// --create says it is meant.
func TestCLIAddToAnUnusedTopicNeedsCreate(t *testing.T) {
	e := newEnv(t, testutil.Backends(t)[0])
	code, _, errs := e.run(t, "", "add", "order.closd", "1", "--delay", "1h")
	require.Equal(t, exitNotFound, code, errs)
	require.Contains(t, errs, `topic "order.closd" is not in use`)
	require.Contains(t, errs, "--create")
	topics, err := e.c.Topics(context.Background())
	require.NoError(t, err)
	require.Empty(t, topics, "a refused add writes nothing")

	require.Equal(t, "1\n", e.ok(t, "add", "--create", "order.close", "1", "--delay", "1h"))
	require.Equal(t, "2\n", e.ok(t, "add", "order.close", "2", "--delay", "1h"), "a topic in use needs no --create")
}

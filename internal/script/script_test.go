package script_test

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/script"
	"github.com/redeq-go/redeq/internal/testutil"
)

// The prelude's MAX_DUE_MS is the Go constant, in Lua and as text; now
// rounds up for a due time and down for a stamp (ceil is floor or one
// more); due_in caps at the year 9999; and the prelude defines no global,
// so a real server (which forbids them) runs it.
func TestPreludeAgreesWithGo(t *testing.T) {
	require.NotContains(t, script.Prelude, "$MAX_DUE_MS")
	probe := script.New(`
local us = now_us()
return {MAX_DUE_MS_TEXT, string.format('%d', MAX_DUE_MS), ceil_ms(us) - floor_ms(us),
  string.format('%d', due_in(MAX_DUE_MS)), string.format('%d', cap_due(5)),
  ceil_ms(1000), ceil_ms(1001), floor_ms(1999)}`)
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			c := b.New(t)
			v, err := probe.Run(context.Background(), c, []string{"{prelude}"}).Slice()
			require.NoError(t, err)
			want := strconv.FormatInt(script.MaxDueMs, 10)
			require.Equal(t, []any{want, want}, v[:2])
			require.Contains(t, []any{int64(0), int64(1)}, v[2])
			require.Equal(t, []any{want, "5", int64(1), int64(2), int64(1)}, v[3:])
		})
	}
}

// A script's source runs after the prelude's values and the functions it
// calls, directly or through another, whole and unchanged; the functions
// it does not call are left out (each run would define them anew).
func TestSourceKeepsOnlyTheFunctionsAScriptCalls(t *testing.T) {
	src := "return {now_ms_floor(), MAX_DUE_MS_TEXT}\n"
	got := script.Source(src)
	require.True(t, strings.HasSuffix(got, src))
	for _, fn := range []string{"now_ms_floor", "floor_ms", "now_us"} {
		require.Contains(t, got, "local function "+fn+"(", "called, directly or not")
	}
	for _, fn := range []string{"now_ms_ceil", "ceil_ms", "cap_due", "trim_dead", "limit_open"} {
		require.NotContains(t, got, "local function "+fn+"(", "not called")
	}
	require.Contains(t, got, "local MAX_DUE_MS_TEXT =", "values are kept")
	probe := script.New(src)
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			v, err := probe.Run(context.Background(), b.New(t), []string{"{prelude}"}).Slice()
			require.NoError(t, err)
			require.Equal(t, strconv.FormatInt(script.MaxDueMs, 10), v[1])
		})
	}
	limited := "-- Uses limits.lua.\nreturn limit_release(KEYS[1], {}, KEYS[2], 'c', 'm')\n"
	got = script.Source(limited)
	for _, fn := range []string{"limit_release", "limit_free", "now_ms_floor"} {
		require.Contains(t, got, "local function "+fn+"(")
	}
	require.NotContains(t, got, "local function limit_open(")
	require.NotContains(t, got, "local function limit_log(", "a name that begins another is not that name")
}

// Every script of the project defines each library function it names:
// what Source leaves out, no script calls.
func TestEveryScriptDefinesWhatItCalls(t *testing.T) {
	lib := script.Prelude + script.Limits
	var fns []string
	for _, line := range strings.Split(lib, "\n") {
		if name, ok := strings.CutPrefix(line, "local function "); ok {
			name, _, _ = strings.Cut(name, "(")
			fns = append(fns, name)
		}
	}
	require.Greater(t, len(fns), 30)
	comment := regexp.MustCompile(`(?m)--.*$`)
	word := func(name string) *regexp.Regexp {
		return regexp.MustCompile(`(^|[^A-Za-z0-9_])` + name + `($|[^A-Za-z0-9_])`)
	}
	files, err := filepath.Glob("../../*/*.lua")
	require.NoError(t, err)
	seen := 0
	for _, f := range files {
		if strings.HasPrefix(f, "../../internal/") {
			continue
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		got := script.Source(string(b))
		code := comment.ReplaceAllString(got, "")
		seen++
		for _, fn := range fns {
			if word(fn).MatchString(code) {
				require.Contains(t, got, "local function "+fn+"(", "%s names %s", f, fn)
			}
		}
	}
	require.Greater(t, seen, 30, "the project's scripts")
}

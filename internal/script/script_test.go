package script_test

import (
	"context"
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

// A script's source runs after the prelude, whole and unchanged.
func TestSourcePutsThePreludeFirst(t *testing.T) {
	src := "return 1\n"
	got := script.Source(src)
	require.True(t, strings.HasPrefix(got, script.Prelude))
	require.True(t, strings.HasSuffix(got, src))
}

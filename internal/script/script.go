// Package script loads redeq's Lua scripts: New puts the prelude
// (prelude.lua: the server's clock rounded up for a due time and down for
// a time stamp, the year-9999 cap on due times, the dead-set trim) before
// a script's own source and wraps the whole in a redis.Script; the limits
// (limits.lua) go after the prelude of the scripts that enforce or free a
// global limit (UsesLimits). Of their functions, only those the script
// calls go with it (Source).
//
// It sits under every station of a job's journey and imports none of them.
package script

import (
	_ "embed"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// MaxDueMs is the latest due time redeq stores, unix ms: the last
// millisecond of the year 9999. The prelude's MAX_DUE_MS is this constant.
const MaxDueMs = 253402300799999

//go:embed prelude.lua
var preludeTemplate string

// Prelude is the Lua every script runs first, MaxDueMs written into it.
var Prelude = strings.ReplaceAll(preludeTemplate, "$MAX_DUE_MS", strconv.FormatInt(MaxDueMs, 10))

// Source is src (a script's own source) with the prelude before it, and
// the limits after the prelude when src says it uses them (a line
// UsesLimits in its header): what the server runs, and what EVAL sends.
// Of the functions the prelude and the limits define, only those src
// calls (or those that these call) are kept: every run of a script
// defines each of its local functions anew (a closure each), and the
// limits' thirty-odd functions cost a run more than most of its commands.
func Source(src string) string {
	lib := Prelude
	if strings.Contains(src, UsesLimits+"\n") {
		lib += Limits
	}
	return prune(lib, src) + src
}

// unit is a top-level definition of a library (Prelude, Limits): from a
// line that starts with "local " to the next, comments included. fn is
// the function it defines, "" for a local value, which is always kept.
type unit struct{ text, fn string }

// units cuts lib into its top-level definitions; what comes before the
// first is a unit of its own, kept.
func units(lib string) []unit {
	var out []unit
	start := 0
	for i := 0; i <= len(lib); {
		end := strings.IndexByte(lib[i:], '\n')
		if end < 0 {
			end = len(lib) - i
		}
		line := lib[i : i+end]
		if i > start && strings.HasPrefix(line, "local ") {
			out = append(out, cut(lib[start:i]))
			start = i
		}
		i += end + 1
	}
	if start < len(lib) {
		out = append(out, cut(lib[start:]))
	}
	return out
}

func cut(text string) unit {
	name, ok := strings.CutPrefix(text, "local function ")
	if !ok {
		return unit{text: text}
	}
	name, _, _ = strings.Cut(name, "(")
	return unit{text: text, fn: name}
}

// prune is lib without the functions that neither src nor a kept unit
// names (Lua's locals are seen only after their definition, so the units
// keep their order).
func prune(lib, src string) string {
	us := units(lib)
	keep := make([]bool, len(us))
	text := code(src)
	for i, u := range us {
		if u.fn == "" {
			keep[i] = true
			text += code(u.text)
		}
	}
	for grew := true; grew; {
		grew = false
		for i, u := range us {
			if !keep[i] && names(text, u.fn) {
				keep[i], grew = true, true
				text += code(u.text)
			}
		}
	}
	var b strings.Builder
	for i, u := range us {
		if keep[i] {
			b.WriteString(u.text)
		}
	}
	return b.String()
}

// code is src without its comments (from "--" to the end of a line: no
// string of the project's scripts holds "--", and none uses a block
// comment), which name functions they do not call.
func code(src string) string {
	var b strings.Builder
	for line := range strings.Lines(src) {
		if c, _, ok := strings.Cut(line, "--"); ok {
			line = c + "\n"
		}
		b.WriteString(line)
	}
	return b.String()
}

// names reports whether text holds the identifier name, not as part of a
// longer one.
func names(text, name string) bool {
	for i := 0; ; {
		j := strings.Index(text[i:], name)
		if j < 0 {
			return false
		}
		j += i
		end := j + len(name)
		if (j == 0 || !ident(text[j-1])) && (end == len(text) || !ident(text[end])) {
			return true
		}
		i = j + 1
	}
}

func ident(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// New is the script of source src, prelude included.
func New(src string) *redis.Script { return redis.NewScript(Source(src)) }

//go:embed limits.lua
var limits string

// Limits is the Lua of the global limits (limits.lua): the leases of the
// deliveries fetched under a limit, the rate windows, the ids parked per
// key value. Only the scripts that enforce or free a limit carry it.
var Limits = limits

// UsesLimits is the header line of a script that calls the limits'
// functions: Source puts them before it.
const UsesLimits = "-- Uses limits.lua."

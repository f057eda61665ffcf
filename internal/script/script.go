// Package script loads redeq's Lua scripts: New puts the prelude
// (prelude.lua: the server's clock rounded up for a due time and down for
// a time stamp, the year-9999 cap on due times, the dead-set trim) before
// a script's own source and wraps the whole in a redis.Script; the limits
// (limits.lua) go after the prelude of the scripts that enforce or free a
// global limit (UsesLimits).
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
func Source(src string) string {
	if strings.Contains(src, UsesLimits+"\n") {
		return Prelude + Limits + src
	}
	return Prelude + src
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

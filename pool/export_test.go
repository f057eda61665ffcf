package pool

import "github.com/redeq-go/redeq/internal/script"

// AddSource is add.lua with the prelude, as it runs, for tests that call it as no Go caller would.
var AddSource = script.Source(addSource)

// PutSource is put.lua with the prelude, as it runs, for tests that call it as no Go caller would.
var PutSource = script.Source(putSource)

// DeleteSource is delete.lua with the prelude, as it runs.
var DeleteSource = script.Source(deleteSource)

// ParseInt is parseInt, for the header's numbers.
func ParseInt(b []byte) (int64, bool) { return parseInt(b) }

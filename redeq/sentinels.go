package redeq

import (
	"fmt"

	"github.com/redeq-go/redeq/pool"
)

// Sentinels of inspection and topic-wide calls, matched with errors.Is.
var (
	// ErrUnknownTopic is a topic nobody ever added to: it has no recorded
	// bucket count and is not in the topic set. Stats, List, Pause and
	// Resume return it rather than an empty answer, so a typo in a topic
	// name does not read as "no jobs".
	ErrUnknownTopic = pool.ErrUnknownTopic
)

// invalidArg wraps ErrInvalidArgument with the reason.
func invalidArg(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidArgument}, args...)...)
}

//go:build !unix

package benchdrain

import "time"

// cpuTime is not measured here.
func cpuTime() time.Duration { return 0 }

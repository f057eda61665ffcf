//go:build !unix

package redeqotel_test

import "time"

// cpuTime is not measured here.
func cpuTime() time.Duration { return 0 }

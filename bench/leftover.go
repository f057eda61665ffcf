package main

import (
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"
)

// leftover reports the library goroutines still running after a
// measurement stopped everything it started, waiting up to two seconds
// for them to end: what survives would run during the next measurement.
func leftover() string {
	var found []string
	for deadline := time.Now().Add(2 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		found = libraryGoroutines()
		if len(found) == 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(found) == 0 {
		return ""
	}
	slices.Sort(found)
	found = slices.Compact(found)
	return fmt.Sprintf("library goroutines still running: %s", strings.Join(found, ", "))
}

// libraryGoroutines returns, for each goroutine running redeq or asynq
// code, the first such function on its stack.
func libraryGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, line := range strings.Split(g, "\n") {
			if (strings.HasPrefix(line, "github.com/redeq-go/redeq/") && !strings.HasPrefix(line, "github.com/redeq-go/redeq/bench")) ||
				strings.HasPrefix(line, "github.com/hibiken/asynq") {
				fn, _, _ := strings.Cut(line, "(")
				out = append(out, fn)
				break
			}
		}
	}
	return out
}

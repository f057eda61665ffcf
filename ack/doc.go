// Package ack holds the Channel a handler answers through (the ack and
// rejoin bits) and the script that applies each outcome.
//
// In the journey of a job it is the last station: the outcome of a
// delivery removes, reschedules, parks or buries the job (with package
// retry deciding when a failed job runs again).
//
// It is a building block of package redeq (github.com/redeq-go/redeq/redeq),
// which services import; its API may change between minor versions.
package ack

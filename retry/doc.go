// Package retry is the retry policy: how long a failed job waits before its
// next delivery, and when its retries have run out.
//
// In the journey of a job it sits beside package ack: a failed delivery
// asks it when the job runs again, or whether it goes dead.
//
// It is a building block of package redeq (github.com/redeq-go/redeq/redeq),
// which services import; its API may change between minor versions.
package retry

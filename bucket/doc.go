// Package bucket routes jobs to the buckets of their topic, records each
// topic's bucket count, reschedules waiting jobs, and runs the mover that
// carries due jobs from the bucket ZSETs to the ready lists.
//
// In the journey of a job it is the second station: a job waits in its
// bucket ZSET until due, then the mover pushes its id to the ready list
// (package ready).
//
// It is a building block of package redeq (github.com/redeq-go/redeq/redeq),
// which services import; its API may change between minor versions.
package bucket

// Package lock is the distributed lock of movers and reapers: a small
// wrapper over a redsync mutex on one Redis key.
//
// It sits beside the journey of a job: the mover (package bucket) and the
// reaper (package consumer) take it.
//
// Correctness never depends on it. Every script a lock holder runs is atomic
// and idempotent: two movers that both believe they hold a bucket move each
// due id once (the first ZREM wins), and two reapers hand each in-flight id
// back once (the first LRANGE+DEL wins). The lock only keeps clients from
// doing the same work twice.
//
// It is a building block of package redeq (github.com/redeq-go/redeq/redeq),
// which services import; its API may change between minor versions.
package lock

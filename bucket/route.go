// Package bucket routes jobs to the buckets of their topic, records each
// topic's bucket count, reschedules waiting jobs, and runs the mover that
// carries due jobs from the bucket ZSETs to the ready lists.
//
// It is a building block of package redeq (github.com/redeq-go/redeq/redeq),
// which services import; its API may change between minor versions.
package bucket

import "hash/fnv"

// Of returns the bucket of id among n buckets, n a power of two:
// fnv32a(id) & (n-1).
func Of(id string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(id))
	return int(h.Sum32() & uint32(n-1))
}

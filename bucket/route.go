package bucket

import "hash/fnv"

// Of returns the bucket of id among n buckets, n a power of two:
// fnv32a(id) & (n-1).
func Of(id string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(id))
	return int(h.Sum32() & uint32(n-1))
}

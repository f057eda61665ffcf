// Package pool holds the job envelope and the per-bucket HASH job pools:
// adding, reading and deleting jobs by id.
//
// In the journey of a job it is the first station: Add writes the
// envelope here (and the id into its bucket, package bucket), and every
// later station reads the envelope from here.
//
// It is a building block of package redeq (github.com/redeq-go/redeq/redeq),
// which services import; its API may change between minor versions.
package pool

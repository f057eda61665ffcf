// Package ready holds the per-bucket ready lists and the reliable fetch
// that moves due ids into a consumer's in-flight set, one delivery token
// each.
//
// In the journey of a job it is the third station: a due id waits in its
// ready list until a consumer (package consumer) fetches it.
//
// It is a building block of package redeq (github.com/redeq-go/redeq/redeq),
// which services import; its API may change between minor versions.
package ready

// Package rdb holds the few helpers redeq needs on top of go-redis: running
// a script many times in one pipeline, and reading script replies.
package rdb

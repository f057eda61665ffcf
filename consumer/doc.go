// Package consumer runs listeners: the workers fed by the reliable fetch,
// the heartbeat that shows a client is alive, the reaper that recovers the
// jobs of crashed clients, and the rollback of in-flight jobs at shutdown.
//
// In the journey of a job it is the fourth station: it runs the fetched
// job's listener and hands the outcome to package ack.
//
// It is a building block of package redeq (github.com/redeq-go/redeq/redeq),
// which services import; its API may change between minor versions.
package consumer

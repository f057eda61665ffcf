// Package rdb is how redeq talks to go-redis: script runs for many
// concurrent callers in one round trip (Committer, the joining Committer),
// scripts run many times in one pipeline (RunPipelined, RunJoined), writes
// that wait for replicas (Durability, RunDurable), the window within which
// go-redis may resend a script whose reply was lost (Window, OpTTL), the
// client's timeouts read once (ReadTimeout, TimeoutsSet, Slack), and the
// readers of script replies (Slice, Int, Str).
//
// It sits under every station of a job's journey and imports none of them.
package rdb

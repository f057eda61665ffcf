// Package keys is the one place that names redeq's Redis keys and channels.
//
// Every key of a bucket carries "{topic#bucket}" as its hash tag and every
// topic-wide key carries "{topic}", so each script touches a single cluster
// slot and a hot topic spreads over as many slots as it has buckets.
package keys

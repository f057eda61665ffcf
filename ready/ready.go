// Package ready holds the per-bucket ready lists and the reliable fetch
// that moves due ids into a consumer's in-flight list.
package ready

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/rdb"
)

var (
	//go:embed fetch.lua
	fetchSource string
	fetchScript = redis.NewScript(fetchSource)
	//go:embed release.lua
	releaseSource string
	releaseScript = redis.NewScript(releaseSource)
)

// MaxFetch bounds the ids one fetch takes.
const MaxFetch = 256

// Item is a fetched job: its id and its stored envelope.
type Item struct {
	ID       string
	Envelope string
}

// Fetch atomically moves at most max ids from the ready list of bucket n of
// topic into the in-flight list of consumer cid, and returns them with
// their envelopes. An empty result means the list was empty (or held only
// deleted jobs). A job stays in flight until its outcome is settled, the
// consumer rolls it back at shutdown, or the reaper recovers it after a crash.
func Fetch(ctx context.Context, c redis.UniversalClient, prefix, topic string, n int, cid string, max int) ([]Item, error) {
	k := keys.ForBucket(prefix, topic, n)
	v, err := fetchScript.Run(ctx, c, []string{k.Ready(), k.InFlight(cid), k.Pool()}, min(max, MaxFetch)).Result()
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", keys.Address(topic, n), err)
	}
	r, err := rdb.Slice(v)
	if err != nil || len(r)%2 != 0 {
		return nil, fmt.Errorf("fetch %s: bad reply %v", keys.Address(topic, n), v)
	}
	items := make([]Item, len(r)/2)
	for i := range items {
		items[i].ID, _ = rdb.Str(r[2*i])
		items[i].Envelope, _ = rdb.Str(r[2*i+1])
	}
	return items, nil
}

// Release returns to the head of the ready list of bucket n every id in
// consumer cid's in-flight list that is not in held: ids moved by a fetch
// whose reply never arrived. It returns how many it returned. The caller
// must not fetch from the bucket meanwhile.
func Release(ctx context.Context, c redis.UniversalClient, prefix, topic string, n int, cid string, held []string) (int, error) {
	k := keys.ForBucket(prefix, topic, n)
	args := make([]any, 0, 2+len(held))
	args = append(args, keys.ReadyChannel(prefix), keys.Address(topic, n))
	for _, id := range held {
		args = append(args, id)
	}
	got, err := releaseScript.Run(ctx, c, []string{k.InFlight(cid), k.Ready()}, args...).Int()
	if err != nil {
		return 0, fmt.Errorf("release %s: %w", keys.Address(topic, n), err)
	}
	return got, nil
}

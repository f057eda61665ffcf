package ack

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/script"
	"github.com/redeq-go/redeq/pool"
)

var (
	//go:embed purge.lua
	purgeSource string
	purgeScript = script.New(purgeSource)
)

// purgeChunk bounds the dead jobs one purge script call removes.
const purgeChunk = 500

// PurgeDead removes every job of the dead set of bucket n of topic, at
// most purgeChunk per script call, and returns how many it removed. Each
// call carries its own op id, so a rerun after a lost reply counts its
// chunk once. Jobs that die meanwhile may be removed too: it stops at the
// first call that finds fewer than a full chunk.
func PurgeDead(ctx context.Context, c redis.UniversalClient, prefix, topic string, n int) (int, error) {
	k := keys.ForBucket(prefix, topic, n)
	total := 0
	for {
		octx, cancel := pool.OpContext(ctx)
		got, err := purgeScript.Run(octx, c, []string{k.Pool(), k.Dead(), k.Reasons(), k.Errors(), k.Op(uuid.NewString())},
			purgeChunk, pool.OpTTL(c).Milliseconds()).Int()
		cancel()
		if err != nil {
			return total, fmt.Errorf("purge dead jobs of %s: %w", keys.Address(topic, n), err)
		}
		total += got
		if got < purgeChunk {
			return total, nil
		}
	}
}

package ready

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/rdb"
	"github.com/redeq-go/redeq/internal/script"
	"github.com/redeq-go/redeq/pool"
)

var (
	//go:embed pause.lua
	pauseSource string
	pauseScript = script.New(pauseSource)
	//go:embed pausetopic.lua
	pauseTopicSource string
	pauseTopicScript = script.New(pauseTopicSource)
)

// SetPaused pauses (or resumes) fetching from every bucket of topic, which
// has buckets buckets. The flag goes first into the topic's meta HASH
// (field "paused", what Stats and Topics read), then into each bucket's
// state HASH, where the fetch script reads it inside the bucket's slot:
// once SetPaused returns, no fetch of any client takes a job of the topic
// (or, resumed, every fetch may). Calls are numbered in meta, so a slower
// older call never undoes a newer one in a bucket. After an error the
// buckets may disagree until the call is made again.
func SetPaused(ctx context.Context, c redis.UniversalClient, prefix, topic string, buckets int, paused bool) error {
	flag := ""
	if paused {
		flag = "1"
	}
	seq, err := pauseTopicScript.Run(ctx, c, []string{keys.ForTopic(prefix, topic).Meta()}, flag).Int64()
	if err != nil {
		return fmt.Errorf("pause topic %q: %w", topic, err)
	}
	if seq == 0 {
		return fmt.Errorf("pause topic %q: %w", topic, pool.ErrUnknownTopic)
	}
	calls := make([]rdb.Call, buckets)
	for n := range calls {
		calls[n] = rdb.Call{
			Keys: []string{keys.ForBucket(prefix, topic, n).State()},
			Args: []any{seq, flag, keys.PausedField, keys.PauseSeqField, keys.ReadyChannel(prefix), keys.Address(topic, n)},
		}
	}
	cmds := rdb.RunPipelined(ctx, c, pauseScript, calls)
	for n, cmd := range cmds {
		if err := cmd.Err(); err != nil {
			return fmt.Errorf("pause topic %q: %s: %w", topic, keys.Address(topic, n), err)
		}
	}
	return nil
}

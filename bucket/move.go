package bucket

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/rdb"
	"github.com/redeq-go/redeq/internal/script"
)

var (
	//go:embed move.lua
	moveSource string
	moveScript = script.New(moveSource)
)

// BroadcastRetention is how long the mover keeps the envelope of a
// broadcast job it has announced: the window in which a client that got
// the notice reads the job. A client reads at once unless its listener is
// behind; one more than a minute behind loses broadcasts rather than making
// Redis hold every burst's bodies for long. The same for every client, so
// movers with different settings agree.
const BroadcastRetention = time.Minute

// MoveResult is what one run of the move script did.
type MoveResult struct {
	Moved int
	// Next is the due time of the bucket's earliest job, zero when empty.
	Next time.Time
	// Now is the Redis server's time when the script ran.
	Now time.Time
	// Ready is the length of the bucket's ready list after the move; the
	// script announced it on the ready channel when not zero.
	Ready int
}

// Move runs one bounded move of bucket n of topic: at most batch due ids,
// written in the current format of the job state (keys.Bucket.State).
func Move(ctx context.Context, c redis.UniversalClient, prefix, topic string, n, batch int) (MoveResult, error) {
	return moveOverdue(ctx, c, prefix, topic, n, batch, 0, true)
}

// MoveOlderFormat is Move writing the older format of the job state, the
// one a namespace keeps until UpgradeFormat switches it.
func MoveOlderFormat(ctx context.Context, c redis.UniversalClient, prefix, topic string, n, batch int) (MoveResult, error) {
	return moveOverdue(ctx, c, prefix, topic, n, batch, 0, false)
}

// moveOverdue moves at most batch ids overdue by more than grace; current
// says which format of the job state to write.
func moveOverdue(ctx context.Context, c redis.UniversalClient, prefix, topic string, n, batch int, grace time.Duration, current bool) (MoveResult, error) {
	k := keys.ForBucket(prefix, topic, n)
	format := ""
	if current {
		format = "1"
	}
	v, err := moveScript.Run(ctx, c, []string{k.Scheduled(), k.Ready(), k.Pool(), k.Sent(), k.SentAt(), k.SentSeq(), k.State(), k.Due()},
		batch, keys.BroadcastMark, keys.ReadyChannel(prefix), keys.BroadcastChannel(prefix),
		keys.Address(topic, n), grace.Milliseconds(), BroadcastRetention.Milliseconds(), format).Result()
	if err != nil {
		return MoveResult{}, fmt.Errorf("move %s: %w", keys.Address(topic, n), err)
	}
	r, err := rdb.Slice(v)
	if err != nil || len(r) != 4 {
		return MoveResult{}, fmt.Errorf("move %s: bad reply %v", keys.Address(topic, n), v)
	}
	moved, _ := rdb.Int(r[0])
	next, _ := rdb.Int(r[1])
	now, _ := rdb.Int(r[2])
	waiting, _ := rdb.Int(r[3])
	res := MoveResult{Moved: int(moved), Now: time.UnixMilli(now), Ready: int(waiting)}
	if next >= 0 {
		res.Next = time.UnixMilli(next)
	}
	return res, nil
}

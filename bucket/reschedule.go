package bucket

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/script"
	"github.com/redeq-go/redeq/pool"
)

var (
	//go:embed reschedule.lua
	rescheduleSource string
	rescheduleScript = script.New(rescheduleSource)
)

// Reschedule gives the waiting job id a new due time at. A job that is in
// flight, parked in un_ack or dead is not waiting: pool.ErrJobNotWaiting.
func Reschedule(ctx context.Context, c redis.UniversalClient, prefix, topic, id string, bucket int, at time.Time) error {
	return reschedule(ctx, c, prefix, topic, id, bucket, strconv.FormatInt(pool.UnixMs(at), 10), 0, "")
}

// RescheduleIn is Reschedule to delay from now by the Redis server's clock.
func RescheduleIn(ctx context.Context, c redis.UniversalClient, prefix, topic, id string, bucket int, delay time.Duration) error {
	return reschedule(ctx, c, prefix, topic, id, bucket, "", pool.DurationMs(delay), "")
}

// RescheduleInCreated is RescheduleIn of the job of id only while it is
// the one created at created (unix ms, in digits; "" is any): a job of the
// id deleted and added again since is left (ErrJobChanged).
func RescheduleInCreated(ctx context.Context, c redis.UniversalClient, prefix, topic, id string, bucket int, delay time.Duration, created string) error {
	return reschedule(ctx, c, prefix, topic, id, bucket, "", pool.DurationMs(delay), created)
}

func reschedule(ctx context.Context, c redis.UniversalClient, prefix, topic, id string, bucket int, at string, delayMs int64, created string) error {
	k := keys.ForBucket(prefix, topic, bucket)
	ctx, cancel := pool.OpContext(ctx)
	defer cancel()
	code, err := rescheduleScript.Run(ctx, c, []string{k.Pool(), k.Scheduled(), k.State(), k.Op(uuid.NewString())},
		id, keys.BroadcastMark, at, keys.WakeChannel(prefix), keys.Address(topic, bucket),
		pool.OpTTL(c).Milliseconds(), delayMs, created).Int()
	if err != nil {
		return fmt.Errorf("reschedule job %q: %w", id, err)
	}
	switch code {
	case 0:
		return nil
	case 1:
		return fmt.Errorf("reschedule job %q of topic %q: %w", id, topic, pool.ErrJobNotFound)
	case 3:
		return fmt.Errorf("reschedule job %q of topic %q: created at another time: %w", id, topic, pool.ErrJobChanged)
	default:
		return fmt.Errorf("reschedule job %q of topic %q: %w", id, topic, pool.ErrJobNotWaiting)
	}
}

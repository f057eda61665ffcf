package consumer

import (
	"context"
	"slices"

	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/ack"
	"github.com/redeq-go/redeq/ready"
)

// fetcher is what a runner's dispatcher needs of Redis, for one topic and
// this consumer's in-flight lists.
type fetcher interface {
	// Fetch moves up to want jobs of bucket b from its ready list to this
	// consumer's in-flight list; alone says the runner runs nothing, so
	// the fetch may take a quarantined job (ready.FetchBatch).
	Fetch(ctx context.Context, b, want int, alone bool) (ready.Batch, error)
	// Reconcile gives back to bucket b's ready list the deliveries in
	// this consumer's in-flight list that held does not hold, and returns
	// their number (ready.Release).
	Reconcile(ctx context.Context, b int, held func(member string) bool) (int, error)
}

// applier is what a runner's settler needs of Redis, for one topic and
// this consumer's in-flight lists.
type applier interface {
	// Settle applies outcomes of bucket b; applied tells, per outcome,
	// whether its delivery still owned the job (ack.Settler.Settle).
	Settle(ctx context.Context, b int, outs []ack.Outcome) (applied []bool, err error)
	// Release gives deliveries of bucket b back to the head of its ready
	// list without spending an attempt (ready.ReleaseMembers).
	Release(ctx context.Context, b int, members []string) (int, error)
}

// redisFetcher is the fetcher of a topic on Redis.
type redisFetcher struct {
	rdb                redis.UniversalClient
	prefix, topic, cid string
	older              bool        // fetch as a client of the older format (Group.SetOlderFormat)
	limits             string      // the listener's limits (ready.Limits.Spec)
	startLog           func() bool // Group.SetStartLog; nil: false
}

func (f redisFetcher) Fetch(ctx context.Context, b, want int, alone bool) (ready.Batch, error) {
	if f.older {
		return ready.FetchOlderFormat(ctx, f.rdb, f.prefix, f.topic, b, f.cid, want, alone)
	}
	return ready.FetchLimited(ctx, f.rdb, f.prefix, f.topic, b, f.cid, want, alone, f.limits, f.startLog != nil && f.startLog())
}

func (f redisFetcher) Reconcile(ctx context.Context, b int, held func(member string) bool) (int, error) {
	return ready.Release(ctx, f.rdb, f.prefix, f.topic, b, f.cid, held)
}

// redisApplier is the applier of a topic on Redis.
type redisApplier struct {
	settler            *ack.Settler
	rdb                redis.UniversalClient
	prefix, topic, cid string
	older              bool          // settle as a client of the older format (Group.SetOlderFormat)
	keep               ack.Retention // per bucket
}

func (a redisApplier) Settle(ctx context.Context, b int, outs []ack.Outcome) ([]bool, error) {
	if a.older {
		// That version's fetch counted the lateness; its settle did not.
		outs = slices.Clone(outs)
		for i := range outs {
			outs[i].Late = -1
		}
	}
	return a.settler.SettleKept(ctx, a.topic, b, a.keep, outs)
}

func (a redisApplier) Release(ctx context.Context, b int, members []string) (int, error) {
	return ready.ReleaseMembers(ctx, a.rdb, a.prefix, a.topic, b, a.cid, members)
}

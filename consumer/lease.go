package consumer

import (
	"context"
	_ "embed"
	"sync"
	"time"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/rdb"
	"github.com/redeq-go/redeq/internal/script"
)

var (
	//go:embed lease.lua
	leaseSource string
	leaseScript = script.New(leaseSource)
)

// leaseLoop renews, every HeartbeatInterval, this consumer's lease on
// each bucket where it holds deliveries (keys.Bucket.Lease, lease.lua: it
// lasts ConsumerTimeout by the bucket node's clock), and recover.lua
// recovers nothing of a consumer's in-flight set while its lease there
// lasts.
// The heartbeat says to the whole fleet that the consumer lives; the lease
// says it to the node of the jobs it runs, and only there: a consumer cut
// off from the alive set's node alone keeps running the jobs whose node
// it reaches, and their outcomes land, while a reaper finds it silent.
// It runs beside the heartbeat loop rather than in it, so that a
// heartbeat that hangs on the alive set's node delays no renewal.
func (g *Group) leaseLoop(ctx context.Context) {
	t := time.NewTicker(g.cfg.HeartbeatInterval)
	defer t.Stop()
	var l leases
	defer l.wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		g.renewLeases(ctx, &l)
	}
}

// leases is the state of leaseLoop's renewals: the nodes whose last
// renewal has not answered yet, and the renewals under way.
type leases struct {
	mu   sync.Mutex
	busy map[string]bool
	wg   sync.WaitGroup
}

// claim marks node as being renewed; false when its last renewal still
// waits for an answer.
func (l *leases) claim(node string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.busy[node] {
		return false
	}
	if l.busy == nil {
		l.busy = map[string]bool{}
	}
	l.busy[node] = true
	return true
}

func (l *leases) done(node string) {
	l.mu.Lock()
	delete(l.busy, node)
	l.mu.Unlock()
}

// renewLeases sends one pipeline per node with a lease.lua call for each
// bucket where a delivery is held, each node's on its own goroutine: a
// node that hangs holds up the renewals on it only, and gets no new one
// before the last answered, so that renewals never pile up behind it.
// A bucket whose renewal fails keeps the lease it had until it expires,
// and then recovery is as it was without one: a lease only ever delays a
// recovery, never causes one.
func (g *Group) renewLeases(ctx context.Context, l *leases) {
	byNode := map[string][]string{}
	for _, r := range g.runners {
		for _, b := range r.dl.heldBuckets() {
			k := keys.ForBucket(g.cfg.Prefix, r.topic, b).Lease(g.cid)
			node := rdb.NodeOf(ctx, g.rdb, k) // "" on a single server
			byNode[node] = append(byNode[node], k)
		}
	}
	for node, ks := range byNode {
		if !l.claim(node) {
			continue
		}
		l.wg.Go(func() {
			defer l.done(node)
			if err := g.renew(ctx, ks); err != nil && ctx.Err() == nil {
				g.env.Failure("redeq: lease renewal failed; the jobs it covers may be recovered once it expires",
					"node", node, "buckets", len(ks), "err", err)
			}
		})
	}
}

// renew runs lease.lua on each of ks in one pipeline and returns the
// first error.
func (g *Group) renew(ctx context.Context, ks []string) error {
	calls := make([]rdb.Call, len(ks))
	for i, k := range ks {
		calls[i] = rdb.Call{Keys: []string{k}, Args: []any{g.cfg.ConsumerTimeout.Milliseconds()}}
	}
	for _, cmd := range rdb.RunPipelined(ctx, g.rdb, leaseScript, calls) {
		if err := cmd.Err(); err != nil {
			return err
		}
	}
	return nil
}

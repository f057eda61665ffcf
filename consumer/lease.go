package consumer

import (
	"context"
	_ "embed"
	"errors"
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
// recovery, never causes one. Each renewal that succeeds counts, for the
// handlers of its bucket (leaseGuard), from the moment it was sent: a late
// answer does not lengthen what the node granted.
func (g *Group) renewLeases(ctx context.Context, l *leases) {
	byNode := map[string][]leased{}
	for _, r := range g.runners {
		for _, b := range r.dl.heldBuckets() {
			k := keys.ForBucket(g.cfg.Prefix, r.topic, b).Lease(g.cid)
			node := rdb.NodeOf(ctx, g.rdb, k) // "" on a single server
			byNode[node] = append(byNode[node], leased{r, b, k})
		}
	}
	for node, ls := range byNode {
		if !l.claim(node) {
			continue
		}
		l.wg.Go(func() {
			defer l.done(node)
			if err := g.renew(ctx, ls); err != nil && ctx.Err() == nil {
				g.env.Failure("redeq: lease renewal failed; the jobs it covers may be recovered once it expires, and their handlers are canceled before",
					"node", node, "buckets", len(ls), "err", err)
			}
		})
	}
}

// leased is one lease to renew: runner r's on bucket b, key k.
type leased struct {
	r *runner
	b int
	k string
}

// renew runs lease.lua on each of ls in one pipeline, records the send
// time of each that succeeded, and returns the first error.
func (g *Group) renew(ctx context.Context, ls []leased) error {
	calls := make([]rdb.Call, len(ls))
	for i, l := range ls {
		calls[i] = rdb.Call{Keys: []string{l.k}, Args: []any{g.cfg.ConsumerTimeout.Milliseconds()}}
	}
	sent := g.env.Clock.Now()
	var first error
	for i, cmd := range rdb.RunPipelined(ctx, g.rdb, leaseScript, calls) {
		if err := cmd.Err(); err != nil {
			if first == nil {
				first = err
			}
			continue
		}
		ls[i].r.dl.setRenewed(ls[i].b, sent, leaseWindow(g.cfg.ConsumerTimeout))
	}
	return first
}

// ErrLeaseLapsed is the cause of a handler's ctx canceled because the
// consumer could not renew its lease on the job's bucket in time: the job
// may be recovered and run by another consumer from then on.
var ErrLeaseLapsed = errors.New("redeq: the lease on the job may have lapsed: the consumer could not reach its node in time")

// leaseMargin is how long before its lease may lapse a handler's ctx is
// canceled: a tenth of ConsumerTimeout. It covers the drift of the local
// clock against the node's (under 0.1% where NTP slews them), the timer
// that fires late on a loaded machine, and the handler's own time to see
// its ctx end and return. It leaves a failed renewal room: renewals go
// out every HeartbeatInterval, at most a third of ConsumerTimeout, so the
// one after a failure is sent by two thirds of it.
func leaseMargin(timeout time.Duration) time.Duration { return timeout / 10 }

// leaseWindow is how long a fetch or a renewal protects a handler:
// ConsumerTimeout less leaseMargin.
func leaseWindow(timeout time.Duration) time.Duration { return timeout - leaseMargin(timeout) }

// leaseGuard cancels the handler of the delivery it is armed for (with
// ErrLeaseLapsed) once nothing this consumer sent in time protects it
// from recovery any longer: recover.lua spares it while the lease on its
// bucket lasts and while its fetch is younger than ConsumerTimeout, both
// by the node's clock from when the node ran the call, which is after it
// was sent. So the guard counts ConsumerTimeout less leaseMargin from the
// later of the fetch's send and the last good renewal's, on the local
// clock; a renewal that succeeds meanwhile moves the end.
//
// A worker runs one handler at a time and keeps one guard, armed for
// each job it runs and stopped when the handler returns: its timer and
// callback are made once, not per job. The timer is set again only when
// the job's end comes before the time it is set for: the jobs of a
// worker are fetched one after the other, so it mostly is not, and a job
// costs the timer nothing. When the timer fires it works out the end of
// the job the guard is armed for then, if any, and sets itself for that
// end, or cancels the handler when it has come. After stop returns the
// guard cancels nothing until it is armed again.
type leaseGuard struct {
	r      *runner
	window time.Duration
	mu     sync.Mutex
	t      *time.Timer
	set    bool      // the timer is set, for at
	at     time.Time // local clock
	armed  bool
	d      delivery
	cancel context.CancelCauseFunc
}

func newLeaseGuard(r *runner) *leaseGuard {
	g := &leaseGuard{r: r, window: leaseWindow(r.g.cfg.ConsumerTimeout)}
	g.t = time.AfterFunc(time.Hour, g.fire)
	g.t.Stop()
	return g
}

// arm guards the handler of d, canceled by cancel when its lease may
// lapse (at once, when it may have lapsed already).
func (g *leaseGuard) arm(d delivery, cancel context.CancelCauseFunc) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed, g.d, g.cancel = true, d, cancel
	g.check()
}

// stop ends the guard of the handler it was armed for.
func (g *leaseGuard) stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed, g.cancel = false, nil
	g.d = delivery{}
}

// close stops the guard and its timer, for good.
func (g *leaseGuard) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.armed, g.cancel, g.d = false, nil, delivery{}
	g.t.Stop()
	g.set = false
}

func (g *leaseGuard) fire() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.set = false
	if g.armed {
		g.check()
	}
}

// check cancels the guarded handler when its lease may lapse, or makes
// sure the timer fires by then. g.mu is held.
func (g *leaseGuard) check() {
	r, d := g.r, g.d
	// A renewal counts when its run began before the fetch's own
	// protection ran out: a renewal after a gap does not bring back a
	// lease that may have lapsed meanwhile.
	base := d.sent
	if last, since := r.dl.renewedAt(d.bucket); last.After(base) && !since.After(base.Add(g.window)) {
		base = last
	}
	now := r.g.env.Clock.Now()
	left := g.window - now.Sub(base)
	if left > 0 {
		if end := now.Add(left); !g.set || end.Before(g.at) {
			g.t.Reset(left)
			g.set, g.at = true, end
		}
		return
	}
	r.g.env.Failure("redeq: handler canceled: its lease may lapse, and another consumer may run the job",
		"topic", r.topic, "bucket", d.bucket, "id", d.item.ID, "unrenewed_for", now.Sub(base))
	g.cancel(ErrLeaseLapsed)
	g.armed, g.cancel = false, nil
}

package consumer

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/ack"
	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/env"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/pool"
)

// Broadcast delivery. The mover publishes a small notice per due broadcast
// job (bucket address, id, sequence number, created ms) and keeps the
// envelope in the bucket's Sent HASH for bucket.BroadcastRetention. The
// routing goroutine hands each notice to Deliver, which never blocks it:
// every broadcast listener has its own bounded queue of notices and its
// own goroutine, which reads the envelope (one HGET), checks it is the job
// announced, and runs OnBroadcast. A listener that falls behind fills only
// its own queue; further notices for it are dropped, counted and logged at
// most every dropWarnEvery, and the other listeners and the wake-ups go on.

// broadcastQueue bounds the notices one listener has waiting. A notice is
// about a hundred bytes, so a full queue holds some 100 KiB, not bodies.
const broadcastQueue = 1024

// dropWarnEvery spaces the warnings about dropped broadcasts.
const dropWarnEvery = 10 * time.Second

// notice is one announced broadcast job.
type notice struct {
	topic   string
	bucket  int
	id, seq string
	created int64
}

// bcastListener is one registered broadcast listener and its queue.
type bcastListener struct {
	bl      BroadcastListener
	handler Handler // OnBroadcast inside the client's middleware
	queue   chan notice
}

// broadcasts is the broadcast side of a Group.
type broadcasts struct {
	all     []*bcastListener
	byTopic map[string][]*bcastListener

	ctx    context.Context // handlers' context; ends at Shutdown
	cancel context.CancelFunc
	stop   chan struct{} // closed at Shutdown: start no more handlers
	closed atomic.Bool
	wg     sync.WaitGroup
	busy   atomic.Int64 // loops reading or running a broadcast

	dropped  atomic.Uint64
	lastWarn atomic.Int64 // unix ns of the last drop warning
}

// RegisterBroadcast adds bl before Start. A nil listener, one without
// topics, with a bad topic or naming a topic twice, and a listener already
// registered, are refused with ErrInvalidArgument and register nothing: each
// would otherwise run a job twice in one client, or never.
func (g *Group) RegisterBroadcast(bl BroadcastListener) error {
	if bl == nil {
		return fmt.Errorf("%w: nil broadcast listener", pool.ErrInvalidArgument)
	}
	// A listener built with bad arguments (redeq.BroadcastFunc of a nil
	// function) says why.
	if il, ok := bl.(interface{ Invalid() error }); ok {
		if err := il.Invalid(); err != nil {
			return err
		}
	}
	if g.started.Load() {
		return ErrStarted
	}
	topics := bl.Topics()
	if len(topics) == 0 {
		return fmt.Errorf("%w: broadcast listener has no topics", pool.ErrInvalidArgument)
	}
	seen := make(map[string]bool, len(topics))
	for _, t := range topics {
		if err := config.CheckName("topic", t); err != nil {
			return fmt.Errorf("%w: register broadcast listener: %v", pool.ErrInvalidArgument, err)
		}
		if seen[t] {
			return fmt.Errorf("%w: broadcast listener names topic %q twice", pool.ErrInvalidArgument, t)
		}
		seen[t] = true
	}
	// Two values of a type that is not comparable cannot be the same
	// listener (and == would panic on them).
	if reflect.TypeOf(bl).Comparable() {
		for _, have := range g.bc.all {
			if have.bl == bl {
				return fmt.Errorf("%w: broadcast listener registered twice", pool.ErrInvalidArgument)
			}
		}
	}
	l := &bcastListener{bl: bl}
	g.bc.all = append(g.bc.all, l)
	if g.bc.byTopic == nil {
		g.bc.byTopic = map[string][]*bcastListener{}
	}
	for _, t := range topics {
		g.bc.byTopic[t] = append(g.bc.byTopic[t], l)
	}
	return nil
}

// HasBroadcast reports whether any broadcast listener is registered.
func (g *Group) HasBroadcast() bool { return len(g.bc.all) > 0 }

// BroadcastsDropped is how many broadcast deliveries this client gave up:
// notices that found their listener's queue full, envelopes read after
// bucket.BroadcastRetention, reads that kept failing, and notices that
// were malformed or did not match their job.
func (g *Group) BroadcastsDropped() uint64 { return g.bc.dropped.Load() }

// startBroadcasts starts one goroutine per broadcast listener.
func (g *Group) startBroadcasts(base context.Context) {
	g.bc.ctx, g.bc.cancel = context.WithCancel(base)
	g.bc.stop = make(chan struct{})
	for _, l := range g.bc.all {
		l.queue = make(chan notice, broadcastQueue)
		l.handler = chain(func(ctx context.Context, job *pool.Job, _ *ack.Channel) error {
			l.bl.OnBroadcast(ctx, job)
			return nil
		}, nil, g.middleware)
		g.bc.wg.Go(func() { g.broadcastLoop(l) })
	}
}

// Deliver hands a broadcast notice (address "\n" id "\n" seq "\n" created
// ms) to the queues of its topic's broadcast listeners. It never blocks:
// it runs on the goroutine that routes every pub/sub message.
func (g *Group) Deliver(msg string) {
	if g.bc.stop == nil || g.bc.closed.Load() {
		return
	}
	n, ok := parseNotice(msg)
	if !ok {
		g.dropBroadcast("malformed notice", "notice", truncate(msg, 120))
		return
	}
	for _, l := range g.bc.byTopic[n.topic] {
		select {
		case l.queue <- n:
		default:
			g.dropBroadcast("its listener's queue is full", "topic", n.topic, "id", n.id)
		}
	}
}

func parseNotice(msg string) (notice, bool) {
	parts := strings.Split(msg, "\n")
	if len(parts) != 4 {
		return notice{}, false
	}
	topic, b, ok := keys.ParseAddress(parts[0])
	if !ok || parts[1] == "" {
		return notice{}, false
	}
	if seq, err := strconv.ParseUint(parts[2], 10, 63); err != nil || seq == 0 {
		return notice{}, false
	}
	created, err := strconv.ParseInt(parts[3], 10, 64)
	if err != nil {
		return notice{}, false
	}
	return notice{topic: topic, bucket: b, id: parts[1], seq: parts[2], created: created}, true
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// dropBroadcast counts a broadcast not delivered and logs it, at most once
// every dropWarnEvery: a flood of notices must not become a flood of logs.
func (g *Group) dropBroadcast(why string, attrs ...any) {
	total := g.bc.dropped.Add(1)
	now := g.env.Clock.Now().UnixNano()
	last := g.bc.lastWarn.Load()
	if last != 0 && now-last < int64(dropWarnEvery) || !g.bc.lastWarn.CompareAndSwap(last, now) {
		return
	}
	attrs = append([]any{"reason", why, "dropped_total", total}, attrs...)
	g.env.Logger.Warn("redeq: broadcast job not delivered (further drops within 10s are only counted)", attrs...)
}

// broadcastLoop runs the handler of l for each notice until Shutdown.
func (g *Group) broadcastLoop(l *bcastListener) {
	for {
		select {
		case <-g.bc.stop:
			return
		case n := <-l.queue:
			select {
			case <-g.bc.stop:
				return
			default:
			}
			g.bc.busy.Add(1)
			if job := g.readBroadcast(n); job != nil {
				g.runBroadcast(l.handler, job)
			}
			g.bc.busy.Add(-1)
		}
	}
}

// readBroadcast reads the envelope a notice announces and checks it is the
// job announced; nil when it is gone, does not match, or cannot be read.
// A failed read is retried with a backoff a few times.
func (g *Group) readBroadcast(n notice) *pool.Job {
	key := keys.ForBucket(g.cfg.Prefix, n.topic, n.bucket).Sent()
	field := keys.SentField(n.id, n.seq)
	bo := env.Backoff{Max: time.Second}
	var err error
	for try := 0; try < 4; try++ {
		if try > 0 {
			select {
			case <-g.bc.stop:
				return nil
			case <-time.After(bo.Next()):
			}
		}
		var envelope []byte
		envelope, err = g.rdb.HGet(g.bc.ctx, key, field).Bytes()
		if errors.Is(err, redis.Nil) {
			g.dropBroadcast("envelope gone: read after the broadcast retention, or never published", "topic", n.topic, "id", n.id)
			return nil
		}
		if err != nil {
			if g.bc.ctx.Err() != nil {
				return nil
			}
			continue
		}
		job, err := pool.JobOf(n.topic, n.id, envelope)
		if err != nil {
			g.dropBroadcast("corrupt envelope", "topic", n.topic, "id", n.id, "err", err)
			return nil
		}
		if job.CreatedAt.UnixMilli() != n.created {
			// Not the job announced: never deliver another in its place.
			g.dropBroadcast("notice does not match its job", "topic", n.topic, "id", n.id)
			return nil
		}
		return job
	}
	g.dropBroadcast("cannot read the envelope", "topic", n.topic, "id", n.id, "err", err)
	return nil
}

// runBroadcast runs one broadcast handler, inside the client's middleware,
// turning a panic into an error, and tells the observer. The Channel the
// middleware sees is the handler's own and nothing reads its answer: a
// broadcast is never acked, retried or returned. A panic or an error is
// logged, once.
func (g *Group) runBroadcast(h Handler, job *pool.Job) {
	var start time.Time
	if g.observer != nil {
		start = g.env.Clock.Now()
		g.observer.JobDelivered(job, -1) // the due time is not in the notice
	}
	err := g.callBroadcast(h, job)
	if g.observer != nil {
		g.observer.JobDone(job, OutcomeBroadcast, g.env.Clock.Now().Sub(start), err)
	}
}

func (g *Group) callBroadcast(h Handler, job *pool.Job) (err error) {
	defer func() {
		if p := recover(); p != nil {
			g.env.Logger.Error("redeq: broadcast listener panicked", "topic", job.Topic, "id", job.ID, "panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("redeq: broadcast listener panicked: %v", p)
		}
	}()
	// A returned error is logged here, a panic above: once each.
	if err = h(g.bc.ctx, job, &ack.Channel{}); err != nil {
		g.env.Logger.Warn("redeq: broadcast handler failed", "topic", job.Topic, "id", job.ID, "err", err)
	}
	return err
}

// closeBroadcasts stops taking notices and starting handlers; running
// handlers go on.
func (g *Group) closeBroadcasts() {
	if g.bc.stop != nil && g.bc.closed.CompareAndSwap(false, true) {
		close(g.bc.stop)
	}
}

// endBroadcasts waits for the running broadcast handlers until ctx ends,
// then cancels their context and waits a short grace. It reports whether
// they all returned. A handler that ignores its context keeps its
// goroutine until it returns, but Shutdown does not wait for it.
func (g *Group) endBroadcasts(ctx, cleanup context.Context) bool {
	if g.bc.cancel == nil {
		return true
	}
	defer g.bc.cancel()
	if waitFor(ctx, &g.bc.wg) {
		return true
	}
	if g.bc.busy.Load() == 0 {
		// ctx ended, but no loop runs a handler: they end at once.
		grace, cancel := context.WithTimeout(cleanup, handlerGrace)
		defer cancel()
		if waitFor(grace, &g.bc.wg) {
			return true
		}
	}
	g.bc.cancel()
	grace, cancel := context.WithTimeout(cleanup, handlerGrace)
	defer cancel()
	waitFor(grace, &g.bc.wg)
	return false
}

package redeq

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/bucket"
	"github.com/redeq-go/redeq/consumer"
	"github.com/redeq-go/redeq/internal/env"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/rdb"
	"github.com/redeq-go/redeq/pool"
	"github.com/redeq-go/redeq/retry"
)

// SkipRetry wraps err so that the job is not retried.
func SkipRetry(err error) error { return retry.Skip(err) }

// StartPingTimeout bounds the PING with which Start checks that Redis
// answers before it starts anything. On a Redis Cluster, Start pings
// every master and goes on as soon as one answers, within
// StartPingTimeout plus the client's ReadTimeout (the wait for a node
// that hangs when go-redis asks it for the topology first).
const StartPingTimeout = 5 * time.Second

// runtime is what Start runs.
type runtime struct {
	mover  *bucket.Mover
	sched  *scheduler
	chans  []string // subscribed to
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	ps     *redis.PubSub // replaced when listen finds it silently dead
	closed bool          // Shutdown closed ps; no new one

	resubscribing atomic.Bool // a resubscribe runs (retrySubscription)
}

func (c *Client) runtime() *runtime {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.run
}

// Register adds the listener of one topic. Call it before Start; a second
// listener for a topic is ErrDuplicateListener.
func (c *Client) Register(l Listener) error {
	return c.beforeStart(func() error {
		if l != nil {
			if err := checkListener(l); err != nil {
				return fmt.Errorf("register listener: %w", err)
			}
		}
		var cl consumer.Listener // nil stays nil: the group refuses it
		if l != nil {
			cl = adaptListenerIn(l, &c.cfg)
		}
		if err := c.group.Register(cl); err != nil {
			return err
		}
		c.rememberCodec(l)
		return nil
	})
}

// RegisterBroadcast adds a broadcast listener. Call it before Start. A
// nil listener, one without topics, with a bad topic or naming a topic
// twice, and a listener already registered, are refused with
// ErrInvalidArgument and register nothing: each would otherwise run a job
// twice in one client, or never.
func (c *Client) RegisterBroadcast(bl BroadcastListener) error {
	return c.beforeStart(func() error {
		if bl == nil {
			return c.group.RegisterBroadcast(nil) // refused
		}
		// Two values of a type that is not comparable cannot be the same
		// listener (and == would panic on them).
		if reflect.TypeOf(bl).Comparable() {
			for _, have := range c.broadcasts {
				if have == bl {
					return invalidArg("broadcast listener registered twice")
				}
			}
		}
		if err := c.group.RegisterBroadcast(&broadcastAdapter{bl}); err != nil {
			return err
		}
		c.broadcasts = append(c.broadcasts, bl)
		return nil
	})
}

// beforeStart runs f under the client's lock, unless the client is closed
// (ErrClientClosed) or started (ErrStarted).
func (c *Client) beforeStart(f func() error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClientClosed
	}
	if c.run != nil || c.starting {
		return ErrStarted
	}
	return f()
}

// Start subscribes to redeq's notifications and starts, in this order, the
// consumer group (heartbeat, reaper, broadcast dispatcher, listeners) and
// the movers. The started clients share out the buckets of every known
// topic, whether or not they listen to it. ctx bounds the start-up calls and its
// values reach the handlers; cancelling it later does not stop the client:
// Shutdown does.
//
// Start fails when Redis does not answer within StartPingTimeout. On a
// Redis Cluster it goes on once one master answers: a master that hangs
// or refuses is logged, its buckets go to the clients that reach it, and
// the movers keep trying it. After the pings, each of Start's steps that
// waits on one node (the job state format, the listened topics' records,
// the first heartbeat) waits StepTimeout at most (bucket.MoverConfig,
// 1 s with the default ScanInterval) and goes on in the background, so
// Start returns within StartPingTimeout + the client's ReadTimeout + 3 x
// StepTimeout whichever master hangs. What a down master holds up does not fail
// Start either: a subscription that cannot be made, a listened topic that
// cannot be recorded, a first heartbeat that fails are logged and retried
// in the background, and the rest is served meanwhile (see Starting
// beside a down Redis Cluster master in docs/operations.md). A listened
// topic recorded with another bucket count fails Start.
//
// Start does not hold up a Shutdown called meanwhile: that Shutdown
// returns at once, and Start, once its calls to Redis end, stops what it
// started and returns ErrClientClosed.
func (c *Client) Start(ctx context.Context) error {
	if ctx == nil {
		return pool.ErrNilContext
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClientClosed
	}
	if c.run != nil || c.starting {
		c.mu.Unlock()
		return ErrStarted
	}
	sctx, cancel := context.WithCancel(ctx)
	c.starting, c.startCancel = true, cancel
	c.mu.Unlock()
	r, err := c.start(sctx)
	cancel()
	c.mu.Lock()
	c.starting, c.startCancel = false, nil
	if err == nil && c.closed {
		c.mu.Unlock()
		// Shutdown came while Start ran: stop what it started.
		sdctx, sdcancel := context.WithTimeout(context.WithoutCancel(ctx), startAbortTimeout)
		defer sdcancel()
		_ = c.stop(sdctx, r)
		return ErrClientClosed
	}
	closed := c.closed
	if err == nil {
		c.run = r
	}
	c.mu.Unlock()
	if err != nil && closed {
		return fmt.Errorf("%w: shut down while starting: %w", ErrClientClosed, err)
	}
	return err
}

// startAbortTimeout bounds the Shutdown a Start runs when a Shutdown came
// while it started.
const startAbortTimeout = time.Second

// start makes the client's runtime: the calls to Redis of Start.
func (c *Client) start(ctx context.Context) (rt *runtime, err error) {
	// Fail fast, with a clear error, when Redis does not answer: the
	// subscription below would otherwise retry until ctx ends.
	var pings sync.WaitGroup
	node, err := c.answers(ctx, &pings)
	if err != nil {
		pings.Wait()
		return nil, fmt.Errorf("redeq: start: redis does not answer: %w", err)
	}
	defer func() {
		if err != nil {
			pings.Wait()
			return
		}
		rt.wg.Go(pings.Wait) // the pings of the masters slower than the first
	}()
	chans := []string{keys.WakeChannel(c.cfg.Prefix), keys.ReadyChannel(c.cfg.Prefix), keys.ProbeChannel(c.cfg.Prefix, c.group.ID())}
	if c.group.HasBroadcast() {
		chans = append(chans, keys.BroadcastChannel(c.cfg.Prefix))
	}
	ps := subscribeOn(ctx, c.rdb, node, chans)
	// Subscribe before anything moves, so no notification is missed. A
	// subscription that cannot be made holds up nothing: until it is, the
	// movers and the listeners look everywhere every ScanInterval (listen),
	// and listen subscribes again, with a backoff.
	subscribed := true
	if _, err := ps.Receive(ctx); err != nil {
		if ctx.Err() != nil {
			ps.Close()
			return nil, fmt.Errorf("redeq: subscribe: %w", err)
		}
		subscribed = false
		c.env.Logger.Warn("redeq: start: cannot subscribe; wake-ups are polled every ScanInterval until a subscription is made",
			"channels", chans, "err", err)
	}
	fleet := bucket.NewFleet(c.rdb, c.cfg.Prefix, c.group.ID(), c.cfg.ScanInterval)
	if c.older {
		fleet.SetOlderFormat()
	}
	c.readFormat(ctx, fleet, &pings)
	// Two clients of the fleet look for silent consumers, not every one:
	// two, so that a client whose own heartbeats stall while it still
	// announces itself is reaped by the other.
	if err := c.group.SetReaper(func() bool { return fleet.Ranks(bucket.ReaperAddress, 2) }); err != nil {
		ps.Close()
		return nil, err
	}
	if err := c.group.SetStartLog(fleet.WritesStartLog); err != nil {
		ps.Close()
		return nil, err
	}
	if err := c.group.Start(ctx); err != nil {
		ps.Close()
		return nil, publicMismatch(err)
	}
	r := &runtime{ps: ps, chans: chans}
	listened := map[string]int{}
	for _, topic := range c.group.Topics() {
		listened[topic] = c.cfg.Concurrency
	}
	r.mover = bucket.NewMover(c.rdb, c.locker, c.reg, fleet, bucket.MoverConfig{
		Prefix: c.cfg.Prefix, ScanInterval: c.cfg.ScanInterval,
		MoveBatch: c.cfg.MoveBatch, LockExpiry: c.cfg.LockExpiry,
		RetireAfter: c.cfg.RetireAfter, Listened: listened,
	}, c.env, c.group.Notify)
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.cancel = cancel
	if !subscribed {
		c.retrySubscription(runCtx, r)
	}
	r.wg.Go(func() { r.mover.Run(runCtx) })
	r.sched = newScheduler(c, fleet)
	r.wg.Go(func() { r.sched.run(runCtx) })
	r.wg.Go(func() { c.listen(runCtx, r) })
	return r, nil
}

// answers checks that Redis answers, within StartPingTimeout. On a Redis
// Cluster it pings every master at once and returns as soon as one
// answers, with that master: a master that hangs or refuses holds up only
// the jobs stored on it (the movers hand its buckets to the clients that
// reach it, and try it again), so Start does not wait for it, and reports
// it once its ping fails. The pings of the masters slower than the first
// go on under pings.
func (c *Client) answers(ctx context.Context, pings *sync.WaitGroup) (*redis.Client, error) {
	cc, ok := c.rdb.(*redis.ClusterClient)
	if !ok {
		pctx, cancel := context.WithTimeout(ctx, StartPingTimeout)
		defer cancel()
		return nil, c.rdb.Ping(pctx).Err()
	}
	return firstMaster(ctx, cc, pings, func(addr string, err error) {
		c.env.Logger.Warn("redeq: start: a master does not answer; the clients that reach it move its buckets, and this one tries it again",
			"addr", addr, "err", err)
	})
}

// firstMaster pings every master of cc at once, within StartPingTimeout,
// and returns the first that answers, or why none did; failed hears each
// ping that fails. The pings of the masters slower than the first go on
// under pings. go-redis first reads the cluster's topology from one node
// after another, waiting up to its ReadTimeout for each: the pings have
// that much longer, so that a hung node asked first does not fail Start.
func firstMaster(ctx context.Context, cc *redis.ClusterClient, pings *sync.WaitGroup, failed func(addr string, err error)) (*redis.Client, error) {
	window := StartPingTimeout
	if d, ok := rdb.ReadTimeout(cc); ok && d > 0 {
		window += d
	}
	// The pings outlive Start's ctx, bounded by their window: a caller's
	// ctx that ends once Start returns must not fail the pings of healthy
	// masters slower than the first (they would be reported as down).
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), window)
	var answered atomic.Bool
	type answer struct {
		node *redis.Client
		err  error
	}
	first := make(chan answer, 1) // the first master that answered; else why none did
	pings.Go(func() {
		defer cancel()
		err := cc.ForEachMaster(pctx, func(ctx context.Context, n *redis.Client) error {
			if err := n.Ping(ctx).Err(); err != nil {
				failed(n.Options().Addr, err)
				return err
			}
			if answered.CompareAndSwap(false, true) {
				first <- answer{node: n}
			}
			return nil
		})
		if !answered.Load() {
			if err == nil {
				err = errors.New("no master")
			}
			first <- answer{err: err}
		}
	})
	select {
	case a := <-first:
		return a.node, a.err
	case <-ctx.Done():
		cancel()
		return nil, ctx.Err()
	}
}

// subscribeOn subscribes to chans through rdb, or on a Redis Cluster on
// node (a master that answered) when there is one. A cluster's PUBLISH
// reaches the subscribers of every node, so any node will do; go-redis
// would pick the node of the first channel's slot, and a subscription
// there waits for that master when it is down, for a notification of any
// topic.
func subscribeOn(ctx context.Context, rdb redis.UniversalClient, node *redis.Client, chans []string) *redis.PubSub {
	if node != nil {
		return node.Subscribe(ctx, chans...)
	}
	return rdb.Subscribe(ctx, chans...)
}

// retrySubscription subscribes again, on a goroutine of its own, unless a
// resubscribe runs already: on a Redis Cluster, on a master that answers.
func (c *Client) retrySubscription(ctx context.Context, r *runtime) {
	if !r.resubscribing.CompareAndSwap(false, true) {
		return
	}
	r.wg.Go(func() {
		defer r.resubscribing.Store(false)
		c.resubscribe(ctx, r)
	})
}

// listen routes pub/sub messages until the subscription is closed. Nothing
// it calls blocks, so a slow broadcast listener never holds up wake-ups.
// go-redis reconnects and resubscribes by itself after a connection error;
// messages may have been lost meanwhile, so each (re)subscription makes
// the movers rescan their buckets and the listeners look at every ready
// list once. Wake-ups lost otherwise are covered by the movers' idle
// scans, which also repeat the ready notification of a ready list that
// still holds jobs; broadcast notices are not replayed.
//
// A subscription can also lose messages without an error: a half-open
// connection, a proxy that stopped forwarding it, a cluster node cut off
// from the cluster bus. go-redis's PINGs pass through all of these, and
// fetchers do not poll. So a watch on a goroutine of its own (watch)
// publishes a message to itself every listenProbe, through the path
// notifications take; when the last one it published has not come back by
// the next, it looks everywhere as after a resubscription, and subscribes
// again on a new connection. The watch runs apart from the receiving, so
// that a receive stuck in go-redis (a read without a deadline, a
// reconnection that hangs) cannot stop it: closing the old subscription
// ends such a receive.
func (c *Client) listen(ctx context.Context, r *runtime) {
	every := listenProbe(c.cfg.ScanInterval)
	probeChan := keys.ProbeChannel(c.cfg.Prefix, c.group.ID())
	p := &prober{}
	r.wg.Go(func() { c.watch(ctx, r, p, every, probeChan) })
	bo := env.Backoff{Max: c.cfg.ScanInterval}
	for {
		ps := r.pubsub()
		if ps == nil || ctx.Err() != nil {
			return // Shutdown closed it
		}
		m, err := ps.ReceiveTimeout(ctx, every)
		if err != nil {
			var ne net.Error
			switch {
			case ctx.Err() != nil:
				return
			case r.pubsub() != ps:
				// The watch replaced it (or Shutdown closed it): go on
				// with the new one.
			case !errors.As(err, &ne) || !ne.Timeout():
				// go-redis reconnects at the next receive, to the node it
				// had; a new subscription may choose another (on a Redis
				// Cluster, a master that answers). Meanwhile wake-ups may
				// be lost: look everywhere at each retry, every
				// ScanInterval at most.
				wait := bo.Next()
				c.env.Failure("redeq: subscription failed; looking at every bucket until it works", "err", err, "retry_in", wait)
				sleepCtx(ctx, wait)
				if ctx.Err() != nil {
					return
				}
				c.lookEverywhere(r)
				c.retrySubscription(ctx, r)
			}
			continue
		}
		bo.Reset()
		if msg, ok := m.(*redis.Message); ok && msg.Channel == probeChan {
			p.heard(msg.Payload)
			continue
		}
		c.route(r, m)
	}
}

// watch sends the probes of listen every period until ctx ends. When the
// last probe Redis took has not come back, it makes the movers and the
// listeners look everywhere, and subscribes again, on a goroutine of its
// own so that a subscription that hangs delays no look: while probes stay
// lost, every period looks everywhere.
func (c *Client) watch(ctx context.Context, r *runtime, p *prober, every time.Duration, probeChan string) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if p.lost() {
			c.env.Failure("redeq: subscription lost a message to itself; looking at every bucket and subscribing again", "within", every)
			c.lookEverywhere(r)
			if r.resubscribing.CompareAndSwap(false, true) {
				// The next probe goes once the new subscription is made,
				// so that the next tick judges it; until then the probes
				// stay lost, and every tick looks everywhere.
				r.wg.Go(func() {
					defer r.resubscribing.Store(false)
					if c.resubscribe(ctx, r) != nil {
						p.reset()
						p.send(ctx, &r.wg, c.rdb, probeChan)
					}
				})
			}
			continue
		}
		p.send(ctx, &r.wg, c.rdb, probeChan)
	}
}

// listenProbe is how often listen sends itself a message: the movers' idle
// scan (5 ScanIntervals), so that a client's check costs one call that
// often.
func listenProbe(scan time.Duration) time.Duration { return 5 * scan }

// prober tracks the messages listen sends itself. The watch sends them;
// the publish runs on a goroutine of its own, one at a time, so that a
// slow Redis never holds up the watch; listen hears them.
type prober struct {
	n         atomic.Uint64 // the last probe sent
	published atomic.Uint64 // the last probe Redis took
	back      atomic.Uint64 // the last probe that came back
	busy      atomic.Bool   // a publish is under way
}

// lost reports whether the last probe Redis took has not come back.
func (p *prober) lost() bool {
	n := p.n.Load()
	return n > 0 && p.published.Load() == n && p.back.Load() != n
}

// reset forgets the probes under way: a new subscription starts afresh.
func (p *prober) reset() { p.back.Store(p.n.Load()) }

func (p *prober) send(ctx context.Context, wg *sync.WaitGroup, rdb redis.UniversalClient, channel string) {
	if !p.busy.CompareAndSwap(false, true) {
		return // the last publish is still under way: Redis is slow, not the subscription
	}
	n := p.n.Add(1)
	wg.Go(func() {
		defer p.busy.Store(false)
		if rdb.Publish(ctx, channel, strconv.FormatUint(n, 10)).Err() == nil {
			p.published.Store(n)
		}
	})
}

// heard records a probe that came back.
func (p *prober) heard(payload string) {
	n, err := strconv.ParseUint(payload, 10, 64)
	if err != nil || n > p.n.Load() {
		return
	}
	for {
		back := p.back.Load()
		if n <= back || p.back.CompareAndSwap(back, n) {
			return
		}
	}
}

// route hands one pub/sub message to the movers or the consumers.
func (c *Client) route(r *runtime, m any) {
	wake, rdy := keys.WakeChannel(c.cfg.Prefix), keys.ReadyChannel(c.cfg.Prefix)
	switch m := m.(type) {
	case *redis.Subscription:
		if m.Kind == "subscribe" && m.Channel == wake {
			c.lookEverywhere(r)
		}
	case *redis.Message:
		switch m.Channel {
		case wake:
			r.mover.Wake(m.Payload)
		case rdy:
			if topic, n, ok := keys.ParseAddress(m.Payload); ok {
				c.group.Notify(topic, n)
			}
		case keys.BroadcastChannel(c.cfg.Prefix):
			c.group.Deliver(m.Payload)
		}
	}
}

// Wake makes a started client look now at what may have fallen due, as
// it does after lost notifications: its movers scan their buckets, its
// listeners their ready lists, its schedules their ticks. It returns at
// once; the looks run on the client's goroutines. A test that moves the
// Redis server's clock calls it (package redeqtest does, in Advance), so
// what the move made due runs without waiting for a scan; a service need
// not. Before Start and after Shutdown it does nothing.
func (c *Client) Wake() {
	c.mu.Lock()
	r, closed := c.run, c.closed
	c.mu.Unlock()
	if r == nil || closed {
		return
	}
	c.lookEverywhere(r)
	c.pokeSchedules()
}

// lookEverywhere makes the movers rescan their buckets and the listeners
// look at every ready list once, as lost notifications would have made
// them.
func (c *Client) lookEverywhere(r *runtime) {
	r.mover.Rescan()
	for _, topic := range c.group.Topics() {
		for n := range c.cfg.Concurrency {
			c.group.Notify(topic, n)
		}
	}
}

func (r *runtime) pubsub() *redis.PubSub {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	return r.ps
}

// resubscribe replaces r's subscription with a new one on a new
// connection, or returns nil once Shutdown closed it. Its confirmations
// make route rescan and look at every ready list, as after any
// reconnection.
func (c *Client) resubscribe(ctx context.Context, r *runtime) *redis.PubSub {
	var node *redis.Client
	if cc, ok := c.rdb.(*redis.ClusterClient); ok {
		var pings sync.WaitGroup
		node, _ = firstMaster(ctx, cc, &pings, func(string, error) {})
		r.wg.Go(pings.Wait)
	}
	ps := subscribeOn(ctx, c.rdb, node, r.chans)
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		_ = ps.Close()
		return nil
	}
	old := r.ps
	r.ps = ps
	r.mu.Unlock()
	_ = old.Close()
	return ps
}

// closePubSub closes the subscription for good.
func (r *runtime) closePubSub() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	return r.ps.Close()
}

// Shutdown stops the client gracefully, like http.Server.Shutdown: it
// stops fetching, waits for running handlers until ctx ends or
// ShutdownTimeout passes, cancels the handlers still running, applies the
// outcomes handlers returned, and rolls every job still in this client's
// in-flight sets back to its bucket due now, without spending an attempt
// (with CrashRollback; otherwise the reaper recovers them after
// ConsumerTimeout). A job whose handler still runs then (it ignores its
// context, or winds down for longer than a 100 ms grace) stays in flight,
// so that no other client runs it beside its handler: when the handler
// returns, its outcome is applied (or, canceled, the job goes back), and
// should it never return, the reaper recovers the job ConsumerTimeout
// after Shutdown. Then Shutdown stops the heartbeat, the reaper,
// the movers and the subscription, and returns once their goroutines
// have ended.
// When it had to cancel running handlers, it returns an error wrapping
// ctx.Err(), or context.DeadlineExceeded when ShutdownTimeout passed
// first (the rollback still happened); else an error of the rollback, or
// nil. A Shutdown of a client never started just closes it; one called
// while Start still runs returns at once, and that Start stops what it
// started and returns ErrClientClosed. Later calls to Shutdown, Start and Register return
// ErrClientClosed; Add, Get and Delete keep working, except on a client
// from Open, whose Redis connection Shutdown closes last.
func (c *Client) Shutdown(ctx context.Context) error {
	if ctx == nil {
		return pool.ErrNilContext
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClientClosed
	}
	c.closed = true
	r := c.run
	if c.starting {
		// Start is still calling Redis: it stops what it started once
		// those calls end (go-redis's own timeouts bound them).
		c.startCancel()
		c.mu.Unlock()
		return nil
	}
	c.mu.Unlock()
	return c.stop(ctx, r)
}

// stop is Shutdown of a client whose runtime is r (nil: never started).
func (c *Client) stop(ctx context.Context, r *runtime) error {
	// Last, once nothing uses the connection: the jobs Shutdown left in
	// flight for their handlers are concluded through it when the
	// handlers return, so it closes then, or ConsumerTimeout later, when
	// the reaper may have taken them anyway.
	defer func() {
		if !c.ownsRedis {
			return
		}
		if c.group.Kept() == 0 {
			c.closeOwnRedis()
			return
		}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), c.cfg.ConsumerTimeout)
			defer cancel()
			c.group.WaitKept(ctx)
			c.closeOwnRedis()
		}()
	}()
	if r == nil {
		return nil
	}
	err := c.group.Shutdown(ctx)
	r.cancel()
	// The subscription closes and the movers release their locks; one
	// stuck on a Redis that does not answer is not waited for past the
	// budget (it ends once go-redis's own timeouts fire: a subscription
	// reconnecting holds its lock through the handshake, whatever ctx).
	budget, cancel := c.group.Budget(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() {
		if cerr := r.closePubSub(); cerr != nil && !errors.Is(cerr, redis.ErrClosed) {
			c.env.Logger.Debug("redeq: closing the subscription", "err", cerr)
		}
		r.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-budget.Done():
		c.env.Logger.Warn("redeq: shutdown did not wait for the subscription and movers stuck on redis")
	}
	return err
}

// ConsumerID is this client's consumer id: its heartbeats and in-flight
// lists carry it.
func (c *Client) ConsumerID() string { return c.group.ID() }

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

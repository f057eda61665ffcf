package consumer

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redeq-go/redeq/internal/env"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/script"
	"github.com/redeq-go/redeq/lock"
)

var (
	//go:embed recover.lua
	recoverSource string
	recoverScript = script.New(recoverSource)
	//go:embed silent.lua
	silentSource string
	silentScript = script.New(silentSource)
	//go:embed gone.lua
	goneSource string
	goneScript = script.New(goneSource)
	// forget.lua runs in a pipeline, one call per topic, as EVAL: a
	// pipeline cannot fall back from EVALSHA on NOSCRIPT.
	//go:embed forget.lua
	forgetSource string
	forgetLua    = script.Source(forgetSource)
)

const (
	modeRecover  = "recover"
	modeRollback = "rollback"
	// recoverBatch bounds the deliveries one recover script call handles.
	recoverBatch = 500
	// silentBatch bounds the silent consumers one reaper pass handles; the
	// next pass takes the rest.
	silentBatch = 100
)

// ReapInterval is how often the reaper looks for silent consumers: a fifth
// of ConsumerTimeout, so a crashed consumer's jobs run again within about
// 1.2 x ConsumerTimeout after its last heartbeat (plus HeartbeatInterval
// when it fetched just before it died).
func (g *Group) ReapInterval() time.Duration { return g.cfg.ConsumerTimeout / 5 }

// reapLoop reaps every ReapInterval, while SetReaper's function lets it.
// After its own calls to Redis failed
// (an outage, a partition), it waits a full ConsumerTimeout of working
// calls before it reaps again: every live consumer was cut off too, and
// must get the chance to heartbeat before anyone counts it as dead.
func (g *Group) reapLoop(ctx context.Context) {
	t := time.NewTimer(g.ReapInterval())
	defer t.Stop()
	var bo env.Backoff
	bo.Max = g.cfg.ConsumerTimeout
	healthySince := g.env.Clock.Now()
	down := false   // the last pass failed or stalled
	looking := true // the last pass looked (SetReaper)
	last, wait := healthySince, g.ReapInterval()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		start := g.env.Clock.Now()
		if start.Sub(last) > wait+2*g.ReapInterval() {
			healthySince = start // this process itself stalled (a pause, a stop)
		}
		wait = g.ReapInterval()
		if g.reaps != nil && !g.reaps() {
			// Others look. This client made no calls meanwhile, so it
			// does not know of an outage they saw: when it looks again,
			// it counts its health from then, like a client that starts.
			looking, last = false, start
			t.Reset(wait)
			continue
		}
		if !looking {
			looking, healthySince, down = true, start, false
		}
		// The first pass that works after a failure only counts from its
		// own start: live consumers cut off by the same outage get a full
		// ConsumerTimeout to heartbeat again before anyone reaps.
		_, err := g.reap(ctx, !down && start.Sub(healthySince) >= g.cfg.ConsumerTimeout)
		last = g.env.Clock.Now()
		switch {
		case err == nil:
			if down {
				healthySince, down = start, false
			}
			bo.Reset()
		case ctx.Err() != nil:
			return
		case errors.Is(err, errStalled):
			if !down { // once an outage, not once a pass
				g.env.Logger.Info("redeq: redis answered late; the reaper waits a ConsumerTimeout before reaping")
			}
			down = true
		default:
			if errors.Is(err, errUnreachable) {
				down = true
			} else if down {
				healthySince, down = start, false // heartbeats read: some recoveries failed
			}
			wait = bo.Next()
			g.env.Failure("redeq: reaper failed", "err", err, "retry_in", wait)
		}
		t.Reset(wait)
	}
}

var (
	// errUnreachable marks a reaper pass that could not read the heartbeats.
	errUnreachable = errors.New("redeq: reaper cannot reach redis")
	// errStalled marks a pass whose look for silent consumers took longer
	// than a ReapInterval: Redis was paused or overloaded, and live
	// consumers' heartbeats may be waiting behind it.
	errStalled = errors.New("redeq: reaper pass stalled")
)

// Reap recovers the in-flight jobs of every consumer silent for longer
// than ConsumerTimeout (a page of them), in every bucket of the topics each
// listened to, and returns how many jobs it handed back. Each consumer is
// reaped under its own lock; one whose buckets cannot be read is left for
// a later pass and does not hold up the others.
func (g *Group) Reap(ctx context.Context) (int, error) { return g.reap(ctx, true) }

func (g *Group) reap(ctx context.Context, act bool) (int, error) {
	start := g.env.Clock.Now()
	v, err := silentScript.Run(ctx, g.rdb, g.aliveKeys(), g.cfg.ConsumerTimeout.Milliseconds(), g.silentAt.Load(), silentBatch).StringSlice()
	if err != nil {
		return 0, fmt.Errorf("%w: %w", errUnreachable, err)
	}
	if g.env.Clock.Now().Sub(start) > g.ReapInterval() {
		return 0, errStalled // heartbeats may be waiting behind the read
	}
	if len(v)%silentFields != 1 {
		return 0, fmt.Errorf("reaper: bad reply %q", v)
	}
	// Page through the silent consumers, so that ones that cannot be
	// finished (their node is down) do not hide those behind them.
	if found := (len(v) - 1) / silentFields; found == silentBatch {
		g.silentAt.Add(int64(found))
	} else {
		g.silentAt.Store(0)
	}
	if !act {
		return 0, nil
	}
	look := v[0]
	var found []silent
	for i := 1; i < len(v); i += silentFields {
		s := silent{cid: v[i], beat: v[i+1], look: look, timeout: g.cfg.ConsumerTimeout}
		if s.cid == g.cid {
			continue
		}
		if !s.silentFor(v[i+3]) {
			continue // its own ConsumerTimeout is longer, and has not passed
		}
		if v[i+2] != "" {
			s.topics = strings.Split(v[i+2], "\n")
		}
		found = append(found, s)
	}
	// Side by side: a consumer whose buckets live on a node that hangs
	// does not hold up the others.
	var total reapTotal
	parallel(len(found), func(i int) {
		n, err := g.reapConsumer(ctx, found[i])
		total.add("", n, false, err)
	})
	return total.n, errors.Join(total.errs...)
}

// reapParallel bounds the consumers one reaper pass recovers at a time,
// and the buckets it recovers of each at a time.
const reapParallel = 8

// parallel runs f(0) .. f(n-1), reapParallel at a time, and waits for
// them.
func parallel(n int, f func(i int)) {
	if n == 1 {
		f(0)
		return
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, reapParallel)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			f(i)
		})
	}
	wg.Wait()
}

// reapTotal adds up what parallel recoveries did: the jobs they
// recovered (in all, and per topic when they name one), their errors, and
// whether one found its list busy.
type reapTotal struct {
	mu      sync.Mutex
	n       int
	byTopic map[string]int
	busy    bool
	errs    []error
}

func (t *reapTotal) add(topic string, n int, busy bool, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n += n
	if topic != "" {
		if t.byTopic == nil {
			t.byTopic = map[string]int{}
		}
		t.byTopic[topic] += n
	}
	t.busy = t.busy || busy
	if err != nil {
		t.errs = append(t.errs, err)
	}
}

// within runs call with a ctx that ends after d, and stops waiting for it
// then: go-redis bounds a read by ctx only with ContextTimeoutEnabled, and
// a new connection's handshake never, so without this a hung node would
// hold the reaper for its read timeout and retries. The call left behind
// ends by itself when go-redis gives up.
func within[T any](ctx context.Context, d time.Duration, call func(context.Context) (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	type reply struct {
		v   T
		err error
	}
	done := make(chan reply, 1)
	go func() {
		defer cancel()
		v, err := call(ctx)
		done <- reply{v, err}
	}()
	select {
	case r := <-done:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("no reply within %v: %w", d, ctx.Err())
	}
}

// recoverCallTimeout bounds each recover script call of a reaper: a node
// that hangs (paused, cut off) costs the pass that long, not go-redis's
// timeouts and retries. A call cut short may still run later; it is
// fenced by the look that found the consumer, like any rerun.
func (g *Group) recoverCallTimeout() time.Duration {
	return max(g.ReapInterval(), time.Second)
}

// silentFields is the number of fields per consumer in silent.lua's reply.
const silentFields = 4

// silent is a consumer silent for longer than ConsumerTimeout, as a look
// at the heartbeats found it.
type silent struct {
	cid     string
	beat    string        // its last heartbeat, unix ms, as Redis wrote it
	look    string        // when the look found it silent, unix ms (Redis clock)
	topics  []string      // Address(topic, buckets) of the topics it listened to
	timeout time.Duration // the longer of its own ConsumerTimeout and the reaper's
}

// silentFor reports whether s has been silent for longer than its own
// ConsumerTimeout (own, ms, as its heartbeat recorded it; "" when it did
// not), as well as the reaper's, which found it: a consumer configured to
// stall longer than the reaper's clients allow keeps its jobs as long as
// it said it would. It sets s.timeout to the longer of the two.
func (s *silent) silentFor(own string) bool {
	ms, err := strconv.ParseInt(own, 10, 64)
	if err != nil || ms <= 0 {
		return true // written by a client that does not record its timeout
	}
	if d := time.Duration(ms) * time.Millisecond; d > s.timeout {
		s.timeout = d
	}
	beat, err1 := strconv.ParseInt(s.beat, 10, 64)
	look, err2 := strconv.ParseInt(s.look, 10, 64)
	if err1 != nil || err2 != nil {
		return true
	}
	return look-beat > ms
}

// reapConsumer recovers the deliveries a silent consumer fetched up to
// the look that found it, in every bucket of every topic it listened to,
// then forgets it if everything was recovered and it has not heartbeat
// since. One reaper at a time works on a consumer.
func (g *Group) reapConsumer(ctx context.Context, s silent) (int, error) {
	mu := g.locker.NewMutex(keys.ReapLock(g.cfg.Prefix, s.cid), lock.WithExpiry(g.reapLockExpiry()))
	held, err := mu.TryLock(ctx)
	if err != nil || !held {
		if err != nil {
			return 0, fmt.Errorf("reaper %s: %w", s.cid, err)
		}
		return 0, nil // another client reaps it now
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = mu.Unlock(uctx)
	}()
	clean := true
	var errs []error
	type list struct {
		topic string
		b     int
	}
	var lists []list
	for _, line := range s.topics {
		topic, buckets, ok := keys.ParseAddress(line)
		if !ok || buckets < 1 {
			errs = append(errs, fmt.Errorf("reaper %s: bad topic entry %q", s.cid, line))
			clean = false
			continue
		}
		for b := range buckets {
			lists = append(lists, list{topic, b})
		}
	}
	var lt reapTotal
	parallel(len(lists), func(i int) {
		l := lists[i]
		n, busy, err := g.recoverList(ctx, l.topic, l.b, s.cid, modeRecover, s.look, s.timeout)
		lt.add(l.topic, n, busy, err)
	})
	// A list that failed, or that its consumer fetched into lately (or
	// after the look), leaves the consumer for a later look to decide.
	clean = clean && len(lt.errs) == 0 && !lt.busy
	errs = append(errs, lt.errs...)
	recovered := lt.byTopic
	total := 0
	for _, line := range s.topics {
		topic, _, ok := keys.ParseAddress(line)
		n, seen := recovered[topic]
		if !ok || !seen {
			continue
		}
		delete(recovered, topic) // a topic listed twice counts once
		total += n
		g.returned(topic, n, true)
		if n > 0 {
			g.env.Logger.Info("redeq: recovered the jobs of a silent consumer", "topic", topic, "consumer", s.cid, "jobs", n)
		}
	}
	if clean {
		gone, err := goneScript.Run(ctx, g.rdb, g.aliveKeys(), s.cid, s.beat, s.timeout.Milliseconds()).Int()
		if err != nil {
			errs = append(errs, fmt.Errorf("reaper %s: %w", s.cid, err))
		} else if gone == 1 {
			g.forget(ctx, s)
		}
	}
	return total, errors.Join(errs...)
}

// forget takes a consumer the reaper forgot out of its topics' consumer
// sets, except those it joined again since the heartbeat the reaper read:
// it came back between the reaper's look and now, and stays visible.
func (g *Group) forget(ctx context.Context, s silent) {
	pipe := g.rdb.Pipeline()
	for _, line := range s.topics {
		if topic, _, ok := keys.ParseAddress(line); ok {
			pipe.Eval(ctx, forgetLua, []string{keys.ForTopic(g.cfg.Prefix, topic).Consumers()}, s.cid, s.beat)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil {
		g.env.Logger.Warn("redeq: cannot remove a forgotten consumer from its topics", "consumer", s.cid, "err", err)
	}
}

// reapLockExpiry bounds how long a reaper that died mid-pass holds up the
// recovery of a consumer: a third of ConsumerTimeout, at most LockExpiry.
// A pass that outlives it is harmless: every script it runs is fenced.
func (g *Group) reapLockExpiry() time.Duration {
	return min(g.cfg.LockExpiry, g.cfg.ConsumerTimeout/3)
}

// recoverList empties one in-flight set of consumer cid in bucket b of
// topic, in bounded script calls, and returns the deliveries handled. In
// recover mode it does nothing, and reports busy, while the set holds a
// delivery fetched within the last quiet (the consumer's ConsumerTimeout)
// or while the consumer's lease on the bucket lives (leaseLoop).
func (g *Group) recoverList(ctx context.Context, topic string, b int, cid, mode, declared string, quiet time.Duration) (n int, busy bool, err error) {
	k := keys.ForBucket(g.cfg.Prefix, topic, b)
	for {
		call := func(ctx context.Context) ([]int64, error) {
			return recoverScript.Run(ctx, g.rdb,
				[]string{k.InFlight(cid), k.Ready(), k.Pool(), k.Scheduled(), k.Dead(), k.Reasons(), k.State(), k.Errors(), k.LimitPrefix(), k.Lease(cid), k.Due()},
				mode, recoverBatch, g.cfg.MaxRecoveries, g.cfg.DeadRetention,
				keys.ReadyChannel(g.cfg.Prefix), keys.WakeChannel(g.cfg.Prefix), keys.Address(topic, b),
				cid, quiet.Milliseconds(), declared).Int64Slice()
		}
		var v []int64
		var err error
		if mode == modeRecover {
			v, err = within(ctx, g.recoverCallTimeout(), call)
		} else {
			v, err = call(ctx)
		}
		if err != nil {
			return n, false, fmt.Errorf("%s %s of %s: %w", mode, keys.Address(topic, b), cid, err)
		}
		if len(v) != 4 {
			return n, false, fmt.Errorf("%s %s: bad reply %v", mode, keys.Address(topic, b), v)
		}
		n += int(v[0])
		if v[2] > 0 {
			g.env.Logger.Warn("redeq: jobs recovered too often sent to the dead set", "topic", topic, "bucket", b, "jobs", v[2])
		}
		if v[3] == 1 {
			return n, true, nil
		}
		if v[1] == 0 {
			return n, false, nil
		}
	}
}

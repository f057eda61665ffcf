package bucket

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/internal/env"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/lock"
)

// MoverConfig is what the mover needs of the client's settings.
type MoverConfig struct {
	Prefix       string
	ScanInterval time.Duration
	MoveBatch    int
	LockExpiry   time.Duration
	// RetireAfter is how long a topic stays without jobs and consumers
	// before it is retired; 0 or less: never.
	RetireAfter time.Duration
	// Listened are this client's listened topics and their bucket counts:
	// one missing from the topic set (a failover lost its record, or a
	// retirement raced the listener's start) is recorded again at the
	// next read of the set, so its jobs move.
	Listened map[string]int
}

// Mover carries due jobs from the buckets this client owns to their ready
// lists. The started clients share out the buckets of every known topic
// (see Fleet); for each bucket it owns, a client tries the bucket's lock.
// The holder moves due jobs in bounded batches, sleeps until the next due
// time (at most IdleScan), and is woken early by Wake. An owner that cannot
// take the lock (the previous owner's lock lives on) retries it every
// ScanInterval and meanwhile moves the jobs overdue by more than two
// ScanIntervals: a dead holder's due jobs move within seconds rather than
// after its lock expires. Moves are atomic, so two movers never move a
// job twice.
type Mover struct {
	rdb     redis.UniversalClient
	locker  *lock.Locker
	reg     *Registry
	fleet   *Fleet
	cfg     MoverConfig
	env     env.Env
	onReady func(topic string, n int)

	mu          sync.Mutex
	loops       map[string]*loop     // bucket address -> its running loop
	known       map[string]int       // topics of the last reread
	unknown     map[string]bool      // topics named by a wake-up but not known
	asked       map[string]time.Time // lostAsked: when the heartbeats were read for a topic without a count
	unreachable map[string]bool      // addresses this client failed to move for UnreachableAfter
	refresh     chan struct{}
	reassign    chan struct{} // the fleet's shares changed
	announce    chan struct{} // announce now: unreachable changed
	retired     chan []string // topics the tender retired
}

type loop struct {
	wake   chan struct{}
	cancel context.CancelFunc
	// freed is set by a handover message: the bucket's last holder
	// released its lock, so the loop tries it at once, not a ScanInterval
	// after its last try.
	freed atomic.Bool
}

// FleetChanged is the wake-up message a client publishes when it joins
// the fleet (its first announcement) or leaves it: every mover announces
// at once, so the buckets rendezvous hashing moves change hands now, not
// at the next announcement. Braces, which no topic name holds, keep it
// apart from every bucket's address.
const FleetChanged = "{fleet}"

// handoverMark ends the wake-up message a mover publishes for a bucket
// whose lock it released because it no longer owns it: its address, then
// this mark.
const handoverMark = "\x00freed"

// NewMover returns a Mover that shares the buckets out with the rest of
// fleet. onReady, if not nil, is called after a move left jobs on a ready
// list, so local fetchers need not wait for pub/sub.
func NewMover(c redis.UniversalClient, locker *lock.Locker, reg *Registry, fleet *Fleet, cfg MoverConfig, e env.Env, onReady func(topic string, n int)) *Mover {
	return &Mover{
		rdb: c, locker: locker, reg: reg, fleet: fleet, cfg: cfg, env: e, onReady: onReady,
		loops:       map[string]*loop{},
		known:       map[string]int{},
		unknown:     map[string]bool{},
		unreachable: map[string]bool{},
		refresh:     make(chan struct{}, 1),
		reassign:    make(chan struct{}, 1),
		announce:    make(chan struct{}, 1),
		retired:     make(chan []string, 1),
	}
}

// UnreachableAfter is how long an owner fails to move a bucket before it
// tells the fleet that it cannot (see Fleet), so that another client
// takes the bucket: three ScanIntervals.
func (c MoverConfig) UnreachableAfter() time.Duration { return 3 * c.ScanInterval }

// StepTimeout is how long each step of a bucket's loop (its lock call
// and one move) may go unanswered: UnreachableAfter, and at least
// MinStepTimeout, since a busy server or machine answers late, not never.
// A step that has not answered by then counts as failed from its start,
// as a refused call does, and flags its bucket at once: a node that hangs
// is handed over within StepTimeout, however long go-redis's own timeouts
// and retries make the call wait. The call itself is not cut short (a
// deadline would fail moves that wait for a connection of a busy pool);
// the loop waits for it to end before the next step (the lock is one
// loop's own), and tells the fleet meanwhile.
func (c MoverConfig) StepTimeout() time.Duration {
	return max(c.UnreachableAfter(), MinStepTimeout)
}

// MinStepTimeout is the shortest StepTimeout.
const MinStepTimeout = time.Second

// probeEvery is how often a client looks whether the buckets it cannot
// move are back within its reach.
func (c MoverConfig) probeEvery() time.Duration { return 2 * c.ScanInterval }

// IdleScan is the longest an owner waits between two scans of a bucket
// that has nothing due sooner: five ScanIntervals, and no more than a
// third of LockExpiry, so each scan can also keep the lock. Wake-ups
// from Add, not scans, start the moves of new jobs; the scan covers a
// lost wake-up, and repeats a lost ready notification.
func (c MoverConfig) IdleScan() time.Duration {
	return min(5*c.ScanInterval, c.LockExpiry/3)
}

// Wake asks the owner of the bucket at address (topic#n) to move now. A
// topic this client does not know makes it reread the topic set, and
// record the topic again when it was retired or lost.
func (m *Mover) Wake(address string) {
	if address == FleetChanged {
		signal(m.announce)
		return
	}
	address, freed := strings.CutSuffix(address, handoverMark)
	topic, _, ok := keys.ParseAddress(address)
	if !ok {
		return
	}
	if freed {
		// Not a job's wake-up: a released lock, also of a topic retired or
		// unknown here, which it must not record again.
		m.mu.Lock()
		l, running := m.loops[address]
		m.mu.Unlock()
		if running {
			l.freed.Store(true)
			signal(l.wake)
		}
		return
	}
	m.mu.Lock()
	l, running := m.loops[address]
	_, known := m.known[topic]
	if !known {
		m.unknown[topic] = true
	}
	m.mu.Unlock()
	switch {
	case running:
		signal(l.wake)
	case !known:
		signal(m.refresh)
	}
}

// Refresh makes the mover reread the topic set soon.
func (m *Mover) Refresh() { signal(m.refresh) }

// Rescan makes every bucket loop scan now, and the mover announce itself
// now, so that a change of the fleet's shares is taken too (the loops of
// buckets it gained start with a scan): after the subscription
// reconnected, wake-ups may have been lost.
func (m *Mover) Rescan() {
	signal(m.announce)
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, l := range m.loops {
		signal(l.wake)
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// Run announces this client every ScanInterval, rereads the topic set
// every five, runs a loop for each bucket this client owns, and tends the
// retirement of idle topics, until ctx ends. Then it stops its loops,
// which release their locks, leaves the fleet, and returns once every
// loop has ended.
//
// Announcing, reading the topics, tending retirement and looking whether
// unreachable buckets are back each run on a goroutine of their own: a
// call that waits on a node that does not answer holds up only what
// needs that node, never the announcements that keep this client's share.
// A read of the topics that fails for some (their meta lives on a node
// that is down) keeps the others and retries those soon.
func (m *Mover) Run(ctx context.Context) {
	var loops, bg sync.WaitGroup
	defer func() {
		m.mu.Lock()
		for addr, l := range m.loops {
			l.cancel()
			delete(m.loops, addr)
		}
		m.mu.Unlock()
		loops.Wait()
		bg.Wait()
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		if err := m.fleet.Leave(lctx); err != nil {
			m.env.Logger.Warn("redeq: mover cannot leave the fleet", "err", err)
		} else {
			m.fleetChanged(lctx)
		}
	}()
	snap := make(chan map[string]int, 1)
	bg.Go(func() { m.announceLoop(ctx) })
	bg.Go(func() { m.tendLoop(ctx, snap) })
	bg.Go(func() { m.probeLoop(ctx) })
	bo := env.Backoff{Max: 5 * m.cfg.ScanInterval}
	var topics map[string]int
	var reread time.Time // when the topic set is next read
	reads := make(chan topicRead, 1)
	reading := false // a read of the topic set is under way
	// fallback moves, while the topic set cannot be read and never was,
	// the topics whose bucket counts this client has read (its
	// listeners' and producers'), as they are now: a count checked after
	// the first look (its meta's node answered late, or go-redis waited
	// for the cluster's topology) is moved from the next pass on, not
	// only once the set answers.
	everRead := false
	fallback := func() {
		if everRead {
			return
		}
		topics = m.reg.Checked()
		m.mu.Lock()
		m.known = topics // their wake-ups do not reread the set
		m.mu.Unlock()
	}
	// apply takes a read of the topic set; false: ctx ended.
	apply := func(res topicRead) bool {
		now := m.env.Clock.Now()
		err := res.err
		if res.topics != nil {
			// Those that could be read: the others wait for the next
			// read, and hold up nothing else.
			everRead = true
			topics = res.topics
			select {
			case <-snap:
			default:
			}
			snap <- maps.Clone(topics)
		} else {
			fallback()
		}
		if err != nil {
			if ctx.Err() != nil {
				return false
			}
			wait := bo.Next()
			reread = now.Add(wait)
			m.env.Failure("redeq: mover cannot read every topic", "err", err, "retry_in", wait)
		} else {
			bo.Reset()
			reread = now.Add(5 * m.cfg.ScanInterval)
		}
		return true
	}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-m.refresh:
			reread = time.Time{}
		case <-m.reassign:
		case res := <-reads:
			reading = false
			if !apply(res) {
				return
			}
		case gone := <-m.retired:
			// Unknown from now on: a wake-up naming one records it again.
			m.mu.Lock()
			for _, topic := range gone {
				delete(topics, topic)
			}
			m.mu.Unlock()
		}
		now := m.env.Clock.Now()
		if !reading && !now.Before(reread) {
			// The read runs on a goroutine of its own and is waited for
			// StepTimeout at most: a node of the topic set that hangs
			// holds up no move of the topics already known.
			reading = true
			bg.Go(func() { reads <- m.readTopics(ctx) })
			step := time.NewTimer(m.cfg.StepTimeout())
			select {
			case <-ctx.Done():
				step.Stop()
				return
			case res := <-reads:
				reading = false
				if !apply(res) {
					step.Stop()
					return
				}
			case <-step.C:
				m.env.Failure("redeq: mover gets no answer from the topic set's node; it moves the topics it knows", "within", m.cfg.StepTimeout())
			}
			step.Stop()
		}
		fallback()
		m.assign(ctx, &loops, topics)
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		next := reread
		if reading { // the read's answer wakes the loop
			next = m.env.Clock.Now().Add(5 * m.cfg.ScanInterval)
		}
		timer.Reset(max(next.Sub(m.env.Clock.Now()), time.Millisecond))
	}
}

// fleetChanged tells every mover that this client joined or left the
// fleet: they announce at once and hand over the buckets that change
// hands (each publishing a handover for the buckets it releases). A lost
// message costs only the wait for the next announcement.
func (m *Mover) fleetChanged(ctx context.Context) {
	if err := m.rdb.Publish(ctx, keys.WakeChannel(m.cfg.Prefix), FleetChanged).Err(); err != nil && ctx.Err() == nil {
		m.env.Logger.Warn("redeq: mover cannot tell the fleet it joined or left", "err", err)
	}
}

// topicRead is one read of the topic set (readTopics).
type topicRead struct {
	topics map[string]int // nil: none could be read
	err    error
}

// readTopics reads the topic set and the topics' bucket counts, records
// again the topics wake-ups named and the listened topics the set lacks,
// and the bucket counts a failover lost.
func (m *Mover) readTopics(ctx context.Context) topicRead {
	got, lost, err := m.reg.TopicsAndLost(ctx)
	if got != nil {
		err = errors.Join(err, m.recordUnknown(ctx, got))
		m.recordCounts(ctx, got, lost)
	}
	return topicRead{topics: got, err: err}
}

// announceLoop announces this client every ScanInterval, and at once
// when the buckets it cannot move changed, and has the loops reassigned
// when the fleet's shares changed.
func (m *Mover) announceLoop(ctx context.Context) {
	joined := false
	var told sync.WaitGroup // the message that this client joined
	defer told.Wait()
	bo := env.Backoff{Max: m.cfg.ScanInterval}
	timer := time.NewTimer(0)
	defer timer.Stop()
	var warned []string // the outdated clients last logged
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-m.announce:
		}
		wait := m.cfg.ScanInterval
		changed, err := m.fleet.Announce(ctx)
		switch {
		case err != nil && ctx.Err() != nil:
			return
		case err != nil:
			wait = bo.Next()
			m.env.Failure("redeq: mover cannot reach redis", "err", err, "retry_in", wait)
		default:
			bo.Reset()
			if changed {
				signal(m.reassign)
			}
			if out := m.fleet.Outdated(); !slices.Equal(out, warned) {
				warned = out
				if len(out) > 0 {
					// A client of an older version started after the
					// switch: it drops the jobs of the current format it
					// meets in a ready list (docs/operations.md).
					m.env.Logger.Error("redeq: clients that cannot read the job state format in force are running: stop them; never roll back past UpgradeFormat",
						"clients", out)
				}
			}
			if !joined {
				joined = true
				// On a goroutine of its own, within a step's time: a
				// PUBLISH may go to a master that does not answer, and
				// the announcements must go on meanwhile (a lost message
				// costs only the wait for the others' next announcement).
				told.Go(func() {
					pctx, cancel := context.WithTimeout(ctx, m.cfg.StepTimeout())
					defer cancel()
					m.fleetChanged(pctx)
				})
			}
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
	}
}

// setUnreachable records whether this client can move the bucket at
// address, and tells the fleet when that changed.
func (m *Mover) setUnreachable(address string, cannot bool) {
	m.mu.Lock()
	if m.unreachable[address] == cannot {
		m.mu.Unlock()
		return
	}
	if cannot {
		m.unreachable[address] = true
	} else {
		delete(m.unreachable, address)
	}
	// Under m.mu, so that two changes reach the fleet in their order.
	m.fleet.SetUnreachable(slices.Collect(maps.Keys(m.unreachable)))
	m.mu.Unlock()
	if cannot {
		m.env.Failure("redeq: mover cannot move a bucket; the other clients take it over", "bucket", address, "after", m.cfg.UnreachableAfter())
	} else {
		m.env.Recovery("redeq: mover can move a bucket again", "bucket", address)
	}
	signal(m.announce)
}

// probeLoop looks every probeEvery whether the buckets this client could
// not move are within its reach again (one pipeline over them), and tells
// the fleet of those that are, so they come back to it.
func (m *Mover) probeLoop(ctx context.Context) {
	tick := time.NewTicker(m.cfg.probeEvery())
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		m.mu.Lock()
		var addrs []string
		for addr := range m.unreachable {
			if _, running := m.loops[addr]; !running {
				addrs = append(addrs, addr) // a running loop tells itself
			}
		}
		m.mu.Unlock()
		if len(addrs) == 0 {
			continue
		}
		pipe := m.rdb.Pipeline()
		cmds := make([]*redis.IntCmd, len(addrs))
		for i, addr := range addrs {
			topic, n, _ := keys.ParseAddress(addr)
			cmds[i] = pipe.Exists(ctx, keys.ForBucket(m.cfg.Prefix, topic, n).Scheduled())
		}
		_, _ = pipe.Exec(ctx) // each command carries its own error
		for i, cmd := range cmds {
			if cmd.Err() == nil {
				m.setUnreachable(addrs[i], false)
			}
		}
	}
}

// setKnown sets topic's bucket count in topics, which Wake reads as
// m.known from the listen loop: under m.mu.
func (m *Mover) setKnown(topics map[string]int, topic string, n int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	topics[topic] = n
}

// recordUnknown records again the topics that wake-ups named but the
// topic set lacks: a producer that still knew a retired (or lost) topic
// added a job to it.
func (m *Mover) recordUnknown(ctx context.Context, topics map[string]int) error {
	m.mu.Lock()
	var names []string
	for topic := range m.unknown {
		if _, ok := topics[topic]; !ok {
			names = append(names, topic)
		}
	}
	clear(m.unknown)
	m.known = topics
	m.mu.Unlock()
	for _, topic := range names {
		n, err := m.reg.Restore(ctx, topic)
		if err != nil {
			return err
		}
		if n > 0 {
			m.env.Logger.Info("redeq: recorded a topic again: a job was added to it after it was retired or lost", "topic", topic)
			m.setKnown(topics, topic, n)
		}
	}
	for topic, want := range m.cfg.Listened {
		if _, ok := topics[topic]; ok {
			continue
		}
		n, err := m.reg.Restore(ctx, topic)
		if err == nil && n == 0 {
			// Its bucket count is lost too: record it as the listener
			// did at Start.
			n, err = want, m.reg.Record(ctx, topic, want)
		}
		if err != nil {
			// Not the others' concern: they move on, and this one is
			// tried again at the next read of the set.
			m.env.Failure("redeq: cannot record a listened topic again", "topic", topic, "err", err)
			continue
		}
		m.env.Logger.Warn("redeq: recorded a listened topic again: it was missing from the topic set (a failover lost its record, or a retirement raced the listener)", "topic", topic)
		m.setKnown(topics, topic, n)
	}
	return nil
}

// recordCounts records again the bucket counts a failover lost: those of
// the topics this client owns by name, which it reads each time (one
// pipeline, whatever the cache says, so that the whole fleet reads each
// topic's count once per pass), and those of lost, topics of the set with
// no count, which the client records with its listeners' count or, failing
// that, the count the consumers' heartbeats carry for the topic. Without a
// count, a client skips the topic's buckets, and a client configured with
// another count would record its own.
func (m *Mover) recordCounts(ctx context.Context, topics map[string]int, lost []string) {
	var owned []string
	for topic := range topics {
		if m.fleet.Owns(topic) {
			owned = append(owned, topic)
		}
	}
	gone, err := m.reg.Missing(ctx, owned)
	if err != nil {
		m.env.Failure("redeq: cannot read the bucket counts of topics", "err", err)
	}
	want := map[string]int{}
	for _, topic := range gone {
		want[topic] = topics[topic]
	}
	var heard map[string]int
	for _, topic := range lost {
		if n := m.cfg.Listened[topic]; n > 0 {
			want[topic] = n
			continue
		}
		if !m.lostAsked(topic) {
			continue
		}
		if heard == nil {
			if heard, err = m.reg.Listened(ctx); err != nil {
				m.env.Failure("redeq: cannot read the listened topics", "err", err)
				heard = map[string]int{}
			}
		}
		if n := heard[topic]; n > 0 {
			want[topic] = n
		}
	}
	for topic, n := range want {
		if err := m.reg.Record(ctx, topic, n); err != nil {
			m.env.Failure("redeq: cannot record a topic's bucket count again", "topic", topic, "err", err)
			continue
		}
		m.env.Logger.Warn("redeq: recorded a topic's bucket count again: it was lost (a failover)", "topic", topic, "buckets", n)
		m.setKnown(topics, topic, n)
	}
}

// lostAsked reports whether the heartbeats may be read for topic, a topic
// of the set without a count: once per RecordEvery, since a topic that no
// consumer listens to stays without one until a producer records it.
func (m *Mover) lostAsked(topic string) bool {
	now := m.env.Clock.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.asked == nil {
		m.asked = map[string]time.Time{}
	}
	if at, ok := m.asked[topic]; ok && now.Sub(at) < m.reg.RecordEvery {
		return false
	}
	if len(m.asked) >= maxAsked {
		clear(m.asked)
	}
	m.asked[topic] = now
	return true
}

// maxAsked bounds the topics lostAsked remembers.
const maxAsked = 10_000

// assign starts a loop for each bucket this client owns and stops the
// loops of the buckets it no longer owns; a stopped loop releases its
// lock, so the new owner takes it at once.
func (m *Mover) assign(ctx context.Context, wg *sync.WaitGroup, topics map[string]int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	want := map[string]bool{}
	for topic, n := range topics {
		for b := range n {
			addr := keys.Address(topic, b)
			if !m.fleet.Owns(addr) {
				continue
			}
			want[addr] = true
			if _, running := m.loops[addr]; running {
				continue
			}
			lctx, cancel := context.WithCancel(ctx)
			l := &loop{wake: make(chan struct{}, 1), cancel: cancel}
			m.loops[addr] = l
			wg.Go(func() { m.runBucket(lctx, topic, b, l) })
		}
	}
	for addr, l := range m.loops {
		if !want[addr] {
			l.cancel()
			delete(m.loops, addr)
		}
	}
	forgot := false
	for addr := range m.unreachable {
		if topic, n, _ := keys.ParseAddress(addr); n >= topics[topic] {
			// A topic no longer known, or a bucket past its count.
			delete(m.unreachable, addr)
			forgot = true
		}
	}
	if forgot {
		m.fleet.SetUnreachable(slices.Collect(maps.Keys(m.unreachable)))
	}
}

// runBucket is the loop of one owned bucket.
func (m *Mover) runBucket(ctx context.Context, topic string, n int, l *loop) {
	wake := l.wake
	log := m.env.Logger.With("topic", topic, "bucket", n)
	mu := m.locker.NewMutex(keys.ForBucket(m.cfg.Prefix, topic, n).Lock(), lock.WithExpiry(m.cfg.LockExpiry))
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		held := mu.Held(m.env.Clock.Now())
		if err := mu.Unlock(uctx); err != nil {
			log.Warn("redeq: mover cannot release its lock", "err", err)
		} else if held {
			// The bucket's new owner tries the lock now, not a
			// ScanInterval after its last try.
			if err := m.rdb.Publish(uctx, keys.WakeChannel(m.cfg.Prefix), keys.Address(topic, n)+handoverMark).Err(); err != nil {
				log.Warn("redeq: mover cannot tell the bucket's new owner", "err", err)
			}
		}
	}()
	bo := env.Backoff{Max: 4 * m.cfg.ScanInterval}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var lastTry time.Time
	var failingSince time.Time // start of the first of the steps failing in a row
	addr := keys.Address(topic, n)
	steps := make(chan stepResult, 1)
	for ctx.Err() == nil {
		start := m.env.Clock.Now()
		go func() {
			if l.freed.Swap(false) {
				lastTry = time.Time{} // its last holder let it go: try now
			}
			wait, held, failed := m.step(ctx, topic, n, mu, &lastTry, &bo, log)
			steps <- stepResult{wait, held, failed}
		}()
		r := m.awaitStep(steps, start, &failingSince, addr)
		wait, held, failed := r.wait, r.held, r.failed
		switch {
		case failed:
			if failingSince.IsZero() {
				failingSince = start
			}
			if m.env.Clock.Now().Sub(failingSince) >= m.cfg.UnreachableAfter() {
				m.setUnreachable(addr, true)
			}
		case !failingSince.IsZero() && ctx.Err() == nil:
			failingSince = time.Time{}
			m.setUnreachable(addr, false)
		}
		if wait == 0 {
			continue // a full batch: more may be due
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(wait)
		if !held && !l.freed.Load() {
			// Only the holder acts on wake-ups; drop them meanwhile (but a
			// handover, which makes this loop try the lock).
			select {
			case <-wake:
			default:
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-wake:
		}
	}
}

// stepResult is what one step of a bucket's loop returned.
type stepResult struct {
	wait         time.Duration
	held, failed bool
}

// awaitStep waits for the step that began at start. One that has not
// answered within StepTimeout counts as failing from start (or from the
// first of the steps failing before it), and flags the bucket unreachable
// once that was UnreachableAfter ago, without waiting for go-redis to
// give up; then it waits for the step to end, since the next step may not
// run beside it. A step that answers late is taken as it answered.
func (m *Mover) awaitStep(steps <-chan stepResult, start time.Time, failingSince *time.Time, addr string) stepResult {
	timer := time.NewTimer(m.cfg.StepTimeout())
	defer timer.Stop()
	select {
	case r := <-steps:
		return r
	case <-timer.C:
	}
	if failingSince.IsZero() {
		*failingSince = start
	}
	m.env.Failure("redeq: mover gets no answer from a bucket's node", "bucket", addr, "within", m.cfg.StepTimeout())
	for {
		left := failingSince.Add(m.cfg.UnreachableAfter()).Sub(m.env.Clock.Now())
		if left <= 0 {
			m.setUnreachable(addr, true)
			return <-steps
		}
		timer.Reset(left)
		select {
		case r := <-steps:
			return r
		case <-timer.C:
		}
	}
}

// step takes or keeps the lock and, when held, moves one batch. It returns
// how long to wait before the next step (0: go on at once), whether the
// lock is held, and whether the step failed.
func (m *Mover) step(ctx context.Context, topic string, n int, mu *lock.Mutex, lastTry *time.Time, bo *env.Backoff, log interface {
	Warn(string, ...any)
	Info(string, ...any)
}) (time.Duration, bool, bool) {
	now := m.env.Clock.Now()
	var err error
	held := mu.Held(now)
	switch {
	case !held && now.Sub(*lastTry) >= m.cfg.ScanInterval:
		// Only the bucket's owner tries, so trying often costs little
		// and hands the bucket over quickly when its last owner leaves.
		*lastTry = now
		held, err = mu.TryLock(ctx)
	case mu.ExtendDue(now):
		held, err = mu.Extend(ctx)
	}
	if err == nil && !held {
		// Someone else holds the lock: only pick up what it leaves behind.
		var res MoveResult
		if res, err = moveOverdue(ctx, m.rdb, m.cfg.Prefix, topic, n, m.cfg.MoveBatch, 2*m.cfg.ScanInterval, m.fleet.WritesCurrentFormat()); err == nil {
			bo.Reset()
			if res.Moved > 0 {
				// Rate-limited: after an outage every bucket's holder is
				// behind at once.
				m.env.Failure("redeq: moved jobs the bucket's lock holder left overdue", "topic", topic, "bucket", n, "jobs", res.Moved)
			}
			m.ready(topic, n, res)
			if res.Moved >= m.cfg.MoveBatch {
				return 0, false, false
			}
			return m.cfg.ScanInterval, false, false
		}
	}
	if err == nil && held {
		var res MoveResult
		res, err = moveOverdue(ctx, m.rdb, m.cfg.Prefix, topic, n, m.cfg.MoveBatch, 0, m.fleet.WritesCurrentFormat())
		if err == nil {
			if bo.Failing() {
				log.Info("redeq: mover recovered")
			}
			bo.Reset()
			m.ready(topic, n, res)
			if res.Moved >= m.cfg.MoveBatch {
				return 0, true, false
			}
			wait := m.cfg.IdleScan()
			if !res.Next.IsZero() {
				wait = min(wait, max(res.Next.Sub(res.Now), time.Millisecond))
			}
			return wait, true, false
		}
	}
	if ctx.Err() != nil {
		return m.cfg.ScanInterval, held, false
	}
	wait := bo.Next()
	m.env.Failure("redeq: mover failed", "topic", topic, "bucket", n, "err", err, "retry_in", wait)
	return wait, held, true
}

// ready tells local fetchers that a bucket's ready list holds jobs.
func (m *Mover) ready(topic string, n int, res MoveResult) {
	if res.Ready > 0 && m.onReady != nil {
		m.onReady(topic, n)
	}
}

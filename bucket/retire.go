package bucket

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/script"
)

var (
	//go:embed idle.lua
	idleSource string
	idleScript = script.New(idleSource)
	//go:embed retired.lua
	retiredSource string
	retiredScript = script.New(retiredSource)
)

// retiredBatch bounds the retired topics one pass looks at again.
const retiredBatch = 100

// tender paces the retirement checks of one mover.
type tender struct {
	next   time.Time
	follow map[string]time.Time // topic this client retired -> when to look at it again
}

// retireEvery is how often a mover checks whether the topics it owns are
// idle: an eighth of RetireAfter, from ScanInterval to five minutes. A
// client that never retires a topic still looks at the retired ones every
// five minutes: another client retired them.
func (c MoverConfig) retireEvery() time.Duration {
	if c.RetireAfter <= 0 {
		return 5 * time.Minute
	}
	return max(c.ScanInterval, min(c.RetireAfter/8, 5*time.Minute))
}

// settle is how long after it retired a topic a client looks at it once
// more: by then every client (with this ScanInterval) has read the topic
// set again and no longer knows the topic, so that an Add to it wakes
// them up as one to a topic they do not know, which records it again. An
// Add that landed before, while a client still knew the topic, is found
// by this look: its wake-up may have reached a loop stopped just after.
func (c MoverConfig) settle() time.Duration { return 10 * c.ScanInterval }

// tendLoop runs the tender on the topics of the mover's last read until
// ctx ends, and hands the topics it retired to Run: it calls every node
// of the topics it checks, so it runs apart from the announcements and
// the loops.
func (m *Mover) tendLoop(ctx context.Context, snap <-chan map[string]int) {
	t := &tender{follow: map[string]time.Time{}}
	var topics map[string]int
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case topics = <-snap:
		case <-timer.C:
		}
		if topics == nil {
			continue
		}
		now := m.env.Clock.Now()
		if retired := m.tend(ctx, t, topics, now); len(retired) > 0 {
			select {
			case m.retired <- retired:
			case <-ctx.Done():
				return
			}
		}
		next := t.next
		for _, at := range t.follow {
			next = minTime(next, at)
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(max(next.Sub(m.env.Clock.Now()), time.Millisecond))
	}
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// tend retires the idle topics this client owns and looks again at the
// topics retired long enough ago. A topic is owned by one client (Owner
// of its name), so each is checked once per pass of the fleet.
// It returns the topics it retired.
func (m *Mover) tend(ctx context.Context, t *tender, topics map[string]int, now time.Time) []string {
	m.followUp(ctx, t, now)
	if now.Before(t.next) {
		return nil
	}
	t.next = now.Add(m.cfg.retireEvery())
	var retired []string
	for topic, n := range topics {
		if m.cfg.RetireAfter <= 0 || !m.fleet.Owns(topic) {
			continue
		}
		done, err := m.retireIfIdle(ctx, topic, n)
		if err != nil {
			m.env.Logger.Warn("redeq: cannot check whether a topic is idle", "topic", topic, "err", err)
		}
		if done {
			retired = append(retired, topic)
			t.follow[topic] = now.Add(m.cfg.settle())
		}
	}
	if err := m.recheckRetired(ctx); err != nil {
		m.env.Logger.Warn("redeq: cannot look at retired topics", "err", err)
	}
	return retired
}

// followUp looks again at the topics this client retired a settle ago,
// and records again one that holds a job by now.
func (m *Mover) followUp(ctx context.Context, t *tender, now time.Time) {
	for topic, at := range t.follow {
		if now.Before(at) {
			continue
		}
		n, err := m.reg.Count(ctx, topic, 0)
		empty := n == 0
		if err == nil && n > 0 {
			empty, err = m.unused(ctx, topic, n)
		}
		if err == nil && !empty {
			if _, err = m.reg.Restore(ctx, topic); err == nil {
				m.env.Logger.Info("redeq: recorded a topic again: a job was added to it as it was retired", "topic", topic)
				m.Refresh()
			}
		}
		if err != nil {
			// recheckRetired looks at it again at its next pass.
			m.env.Logger.Warn("redeq: cannot look again at a topic just retired", "topic", topic, "err", err)
		}
		delete(t.follow, topic)
	}
}

// unused reports whether topic holds no job in any of its n buckets and
// has no consumer. A job, wherever it waits (bucket, ready, in flight,
// un_ack, dead), keeps its envelope in its bucket's pool.
func (m *Mover) unused(ctx context.Context, topic string, n int) (bool, error) {
	pipe := m.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, 0, n+1)
	for b := range n {
		cmds = append(cmds, pipe.HLen(ctx, keys.ForBucket(m.cfg.Prefix, topic, b).Pool()))
	}
	cmds = append(cmds, pipe.ZCard(ctx, keys.ForTopic(m.cfg.Prefix, topic).Consumers()))
	_, _ = pipe.Exec(ctx)
	for _, c := range cmds {
		v, err := c.Result()
		if err != nil {
			return false, fmt.Errorf("check topic %q: %w", topic, err)
		}
		if v > 0 {
			return false, nil
		}
	}
	return true, nil
}

// retireIfIdle retires topic once it has been unused for RetireAfter: it
// leaves the topic set, so no client spends anything on it any more. Its
// meta (the bucket count) stays. A job added after the last look is not
// stranded: the producer's Add wakes the movers, which record the topic
// again (Wake), producers record their topics again every RecordEvery,
// and recheckRetired looks at every retired topic once more after that.
func (m *Mover) retireIfIdle(ctx context.Context, topic string, n int) (bool, error) {
	empty, err := m.unused(ctx, topic, n)
	if err != nil {
		return false, err
	}
	meta := keys.ForTopic(m.cfg.Prefix, topic).Meta()
	flag := "0"
	if empty {
		flag = "1"
	}
	v, err := idleScript.Run(ctx, m.rdb, []string{meta}, flag).Int64Slice()
	if err != nil || len(v) != 2 {
		return false, fmt.Errorf("check topic %q: %v %w", topic, v, err)
	}
	if !empty || time.Duration(v[0])*time.Millisecond < m.cfg.RetireAfter {
		return false, nil
	}
	if err := m.rdb.ZAdd(ctx, keys.Retired(m.cfg.Prefix), redis.Z{Score: float64(v[1]), Member: topic}).Err(); err != nil {
		return false, fmt.Errorf("retire topic %q: %w", topic, err)
	}
	if err := m.rdb.SRem(ctx, keys.Topics(m.cfg.Prefix), topic).Err(); err != nil {
		return false, fmt.Errorf("retire topic %q: %w", topic, err)
	}
	// An Add that raced the first look has landed by now: look again.
	if empty, err = m.unused(ctx, topic, n); err != nil || !empty {
		if _, rerr := m.reg.Restore(ctx, topic); rerr != nil {
			return false, fmt.Errorf("retire topic %q: undo: %w", topic, rerr)
		}
		return false, err
	}
	if err := m.rdb.HDel(ctx, meta, "idle").Err(); err != nil {
		return true, fmt.Errorf("retire topic %q: %w", topic, err)
	}
	m.env.Logger.Info("redeq: retired an idle topic", "topic", topic, "idle_for", time.Duration(v[0])*time.Millisecond)
	return true, nil
}

// recheckRetired looks again, at each pass, at the retired topics this
// client owns: one found holding a job (added by a producer that still
// knew the topic, whose wake-up was lost or reached a client that had not
// yet dropped the topic) is recorded again. A topic retired more than
// twice RecordEvery ago and still empty is forgotten: by then every
// producer that knew it before its retirement records it again when it
// adds to it.
func (m *Mover) recheckRetired(ctx context.Context) error {
	v, err := retiredScript.Run(ctx, m.rdb, []string{keys.Retired(m.cfg.Prefix)},
		(2 * m.reg.RecordEvery).Milliseconds(), retiredBatch).Slice()
	if err != nil {
		return fmt.Errorf("list retired topics: %w", err)
	}
	for i := 0; i+1 < len(v); i += 2 {
		topic, _ := v[i].(string)
		old, _ := v[i+1].(int64)
		if !m.fleet.Owns(topic) {
			continue
		}
		n, err := m.reg.Count(ctx, topic, 0)
		if err != nil {
			return err
		}
		empty := true
		if n > 0 {
			if empty, err = m.unused(ctx, topic, n); err != nil {
				return err
			}
		}
		if !empty {
			if _, err := m.reg.Restore(ctx, topic); err != nil {
				return err
			}
			m.env.Logger.Info("redeq: recorded a retired topic again: it holds jobs or has consumers", "topic", topic)
			m.Refresh()
			continue
		}
		if old == 1 {
			if err := m.rdb.ZRem(ctx, keys.Retired(m.cfg.Prefix), topic).Err(); err != nil {
				return fmt.Errorf("forget retired topic %q: %w", topic, err)
			}
		}
	}
	return nil
}

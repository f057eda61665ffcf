package redeq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/bucket"
	"github.com/redeq-go/redeq/internal/env"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/pool"
)

// scheduler is a started client's schedule loop. Every started client
// runs one, but a schedule's ticks are added by one of them, its owner
// among the live clients (rendezvous hashing of "sched:<name>" over the
// fleet, as for buckets): the owner adds the next tick's job as soon as the
// one before it is due, so each tick waits in its bucket as a delayed job.
// Another client acts only for a schedule whose waiting tick is overdue by
// scheduleGrace (its owner is dead), so a dead owner skips no tick. Two
// clients acting at once collide on the tick's claim.
type scheduler struct {
	c      *Client
	fleet  *bucket.Fleet
	poke   chan struct{}
	passes int
	// passed, when set (tests), is called after each pass.
	passed func(error)
}

func newScheduler(c *Client, fleet *bucket.Fleet) *scheduler {
	return &scheduler{c: c, fleet: fleet, poke: make(chan struct{}, 1)}
}

// pokeSchedules makes this client's schedule loop pass at once: a schedule
// was put or resumed.
func (c *Client) pokeSchedules() {
	r := c.runtime()
	if r == nil || r.sched == nil {
		return
	}
	select {
	case r.sched.poke <- struct{}{}:
	default:
	}
}

// scheduleAddress is what the fleet ranks its clients by for a schedule.
func scheduleAddress(name string) string { return "sched:" + name }

// scheduleGrace is how long a schedule's waiting tick may be overdue
// before a client that does not own it acts, and the gap between two
// passes of the fleet's loops past which the ticks between count as
// missed: five scan intervals, twice the time the fleet takes to forget a
// dead client.
func scheduleGrace(scan time.Duration) time.Duration { return 5 * scan }

// fullPassEvery: every so many passes a client reads the records of all
// the schedules it owns, whatever the index says, paused ones included (a
// change racing a pass, or a writer that died between a record's change
// and its index write, may leave a stale score there).
const fullPassEvery = 5

// maxRunPerPass bounds the on-time ticks one pass adds for one schedule;
// the next pass goes on.
const maxRunPerPass = 256

// tickBudget bounds the calls for one schedule in a pass.
const tickBudget = 10 * time.Second

// claimKeep is how long a tick's claim outlives its tick.
const claimKeep = time.Hour

// run passes until ctx ends: at once, then when the earliest waiting tick
// this client owns falls due, at least every ScanInterval, and when poked.
// A failing pass is logged and retried with a backoff.
func (s *scheduler) run(ctx context.Context) {
	scan := s.c.cfg.ScanInterval
	bo := env.Backoff{Max: scan}
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		case <-s.poke:
		}
		wait, err := s.pass(ctx)
		if s.passed != nil {
			s.passed(err)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			wait = bo.Next()
			s.c.env.Failure("redeq: schedule pass failed", "err", err, "retry_in", wait)
		} else {
			bo.Reset()
		}
		timer.Reset(wait)
	}
}

// pass looks at every schedule due for this client and returns how long
// to wait for the next pass.
func (s *scheduler) pass(ctx context.Context) (time.Duration, error) {
	c := s.c
	scan := c.cfg.ScanInterval
	grace := scheduleGrace(scan).Milliseconds()
	v, err := scheduleClockScript.Run(ctx, c.rdb, []string{keys.ScheduleClock(c.cfg.Prefix)}, grace).Int64Slice()
	if err != nil {
		return 0, fmt.Errorf("schedule clock: %w", err)
	}
	if len(v)%2 != 1 {
		return 0, fmt.Errorf("schedule clock: %d values, want now and pairs", len(v))
	}
	now, down := v[0], make(spans, 0, len(v)/2)
	for i := 1; i < len(v); i += 2 {
		down = append(down, span{v[i], v[i+1]})
	}
	zs, err := c.rdb.ZRangeWithScores(ctx, keys.Schedules(c.cfg.Prefix), 0, maxSchedules-1).Result()
	if err != nil {
		return 0, fmt.Errorf("schedules: %w", err)
	}
	s.passes++
	full := s.passes%fullPassEvery == 1
	wait := scan
	soon := func(at int64) {
		if d := time.Duration(at-now) * time.Millisecond; at > now && d < wait {
			wait = d
		}
	}
	var errs []error
	for _, z := range zs {
		name, ok := z.Member.(string)
		if !ok {
			continue
		}
		score := int64(z.Score)
		owned := s.fleet.Owns(scheduleAddress(name))
		due := score <= now && (owned || score <= now-grace)
		if !due && !(owned && full) {
			if owned {
				soon(score)
			}
			continue
		}
		if ctx.Err() != nil {
			break
		}
		// A schedule begun is finished even when Shutdown comes: its tick
		// is then added and its cursor moved, not left for the next client
		// to find half done (which it would finish, counting a tick whose
		// job was added in a span of no client as missed).
		tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tickBudget)
		next, err := s.tickSchedule(tctx, name, score, now, down)
		cancel()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if owned {
			soon(next)
		}
	}
	return wait, errors.Join(append(errs, ctx.Err())...)
}

// span is a span when no client ran (unix ms, from exclusive, to
// inclusive).
type span struct{ from, to int64 }

// spans are the latest spans when no client ran, oldest first.
type spans []span

// holding returns the span that holds ms.
func (ds spans) holding(ms int64) (span, bool) {
	for _, d := range ds {
		if d.from < ms && ms <= d.to {
			return d, true
		}
	}
	return span{}, false
}

// endAfter reports whether a span ends after ms.
func (ds spans) endAfter(ms int64) bool {
	for _, d := range ds {
		if d.to > ms {
			return true
		}
	}
	return false
}

// plan is what one pass does for one schedule: the ticks whose jobs it
// adds, in order, the ticks it skips, and the new cursor.
type plan struct {
	run     []int64
	skipped int64
	cursor  int64
}

// planTicks plans the ticks after cursor up to now, and the first tick
// after now (added ahead). Ticks in a span when no client ran are missed
// and follow the catch-up policy; the others are on time and run, and so
// do the intended ones: a pass of the schedule's generation recorded them
// before it wrote their jobs (so their jobs may exist already, added ahead
// before the span) and did not move the cursor past them.
func planTicks(cs *compiled, cursor, now int64, down spans, intended map[int64]bool) plan {
	var before, after, missed []int64
	var recorded []int64 // intended ticks in a span when no client ran
	var p plan
	every := cs.spec.Every().Milliseconds()
	window := cs.window().Milliseconds()
	keep := func(ms int64) { // a missed tick
		switch cs.s.CatchUp {
		case CatchUpNone:
			p.skipped++
		case CatchUpLatest:
			if len(missed) > 0 {
				p.skipped++
			}
			missed = append(missed[:0], ms)
		case CatchUpAll:
			if ms < now-window {
				p.skipped++
				return
			}
			if len(missed) == MaxCatchUpTicks {
				p.skipped++
				missed = missed[1:]
			}
			missed = append(missed, ms)
		}
	}
	t := cursor
	for walked := 0; ; walked++ {
		next, ok := cs.spec.Next(time.UnixMilli(t), cs.loc)
		if !ok {
			// No tick within five years: look again in a day, not at
			// every pass.
			p.cursor = max(t, now) + (24 * time.Hour).Milliseconds()
			break
		}
		ms := next.UnixMilli()
		if ms > now {
			after = append(after, ms) // ahead
			p.cursor = ms
			break
		}
		if walked >= maxWalk || len(before)+len(after) >= maxRunPerPass {
			if _, in := down.holding(ms); in {
				// The span goes on past this pass: the missed ticks kept
				// so far are not the latest, which the policy runs.
				p.skipped += int64(len(missed))
				missed = nil
			}
			p.cursor = t // the next pass goes on
			break
		}
		if d, in := down.holding(ms); in {
			if every > 0 {
				// Jump over the missed span: the policy needs the count
				// and the latest few.
				last := floorDiv(min(d.to, now), every) * every
				from := max(ms, last-(MaxCatchUpTicks+1)*every)
				p.skipped += (from - ms) / every
				for x := range intended {
					if x >= ms && x <= last && (x-ms)%every == 0 {
						recorded = append(recorded, x)
					}
				}
				for x := from; x <= last; x += every {
					keep(x)
				}
				t = last
				continue
			}
			if intended[ms] {
				recorded = append(recorded, ms)
			}
			keep(ms)
		} else {
			before = append(before, ms) // on time
		}
		t = ms
	}
	// The policy chose among all the missed ticks, the recorded ones
	// too (a pass that planned them as the policy's choice recorded
	// them); a recorded one it did not choose runs all the same.
	for _, x := range recorded {
		if !slices.Contains(missed, x) {
			before = append(before, x)
			p.skipped--
		}
	}
	p.run = append(append(before, missed...), after...)
	slices.Sort(p.run)
	return p
}

// tickSchedule adds the ticks due of schedule name and moves its cursor;
// it returns the instant of its waiting tick, when the owner looks again.
func (s *scheduler) tickSchedule(ctx context.Context, name string, score, now int64, down spans) (int64, error) {
	c := s.c
	index := keys.Schedules(c.cfg.Prefix)
	rec, err := c.readRecord(ctx, name)
	if err != nil {
		return pool.MaxDueMs, err
	}
	if rec == nil || rec.paused || score == 0 {
		// A change whose caller died before it stopped the ticks of the
		// generation it ended (it set the index entry due at once first):
		// they are stopped here, and the record read again (a stop moves
		// the cursor past a tick that had its run).
		stopped, err := s.stopLeftTicks(ctx, name)
		if err != nil {
			return pool.MaxDueMs, err
		}
		if stopped && rec != nil {
			if rec, err = c.readRecord(ctx, name); err != nil {
				return pool.MaxDueMs, err
			}
		}
		if rec == nil {
			// Deleted meanwhile, or its deleter died before it removed
			// the index entry, which every pass would read again.
			if err := c.forgetDeleted(ctx, name); err != nil {
				return pool.MaxDueMs, fmt.Errorf("schedule %q: %w", name, err)
			}
			return pool.MaxDueMs, nil
		}
	}
	setScore := func(to float64) error {
		if float64(score) == to {
			return nil
		}
		// XX: a schedule deleted meanwhile does not come back.
		if err := c.rdb.ZAddXX(ctx, index, redis.Z{Score: to, Member: name}).Err(); err != nil {
			return fmt.Errorf("schedule %q: %w", name, err)
		}
		return nil
	}
	if rec.paused {
		if float64(score) == pausedScore {
			return pool.MaxDueMs, nil
		}
		if err := setScore(pausedScore); err != nil {
			return pool.MaxDueMs, err
		}
		// A resume between the read above and that write set the entry
		// due before it: no pass looks at an entry marked paused, so the
		// mark would stop the resumed schedule for good. The record is
		// read again, and a schedule no longer paused is due at once (a
		// resume after this read sets it due itself).
		again, err := c.readRecord(ctx, name)
		if err != nil {
			// Whether a resume came is unknown: the entry is left due, so
			// that the next pass reads the record again.
			if zerr := c.rdb.ZAddXX(ctx, index, redis.Z{Score: 0, Member: name}).Err(); zerr != nil {
				err = errors.Join(err, fmt.Errorf("schedule %q: %w", name, zerr))
			}
			return now, err
		}
		if again != nil && !again.paused {
			if err := c.rdb.ZAddXX(ctx, index, redis.Z{Score: 0, Member: name}).Err(); err != nil {
				return now, fmt.Errorf("schedule %q: %w", name, err)
			}
			return now, nil
		}
		return pool.MaxDueMs, nil
	}
	if rec.cursor > now {
		return rec.cursor, setScore(float64(rec.cursor))
	}
	// After a span when no client ran, the ticks a pass recorded before it
	// (one whose cursor move was lost) are on time, not missed.
	var intended map[int64]bool
	if down.endAfter(rec.cursor) {
		ms, err := c.rdb.ZRange(ctx, keys.ForSchedule(c.cfg.Prefix, name).TicksOf(rec.gen), 0, maxIntentTicks-1).Result()
		if err != nil {
			return 0, fmt.Errorf("schedule %q: %w", name, err)
		}
		intended = make(map[int64]bool, len(ms))
		for _, m := range ms {
			if n, err := strconv.ParseInt(m, 10, 64); err == nil {
				intended[n] = true
			}
		}
	}
	p := planTicks(rec.cs, rec.cursor, now, down, intended)
	if len(p.run) > 0 {
		ok, err := s.recordTicks(ctx, rec, p.run)
		if err != nil {
			return 0, err
		}
		if !ok {
			return now, nil // changed meanwhile: the next pass follows the new record
		}
	}
	for _, ms := range p.run {
		if err := s.addTick(ctx, rec, ms); err != nil {
			return 0, err
		}
	}
	var tick, prev int64
	if n := len(p.run); n > 0 {
		tick = p.run[n-1]
		if n > 1 {
			prev = p.run[n-2]
		}
	}
	v, err := scheduleAdvanceScript.Run(ctx, c.rdb, []string{keys.ForSchedule(c.cfg.Prefix, name).Record()},
		rec.gen, rec.cursor, p.cursor, tick, prev, p.skipped, uuid.NewString()).Int64Slice()
	if err != nil {
		return 0, fmt.Errorf("schedule %q: advance: %w", name, err)
	}
	if len(v) != 2 {
		return 0, fmt.Errorf("schedule %q: advance: %d values, want 2", name, len(v))
	}
	moved, paused := v[0], v[1]
	switch moved {
	case -1:
		// Changed, paused or deleted while this pass ran: the change
		// found the ticks this pass recorded and stops them (or a pass
		// does, when its caller died); the next pass follows the new
		// record.
		return now, nil
	case 0:
		return now, nil // another client moved it
	case 2:
		// Another client made the same plan and moved the cursor first:
		// the ticks are its to count.
		return p.cursor, setScore(float64(p.cursor))
	}
	// This pass moved the cursor: the ticks it planned are its to count,
	// whoever wrote their jobs (an earlier try whose advance was lost), and
	// so are those that passed while the schedule was paused.
	if so, ok := c.observer.(ScheduleObserver); ok {
		if len(p.run) > 0 {
			so.TicksAdded(name, rec.cs.s.Topic, len(p.run))
		}
		if n := p.skipped + paused; n > 0 {
			so.TicksSkipped(name, rec.cs.s.Topic, n)
		}
	}
	return p.cursor, setScore(float64(p.cursor))
}

// stopLeftTicks stops the ticks of the generations a change of schedule
// name ended whose caller did not stop them: one ZCARD when there are none.
// True when there were some.
func (s *scheduler) stopLeftTicks(ctx context.Context, name string) (bool, error) {
	c := s.c
	n, err := c.rdb.ZCard(ctx, keys.ForSchedule(c.cfg.Prefix, name).Stale()).Result()
	if err != nil {
		return false, fmt.Errorf("schedule %q: %w", name, err)
	}
	if n == 0 {
		return false, nil
	}
	return true, c.stopStaleTicks(ctx, name)
}

// maxIntentTicks bounds the ticks schedule_intent.lua records at once: more
// than a pass plans (maxRunPerPass on time, MaxCatchUpTicks+1 missed).
const maxIntentTicks = 1024

// recordTicks records the ticks of a pass in the schedule's slot before
// their jobs are written, so that a change finds them however the pass
// ends. False when the schedule changed since rec was read. Ticks of an
// ended generation still to stop are stopped first.
func (s *scheduler) recordTicks(ctx context.Context, rec *record, ticks []int64) (bool, error) {
	c := s.c
	name := rec.cs.s.Name
	k := keys.ForSchedule(c.cfg.Prefix, name)
	args := make([]any, 0, len(ticks)+1)
	args = append(args, rec.gen)
	for _, ms := range ticks {
		args = append(args, ms)
	}
	for try := 0; ; try++ {
		v, err := scheduleIntentScript.Run(ctx, c.rdb, []string{k.Record(), k.TicksOf(rec.gen), k.Stale()}, args...).Int()
		if err != nil {
			return false, fmt.Errorf("schedule %q: record ticks: %w", name, err)
		}
		switch {
		case v == 1:
			return true, nil
		case v == -1:
			return false, nil
		case try > 0:
			return false, fmt.Errorf("schedule %q: record ticks: ticks of an ended generation came back", name)
		}
		if err := c.stopStaleTicks(ctx, name); err != nil {
			return false, err
		}
	}
}

// addTick adds the job of tick ms of rec's schedule, with its claim.
func (s *scheduler) addTick(ctx context.Context, rec *record, ms int64) error {
	c := s.c
	job := rec.cs.job(time.UnixMilli(ms))
	b, err := c.bucketOf(ctx, job.Topic, job.ID)
	if err != nil {
		return fmt.Errorf("schedule %q: tick %d: %w", rec.cs.s.Name, ms, err)
	}
	k := keys.ForBucket(c.cfg.Prefix, job.Topic, b)
	tail := string(pool.AppendHeader(nil, pool.HeaderOf(poolJob(job)))[len("1|0"):])
	v, err := scheduleTickScript.Run(ctx, c.rdb, []string{k.Pool(), k.Scheduled(), k.Ticks()},
		job.ID, job.ID+"#"+rec.gen, ms, tail, pool.Payload(poolJob(job)), c.cfg.BucketLimit(),
		keys.WakeChannel(c.cfg.Prefix), keys.Address(job.Topic, b), claimKeep.Milliseconds()).Int64()
	if err != nil {
		return fmt.Errorf("schedule %q: tick %d: %w", rec.cs.s.Name, ms, err)
	}
	if v == -2 {
		return fmt.Errorf("schedule %q: tick %d: %w", rec.cs.s.Name, ms, ErrPoolFull)
	}
	return nil
}

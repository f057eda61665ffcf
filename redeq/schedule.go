package redeq

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/cron"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/script"
	"github.com/redeq-go/redeq/pool"
)

// Schedule adds one job to its topic per tick of its Spec. Its ticks run
// exactly once each across every started client, never before the tick's
// instant, with the lateness of any delayed job. The schedule lives in
// Redis: deleting a tick's job skips that tick, never the schedule.
type Schedule struct {
	// Name is unique within the prefix and follows the rules of a topic
	// name, at most MaxScheduleName bytes.
	Name string
	// Topic is where each tick's job goes.
	Topic string
	// Spec is a cron expression of 5 fields (minute hour day-of-month
	// month day-of-week) or 6 with seconds first, or @yearly, @monthly,
	// @weekly, @daily, @hourly, or "@every <duration>" (1s to 366 days;
	// its ticks are the multiples of the interval since the Unix epoch).
	Spec string
	// TimeZone is the IANA zone the Spec is read in; "" is UTC. A local
	// time skipped in spring ticks at the first instant after the gap;
	// one that occurs twice in autumn ticks once, at its first occurrence.
	TimeZone string
	// Body, Headers, MaxRetries and RetryIntervals are those of each
	// tick's job (as Job). Headers come with two of redeq's own,
	// HeaderSchedule and HeaderTick.
	Body           []byte
	Headers        map[string]string
	MaxRetries     int
	RetryIntervals []time.Duration
	// CatchUp says what runs of the ticks missed while no client ran.
	CatchUp CatchUp
	// CatchUpWindow is how far back CatchUpAll looks, rounded up to a
	// whole millisecond (as RetryIntervals). Defaults to
	// DefaultCatchUpWindow; at most MaxCatchUpWindow.
	CatchUpWindow time.Duration
}

// CatchUp is what a schedule does with the ticks missed while no client
// ran: a tick is missed when no started client ran from before its
// instant until after it. A tick whose instant passed while clients ran is
// on time and runs (late at worst, never twice). Ticks not run are
// skipped and counted in ScheduleInfo.Skipped. Clients tell that they run
// by the passes of their schedule loops, recorded in Redis: a span of more
// than five ScanIntervals with no pass recorded counts as one when no
// client ran, also when clients ran but Redis did not answer them (a
// server stalled or unreachable that long).
type CatchUp int

const (
	// CatchUpLatest (the zero value): the latest missed tick runs once,
	// due at once; the others are skipped.
	CatchUpLatest CatchUp = iota
	// CatchUpNone: every missed tick is skipped.
	CatchUpNone
	// CatchUpAll: every missed tick within CatchUpWindow runs once, oldest
	// first, at most MaxCatchUpTicks of them (the latest); the others are
	// skipped.
	CatchUpAll
)

func (c CatchUp) String() string {
	switch c {
	case CatchUpLatest:
		return "latest"
	case CatchUpNone:
		return "none"
	case CatchUpAll:
		return "all"
	}
	return "CatchUp(" + strconv.Itoa(int(c)) + ")"
}

// The bounds of a schedule.
const (
	// DefaultCatchUpWindow is how far back CatchUpAll looks when
	// CatchUpWindow is 0.
	DefaultCatchUpWindow = 24 * time.Hour
	// MaxCatchUpWindow bounds CatchUpWindow.
	MaxCatchUpWindow = config.MaxCatchUpWindow
	// MaxCatchUpTicks bounds the missed ticks CatchUpAll runs after one
	// outage: the latest ones within the window.
	MaxCatchUpTicks = 256
	// MaxScheduleName is the longest schedule name: a tick's job id,
	// "<name>@<tick unix ms>", must be a valid id.
	MaxScheduleName = config.MaxName - 16
	// MaxNextTicks bounds the n of NextTicks.
	MaxNextTicks = 10000
)

// The headers redeq gives every tick's job (see TickOf).
const (
	// HeaderSchedule is the name of the schedule that added the job.
	HeaderSchedule = "redeq-schedule"
	// HeaderTick is the tick's instant, unix ms.
	HeaderTick = "redeq-tick"
)

// ScheduleInfo is a schedule with its state, as Schedules reads it.
type ScheduleInfo struct {
	Schedule
	// Next is the next tick that will run: the waiting tick's instant,
	// else the first tick after now; zero while paused.
	Next time.Time
	// LastTick is the latest tick, at or before now, whose job was added;
	// zero when none was.
	LastTick time.Time
	// Paused is set between PauseSchedule and ResumeSchedule.
	Paused bool
	// Skipped counts the ticks that did not run: missed ones the catch-up
	// policy dropped, and those that passed while paused.
	Skipped int64
	// Lag is how long ago the earliest tick whose job was not added yet
	// fell due, by the server's clock: 0 while every due tick's job is
	// added (each is added ahead, so a healthy fleet reads 0) and while
	// paused; it grows while no client runs the schedule.
	Lag time.Duration
}

// Errors of schedules.
var (
	// ErrInvalidSchedule is a schedule refused before anything is written:
	// a bad name, topic, spec, zone, window, catch-up policy, or tick job
	// (body, headers, retries); always wrapped with the reason.
	ErrInvalidSchedule = errors.New("redeq: invalid schedule")
	// ErrScheduleNotFound is a schedule name that has no record.
	ErrScheduleNotFound = errors.New("redeq: schedule not found")
)

var (
	//go:embed schedule_put.lua
	schedulePutSource string
	//go:embed schedule_state.lua
	scheduleStateSource string
	//go:embed schedule_advance.lua
	scheduleAdvanceSource string
	//go:embed schedule_tick.lua
	scheduleTickSource string
	//go:embed schedule_clock.lua
	scheduleClockSource string
	//go:embed schedule_intent.lua
	scheduleIntentSource string
	//go:embed schedule_drop.lua
	scheduleDropSource string
	//go:embed schedule_ran.lua
	scheduleRanSource string

	schedulePutScript     = script.New(schedulePutSource)
	scheduleStateScript   = script.New(scheduleStateSource)
	scheduleAdvanceScript = script.New(scheduleAdvanceSource)
	scheduleTickScript    = script.New(scheduleTickSource)
	scheduleClockScript   = script.New(scheduleClockSource)
	scheduleIntentScript  = script.New(scheduleIntentSource)
	scheduleDropScript    = script.New(scheduleDropSource)
	scheduleRanScript     = script.New(scheduleRanSource)
)

// compiled is a validated schedule with its parsed spec and zone.
type compiled struct {
	s    Schedule
	spec *cron.Spec
	loc  *time.Location
}

func invalidSchedule(name, format string, args ...any) error {
	return fmt.Errorf("%w: schedule %q: %s", ErrInvalidSchedule, name, fmt.Sprintf(format, args...))
}

// compileSpec checks what NextTicks needs: the spec and the zone.
func compileSpec(s Schedule) (*compiled, error) {
	spec, err := cron.Parse(s.Spec)
	if err != nil {
		return nil, invalidSchedule(s.Name, "spec: %v", err)
	}
	loc := time.UTC
	switch s.TimeZone {
	case "", "UTC":
	case "Local":
		return nil, invalidSchedule(s.Name, "time zone \"Local\" differs between machines: name an IANA zone")
	default:
		loc, err = time.LoadLocation(s.TimeZone)
		if err != nil {
			return nil, invalidSchedule(s.Name, "time zone %q: %v", s.TimeZone, err)
		}
	}
	return &compiled{s: s, spec: spec, loc: loc}, nil
}

// compile validates s as PutSchedule stores it.
func compile(s Schedule, maxBody int) (*compiled, error) {
	if err := config.CheckName("name", s.Name); err != nil {
		return nil, invalidSchedule(s.Name, "%v", err)
	}
	if len(s.Name) > MaxScheduleName {
		return nil, invalidSchedule(s.Name, "name is %d bytes, longer than %d", len(s.Name), MaxScheduleName)
	}
	if strings.Contains(s.Name, "@") {
		return nil, invalidSchedule(s.Name, "name has \"@\", which separates it from the tick in a job id")
	}
	if err := pool.CheckTopic(s.Topic); err != nil {
		return nil, invalidSchedule(s.Name, "topic: %v", err)
	}
	cs, err := compileSpec(s)
	if err != nil {
		return nil, err
	}
	if s.CatchUp < CatchUpLatest || s.CatchUp > CatchUpAll {
		return nil, invalidSchedule(s.Name, "CatchUp %d is none of CatchUpLatest, CatchUpNone, CatchUpAll", int(s.CatchUp))
	}
	if s.CatchUpWindow < 0 || s.CatchUpWindow > MaxCatchUpWindow {
		return nil, invalidSchedule(s.Name, "CatchUpWindow %v is out of range 0..%v", s.CatchUpWindow, MaxCatchUpWindow)
	}
	for k := range s.Headers {
		if k == HeaderSchedule || k == HeaderTick {
			return nil, invalidSchedule(s.Name, "header %q is redeq's own", k)
		}
	}
	if _, ok := cs.spec.Next(time.Now(), cs.loc); !ok {
		return nil, invalidSchedule(s.Name, "spec %q has no tick within five years", s.Spec)
	}
	// A tick's job must be a valid job: the largest tick id, the headers
	// with redeq's own.
	if err := pool.Validate(poolJob(cs.job(pool.MaxDue)), maxBody); err != nil {
		return nil, invalidSchedule(s.Name, "tick job: %v", err)
	}
	return cs, nil
}

// tickID is the id of the job of tick at of schedule name.
func tickID(name string, ms int64) string { return name + "@" + strconv.FormatInt(ms, 10) }

// job returns the job of the tick at.
func (cs *compiled) job(at time.Time) *Job {
	ms := at.UnixMilli()
	hs := make(map[string]string, len(cs.s.Headers)+2)
	for k, v := range cs.s.Headers {
		hs[k] = v
	}
	hs[HeaderSchedule] = cs.s.Name
	hs[HeaderTick] = strconv.FormatInt(ms, 10)
	return &Job{
		Topic: cs.s.Topic, ID: tickID(cs.s.Name, ms), Body: cs.s.Body, Headers: hs,
		MaxRetries: cs.s.MaxRetries, RetryIntervals: cs.s.RetryIntervals, RunAt: at,
	}
}

// window is the catch-up window in force.
func (cs *compiled) window() time.Duration {
	if cs.s.CatchUpWindow == 0 {
		return DefaultCatchUpWindow
	}
	return cs.s.CatchUpWindow
}

// NextTicks returns the next n tick instants of s strictly after after,
// in s's zone: a pure function, no Redis. Fewer come back when the spec
// runs out within five years. It checks only the Spec and TimeZone of s.
func NextTicks(s Schedule, after time.Time, n int) ([]time.Time, error) {
	if n < 0 || n > MaxNextTicks {
		return nil, fmt.Errorf("%w: next ticks: n %d is out of range 0..%d", ErrInvalidArgument, n, MaxNextTicks)
	}
	cs, err := compileSpec(s)
	if err != nil {
		return nil, err
	}
	return cs.spec.NextN(after, cs.loc, n), nil
}

// TickOf returns the schedule and tick instant a periodic job was added
// for; ok is false for any other job. It reads the job's headers and id,
// which Add does not reserve: a job a service adds with HeaderSchedule and
// HeaderTick and the matching id (a tick's job copied, say) reads as that
// tick. A tick's job id is "<schedule>@<tick unix ms>": a job of that id
// the service adds to the schedule's topic before the tick stands for the
// tick, which then adds no job of its own (as when a tick's job is
// rescheduled).
func TickOf(job *Job) (name string, tick time.Time, ok bool) {
	if job == nil {
		return "", time.Time{}, false
	}
	name, ms := job.Headers[HeaderSchedule], job.Headers[HeaderTick]
	if name == "" || ms == "" {
		return "", time.Time{}, false
	}
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil || job.ID != tickID(name, n) {
		return "", time.Time{}, false
	}
	return name, time.UnixMilli(n).UTC(), true
}

// The record's content fields, in the order schedule_put.lua gets them.
var contentFields = [...]string{"spec", "zone", "topic", "body", "headers", "retries", "intervals", "catchup", "window"}

func (cs *compiled) content() []any {
	s := cs.s
	ivs := make([]string, len(s.RetryIntervals))
	for i, d := range s.RetryIntervals {
		ivs[i] = strconv.FormatInt(pool.DurationMs(d), 10)
	}
	intervals := strings.Join(ivs, ",")
	if s.RetryIntervals == nil {
		intervals = "-"
	}
	var hs []byte
	if len(s.Headers) > 0 {
		hs = pool.AppendHeaders(nil, s.Headers)
	}
	vals := []string{s.Spec, s.TimeZone, s.Topic, string(s.Body), string(hs),
		strconv.Itoa(s.MaxRetries), intervals, strconv.Itoa(int(s.CatchUp)), strconv.FormatInt(pool.DurationMs(s.CatchUpWindow), 10)}
	out := make([]any, 0, 2*len(vals))
	for i, v := range vals {
		out = append(out, contentFields[i], v)
	}
	return out
}

// record is a schedule's record as stored.
type record struct {
	cs                     *compiled
	gen                    string
	paused                 bool
	cursor, tick, prevtick int64
	skipped                int64
}

// parseRecord reads a record's HGETALL; nil, nil when there is none.
func parseRecord(name string, m map[string]string) (*record, error) {
	if len(m) == 0 || m["topic"] == "" {
		return nil, nil
	}
	num := func(f string) int64 { n, _ := strconv.ParseInt(m[f], 10, 64); return n }
	s := Schedule{Name: name, Topic: m["topic"], Spec: m["spec"], TimeZone: m["zone"],
		MaxRetries: int(num("retries")), CatchUp: CatchUp(num("catchup")), CatchUpWindow: time.Duration(num("window")) * time.Millisecond}
	if b := m["body"]; b != "" {
		s.Body = []byte(b)
	}
	if h := m["headers"]; h != "" {
		hs, err := pool.ParseHeaders([]byte(h))
		if err != nil {
			return nil, fmt.Errorf("schedule %q: headers: %w", name, err)
		}
		s.Headers = hs
	}
	if iv := m["intervals"]; iv != "-" {
		s.RetryIntervals = []time.Duration{}
		for _, f := range strings.Split(iv, ",") {
			if f == "" {
				continue
			}
			ms, err := strconv.ParseInt(f, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("schedule %q: retry interval %q: %w", name, f, err)
			}
			s.RetryIntervals = append(s.RetryIntervals, time.Duration(ms)*time.Millisecond)
		}
	}
	cs, err := compileSpec(s)
	if err != nil {
		return nil, fmt.Errorf("stored %w", err)
	}
	return &record{cs: cs, gen: m["gen"], paused: m["paused"] == "1",
		cursor: num("cursor"), tick: num("tick"), prevtick: num("prevtick"), skipped: num("skipped")}, nil
}

func (c *Client) readRecord(ctx context.Context, name string) (*record, error) {
	m, err := c.rdb.HGetAll(ctx, keys.ForSchedule(c.cfg.Prefix, name).Record()).Result()
	if err != nil {
		return nil, fmt.Errorf("read schedule %q: %w", name, err)
	}
	return parseRecord(name, m)
}

// pausedScore is the index score of a paused schedule: only the full pass
// (every fullPassEvery passes) looks at it, so that an entry a writer left
// over a schedule resumed meanwhile does not stop it for good.
const pausedScore = float64(pool.MaxDueMs)

// opTTLms is how long a schedule admin call's reply is kept for a rerun.
func (c *Client) opTTLms() int64 { return pool.OpTTL(c.rdb).Milliseconds() }

// reply of schedule_put.lua and schedule_state.lua: code, the server's now,
// the old topic and the old tick.
type stateReply struct {
	code  string
	now   int64
	topic string
	tick  int64
}

func parseStateReply(s string) stateReply {
	parts := strings.SplitN(s, "|", 4)
	r := stateReply{code: parts[0]}
	if len(parts) == 4 {
		r.now, _ = strconv.ParseInt(parts[1], 10, 64)
		r.topic = parts[2]
		r.tick, _ = strconv.ParseInt(parts[3], 10, 64)
	}
	return r
}

// staleBatch bounds the stale generations, and the ticks of one, read at
// a time when stopping them.
const staleBatch = 256

// stopStaleTicks stops the ticks of every generation a change of schedule
// name ended (schedule_drop.lua on each), and forgets each generation once
// its ticks are stopped. The caller of a change calls it, and so does any
// pass that finds one left (the caller died): each step is rerun-safe, so
// two at once do no harm.
func (c *Client) stopStaleTicks(ctx context.Context, name string) error {
	k := keys.ForSchedule(c.cfg.Prefix, name)
	cur, err := c.rdb.HGet(ctx, k.Record(), "gen").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("schedule %q: stop stale ticks: %w", name, err)
	}
	for {
		stale, err := c.rdb.ZRange(ctx, k.Stale(), 0, staleBatch-1).Result()
		if err != nil {
			return fmt.Errorf("schedule %q: stop stale ticks: %w", name, err)
		}
		if len(stale) == 0 {
			return nil
		}
		for _, m := range stale {
			if err := c.stopGeneration(ctx, name, k, m, cur); err != nil {
				return err
			}
			if err := c.rdb.ZRem(ctx, k.Stale(), m).Err(); err != nil {
				return fmt.Errorf("schedule %q: stop stale ticks: %w", name, err)
			}
		}
	}
}

// stopGeneration stops the ticks of the ended generation of stale entry m,
// "<gen>|<change ms>|<topic>"; cur is the schedule's generation now.
func (c *Client) stopGeneration(ctx context.Context, name string, k keys.Schedule, m, cur string) error {
	parts := strings.SplitN(m, "|", 3)
	if len(parts) != 3 || parts[0] == "" {
		return nil // no entry this version writes: nothing to stop
	}
	gen, change, topic := parts[0], parts[1], parts[2]
	ticksKey := k.TicksOf(gen)
	for {
		ticks, err := c.rdb.ZRange(ctx, ticksKey, 0, staleBatch-1).Result()
		if err != nil {
			return fmt.Errorf("schedule %q: stop stale ticks: %w", name, err)
		}
		if len(ticks) == 0 {
			return nil
		}
		done := make([]any, 0, len(ticks))
		var ran int64 // the latest tick that had its run
		for _, tick := range ticks {
			ms, err := strconv.ParseInt(tick, 10, 64)
			if err == nil && topic != "" {
				id := tickID(name, ms)
				b, err := c.bucketOf(ctx, topic, id)
				if err != nil {
					return fmt.Errorf("schedule %q: stop tick %d: %w", name, ms, err)
				}
				bk := keys.ForBucket(c.cfg.Prefix, topic, b)
				v, err := scheduleDropScript.Run(ctx, c.rdb, []string{bk.Pool(), bk.Scheduled(), bk.State(), bk.Ticks(), bk.Errors()},
					id, gen, change, tick, cur).Int64()
				if err != nil {
					return fmt.Errorf("schedule %q: stop tick %d: %w", name, ms, err)
				}
				if v == 2 {
					ran = max(ran, ms)
				}
			}
			done = append(done, tick)
		}
		// Before the ticks leave the set: a caller that dies here leaves
		// them to the next stopper, whose drop answers 2 again.
		if ran > 0 && cur != "" {
			if err := scheduleRanScript.Run(ctx, c.rdb, []string{k.Record()}, cur, ran).Err(); err != nil {
				return fmt.Errorf("schedule %q: stop stale ticks: %w", name, err)
			}
		}
		if err := c.rdb.ZRem(ctx, ticksKey, done...).Err(); err != nil {
			return fmt.Errorf("schedule %q: stop stale ticks: %w", name, err)
		}
	}
}

// PutSchedule creates the schedule s, or replaces the one of that name.
// The same schedule put again changes nothing, so every instance of a
// service may put its schedules when it starts. A change takes effect from
// the next tick on: the waiting tick of the old schedule, if any, is
// removed, and the next tick follows the new one; ticks due before the
// change whose jobs were not added yet (no client ran, or its pass was
// late) are added with the new content, missed ones by the catch-up
// policy. A paused schedule stays paused. A bad schedule is
// ErrInvalidSchedule, and nothing is written. A change of Topic starts
// from now: ticks before it whose jobs were not added yet are not added,
// nor counted.
//
// A change holds for every tick due after the call returns nil; a tick
// falling due while the call runs may still run as before. A call that
// returns an error may have made the change in part: the old schedule's
// waiting tick may still run until the call, retried, returns nil, or the
// next pass of any started client (within a ScanInterval) finishes it.
// The same holds for PauseSchedule and DeleteSchedule.
func (c *Client) PutSchedule(ctx context.Context, s Schedule) error {
	if ctx == nil {
		return pool.ErrNilContext
	}
	cs, err := compile(s, c.cfg.MaxBodyBytes)
	if err != nil {
		return err
	}
	if err := c.ensureTopic(ctx, s.Topic); err != nil {
		return fmt.Errorf("put schedule %q: %w", s.Name, err)
	}
	k := keys.ForSchedule(c.cfg.Prefix, s.Name)
	content := cs.content()
	// Every instance puts its schedules when it starts: the index entry
	// is set due at once before a change only, not for the same content
	// again, which would make every client read the record.
	same, err := c.holdsContent(ctx, k, content)
	if err != nil {
		return fmt.Errorf("put schedule %q: %w", s.Name, err)
	}
	index := keys.Schedules(c.cfg.Prefix)
	if !same {
		if err := c.lookNow(ctx, s.Name, false); err != nil {
			return fmt.Errorf("put schedule %q: %w", s.Name, err)
		}
	}
	args := append(append([]any{c.opTTLms()}, content...), uuid.NewString())
	out, err := schedulePutScript.Run(ctx, c.rdb, []string{k.Record(), k.Op(uuid.NewString()), k.Stale()}, args...).Text()
	if err != nil {
		return fmt.Errorf("put schedule %q: %w", s.Name, err)
	}
	// Also when nothing changed: a put retried after its first call
	// failed past the record's change finishes that call's work.
	if err := c.stopStaleTicks(ctx, s.Name); err != nil {
		return fmt.Errorf("put schedule %q: %w", s.Name, err)
	}
	if parseStateReply(out).code == "0" {
		// The index entry comes back if a crash lost it.
		if err := c.rdb.ZAddNX(ctx, index, redis.Z{Score: 0, Member: s.Name}).Err(); err != nil {
			return fmt.Errorf("put schedule %q: %w", s.Name, err)
		}
	} else {
		// Due again, should a pass have read the old record meanwhile and
		// set the entry to its waiting tick.
		if err := c.lookNow(ctx, s.Name, false); err != nil {
			return fmt.Errorf("put schedule %q: %w", s.Name, err)
		}
		c.pokeSchedules()
	}
	return nil
}

// holdsContent reports whether the record at k holds content, the
// field/value pairs of compiled.content.
func (c *Client) holdsContent(ctx context.Context, k keys.Schedule, content []any) (bool, error) {
	fields := make([]string, 0, len(content)/2)
	for i := 0; i < len(content); i += 2 {
		fields = append(fields, content[i].(string))
	}
	have, err := c.rdb.HMGet(ctx, k.Record(), fields...).Result()
	if err != nil {
		return false, err
	}
	for i, v := range have {
		if s, ok := v.(string); !ok || s != content[2*i+1].(string) {
			return false, nil
		}
	}
	return true, nil
}

// lookNow sets the index entry of schedule name due at once, before a
// change of its record: should the caller fail before it stops the ticks
// of the generation the change ends, the next pass of every client reads
// the record and stops them (within a scan interval), rather than the
// owner's pass at the waiting tick. existing: only an entry there already
// (pause, delete); else the entry is made (put).
func (c *Client) lookNow(ctx context.Context, name string, existing bool) error {
	z := redis.Z{Score: 0, Member: name}
	index := keys.Schedules(c.cfg.Prefix)
	if existing {
		return c.rdb.ZAddXX(ctx, index, z).Err()
	}
	return c.rdb.ZAdd(ctx, index, z).Err()
}

func checkScheduleName(ctx context.Context, name string) error {
	if ctx == nil {
		return pool.ErrNilContext
	}
	if err := config.CheckName("schedule name", name); err != nil {
		return fmt.Errorf("%w: %v", ErrInvalidArgument, err)
	}
	return nil
}

// resumeArgs are what a resume tells schedule_state.lua: the generation
// it read, the new cursor, the ticks skipped up to it, and the first tick
// after it.
type resumeArgs struct {
	gen                   string
	cursor, skipped, next int64
}

func (c *Client) scheduleState(ctx context.Context, name, action string, resume *resumeArgs) (stateReply, error) {
	k := keys.ForSchedule(c.cfg.Prefix, name)
	args := []any{c.opTTLms(), action, "", "", "", uuid.NewString(), ""} // [5]: the new generation
	if resume != nil {
		args[2], args[3], args[4], args[6] = resume.gen, resume.cursor, resume.skipped, resume.next
	}
	out, err := scheduleStateScript.Run(ctx, c.rdb, []string{k.Record(), k.Op(uuid.NewString()), k.Stale()}, args...).Text()
	if err != nil {
		return stateReply{}, fmt.Errorf("%s schedule %q: %w", action, name, err)
	}
	r := parseStateReply(out)
	if r.code == "nf" {
		return r, fmt.Errorf("%s schedule %q: %w", action, name, ErrScheduleNotFound)
	}
	return r, nil
}

// DeleteSchedule removes the schedule name and its waiting tick's job;
// the jobs of earlier ticks stay. ErrScheduleNotFound when there is none.
func (c *Client) DeleteSchedule(ctx context.Context, name string) error {
	if err := checkScheduleName(ctx, name); err != nil {
		return err
	}
	if err := c.lookNow(ctx, name, true); err != nil {
		return fmt.Errorf("delete schedule %q: %w", name, err)
	}
	_, gone := c.scheduleState(ctx, name, "delete", nil)
	if gone != nil && !errors.Is(gone, ErrScheduleNotFound) {
		return gone
	}
	// Also when there is none: a delete retried after its first call
	// failed past the record's removal finishes that call's work.
	if err := c.stopStaleTicks(ctx, name); err != nil {
		return fmt.Errorf("delete schedule %q: %w", name, err)
	}
	if err := c.forgetDeleted(ctx, name); err != nil {
		return fmt.Errorf("delete schedule %q: %w", name, err)
	}
	return gone
}

// forgetDeleted removes schedule name, whose record is gone, from the
// index. A put that wrote the record again meanwhile adds its index entry
// after the record, so the entry comes back when the record is there
// after the removal.
func (c *Client) forgetDeleted(ctx context.Context, name string) error {
	index := keys.Schedules(c.cfg.Prefix)
	if err := c.rdb.ZRem(ctx, index, name).Err(); err != nil {
		return err
	}
	n, err := c.rdb.Exists(ctx, keys.ForSchedule(c.cfg.Prefix, name).Record()).Result()
	if err != nil || n == 0 {
		return err
	}
	return c.rdb.ZAddNX(ctx, index, redis.Z{Score: 0, Member: name}).Err()
}

// PauseSchedule stops the ticks of schedule name, for every client, and
// removes its waiting tick's job. Ticks that pass while it is paused are
// skipped and counted. Pausing a paused schedule does nothing.
// ErrScheduleNotFound when there is none.
func (c *Client) PauseSchedule(ctx context.Context, name string) error {
	if err := checkScheduleName(ctx, name); err != nil {
		return err
	}
	if err := c.lookNow(ctx, name, true); err != nil {
		return fmt.Errorf("pause schedule %q: %w", name, err)
	}
	r, err := c.scheduleState(ctx, name, "pause", nil)
	if err != nil {
		return err
	}
	// Also when it was paused already: a pause retried after its first
	// call failed past the record's change finishes that call's work.
	if err := c.stopStaleTicks(ctx, name); err != nil {
		return fmt.Errorf("pause schedule %q: %w", name, err)
	}
	if r.code == "0" {
		return nil
	}
	index := keys.Schedules(c.cfg.Prefix)
	if err := c.rdb.ZAdd(ctx, index, redis.Z{Score: pausedScore, Member: name}).Err(); err != nil {
		return fmt.Errorf("pause schedule %q: %w", name, err)
	}
	// A resume between the pause and the line above set the entry due;
	// it is due again, so that a pass sees the schedule tick.
	rec, err := c.readRecord(ctx, name)
	if err != nil {
		return fmt.Errorf("pause schedule %q: %w", name, err)
	}
	if rec != nil && !rec.paused {
		if err := c.rdb.ZAdd(ctx, index, redis.Z{Score: 0, Member: name}).Err(); err != nil {
			return fmt.Errorf("pause schedule %q: %w", name, err)
		}
	}
	return nil
}

// resumeTries bounds the rereads of a ResumeSchedule that races another
// change of the schedule.
const resumeTries = 5

// ResumeSchedule lets schedule name tick again, from the first tick after
// now, by the server's clock when the change is made (a call that reaches
// Redis late counts the ticks that passed meanwhile, and runs none of them);
// the ticks that passed while it was paused are skipped and counted.
// Resuming a schedule that is not paused changes nothing of it; it only
// has the clients look at it again (a resume retried after a call that
// failed past its record's change finishes that call).
// ErrScheduleNotFound when there is none.
func (c *Client) ResumeSchedule(ctx context.Context, name string) error {
	if err := checkScheduleName(ctx, name); err != nil {
		return err
	}
	for range resumeTries {
		// The ticks of the generation the pause ended are stopped first
		// (its caller may have failed, or be stopping them now): a stop
		// moves the cursor past a tick that had its run, which the count
		// below must not take for one skipped.
		if err := c.stopStaleTicks(ctx, name); err != nil {
			return fmt.Errorf("resume schedule %q: %w", name, err)
		}
		rec, err := c.readRecord(ctx, name)
		if err != nil {
			return err
		}
		if rec == nil {
			return fmt.Errorf("resume schedule %q: %w", name, ErrScheduleNotFound)
		}
		if !rec.paused {
			// Also when it was resumed already: a resume retried after its
			// first call failed past the record's change finishes that
			// call's work, the index entry set due.
			if err := c.rdb.ZAddXX(ctx, keys.Schedules(c.cfg.Prefix), redis.Z{Score: 0, Member: name}).Err(); err != nil {
				return fmt.Errorf("resume schedule %q: %w", name, err)
			}
			c.pokeSchedules()
			return nil
		}
		now, err := c.timeOn(ctx, keys.ForSchedule(c.cfg.Prefix, name).Record())
		if err != nil {
			return fmt.Errorf("resume schedule %q: %w", name, err)
		}
		// The script refuses ("retry") when it runs after the first tick
		// past now: that tick passed while paused, and is counted, not
		// run, by the next try.
		ms := now.UnixMilli()
		next := int64(pool.MaxDueMs)
		if t, ok := rec.cs.spec.Next(now, rec.cs.loc); ok {
			next = t.UnixMilli()
		}
		r, err := c.scheduleState(ctx, name, "resume", &resumeArgs{
			gen: rec.gen, cursor: ms, skipped: countTicks(rec.cs, rec.cursor, ms), next: next})
		if err != nil {
			return err
		}
		if r.code == "retry" {
			continue
		}
		if err := c.rdb.ZAdd(ctx, keys.Schedules(c.cfg.Prefix), redis.Z{Score: 0, Member: name}).Err(); err != nil {
			return fmt.Errorf("resume schedule %q: %w", name, err)
		}
		c.pokeSchedules()
		return nil
	}
	return fmt.Errorf("resume schedule %q: %d tries each raced another change or a tick; try again", name, resumeTries)
}

// maxWalk bounds the ticks one pass or count walks through.
const maxWalk = 200000

// countTicks counts the ticks in (from, to], unix ms: by arithmetic for
// @every, else by walking at most maxWalk ticks.
func countTicks(cs *compiled, from, to int64) int64 {
	if to <= from {
		return 0
	}
	if d := cs.spec.Every().Milliseconds(); d > 0 {
		return floorDiv(to, d) - floorDiv(from, d)
	}
	n := int64(0)
	t := time.UnixMilli(from)
	for n < maxWalk {
		next, ok := cs.spec.Next(t, cs.loc)
		if !ok || next.UnixMilli() > to {
			break
		}
		n++
		t = next
	}
	return n
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// maxSchedules bounds the schedules Schedules and a pass read.
const maxSchedules = 10000

// Schedules returns every schedule with its state, by name.
func (c *Client) Schedules(ctx context.Context) ([]ScheduleInfo, error) {
	if ctx == nil {
		return nil, pool.ErrNilContext
	}
	names, err := c.rdb.ZRange(ctx, keys.Schedules(c.cfg.Prefix), 0, maxSchedules-1).Result()
	if err != nil {
		return nil, fmt.Errorf("schedules: %w", err)
	}
	now, err := c.timeOn(ctx, keys.Schedules(c.cfg.Prefix))
	if err != nil {
		return nil, fmt.Errorf("schedules: %w", err)
	}
	slices.Sort(names)
	out := make([]ScheduleInfo, 0, len(names))
	for _, name := range names {
		rec, err := c.readRecord(ctx, name)
		if err != nil {
			return nil, err
		}
		if rec == nil {
			continue
		}
		out = append(out, rec.info(now.UnixMilli()))
	}
	return out, nil
}

func (rec *record) info(now int64) ScheduleInfo {
	in := ScheduleInfo{Schedule: rec.cs.s, Paused: rec.paused, Skipped: rec.skipped}
	last := rec.tick
	if last > now {
		last = rec.prevtick
	}
	if last > 0 {
		in.LastTick = time.UnixMilli(last).UTC()
	}
	if !rec.paused && rec.cursor <= now {
		if t, ok := rec.cs.spec.Next(time.UnixMilli(rec.cursor), rec.cs.loc); ok && t.UnixMilli() <= now {
			in.Lag = time.Duration(now-t.UnixMilli()) * time.Millisecond
		}
	}
	if !rec.paused {
		if rec.tick > now {
			in.Next = time.UnixMilli(rec.tick).In(rec.cs.loc)
		} else if t, ok := rec.cs.spec.Next(time.UnixMilli(max(now, rec.cursor)), rec.cs.loc); ok {
			in.Next = t
		}
	}
	return in
}

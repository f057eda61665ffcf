package redeq_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/bucket"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/script"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/pool"
	"github.com/redeq-go/redeq/redeq"
)

// tickCounter is a listener that counts the deliveries of each tick.
type tickCounter struct {
	topic string
	mu    sync.Mutex
	runs  map[int64]int // tick ms -> deliveries
	early []string      // ticks delivered before their instant
	bad   []string      // jobs TickOf does not recognise
}

func newTickCounter(topic string) *tickCounter {
	return &tickCounter{topic: topic, runs: map[int64]int{}}
}

func (l *tickCounter) Topic() string { return l.topic }

func (l *tickCounter) OnJob(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
	name, tick, ok := redeq.TickOf(job)
	l.mu.Lock()
	defer l.mu.Unlock()
	if !ok || name == "" {
		l.bad = append(l.bad, job.ID)
	} else {
		l.runs[tick.UnixMilli()]++
		if time.Now().Before(tick) {
			l.early = append(l.early, job.ID)
		}
	}
	ch.Ack()
	return nil
}

// ticks returns the ticks delivered, in order, and their delivery counts.
func (l *tickCounter) ticks() ([]int64, map[int64]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]int64, 0, len(l.runs))
	counts := map[int64]int{}
	for ms, n := range l.runs {
		out = append(out, ms)
		counts[ms] = n
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, counts
}

func startSched(t *testing.T, c *redeq.Client, l redeq.Listener) {
	t.Helper()
	if l != nil {
		require.NoError(t, c.Register(l))
	}
	require.NoError(t, c.Start(context.Background()))
}

// TestScheduleTicksOnceAcrossClients: clients that all put the same
// schedule and run it, while one stops and another joins, add every tick's
// job exactly once, skip none, and never deliver one before its instant.
func TestScheduleTicksOnceAcrossClients(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	eachBeside(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		s := redeq.Schedule{Name: "sweep", Topic: "sweeps", Spec: "@every 1s", Body: []byte("go")}
		l := newTickCounter("sweeps")
		clients := []*redeq.Client{e.c, e.another(t, nil), e.another(t, nil)}
		var obs []*tickObserver
		observe := func(c *redeq.Client) {
			o := newTickObserver()
			require.NoError(t, c.Observe(o))
			obs = append(obs, o)
		}
		for _, c := range clients {
			observe(c)
		}
		var wg sync.WaitGroup
		for _, c := range clients {
			wg.Go(func() { require.NoError(t, c.PutSchedule(ctx, s)) })
		}
		wg.Wait()
		startSched(t, clients[0], l)
		startSched(t, clients[1], nil)
		startSched(t, clients[2], nil)
		waitTicks(t, l, 3)
		require.NoError(t, clients[1].Shutdown(ctx))
		waitTicks(t, l, 5)
		joined := e.another(t, nil)
		observe(joined)
		require.NoError(t, joined.PutSchedule(ctx, s))
		startSched(t, joined, nil)
		waitTicks(t, l, 7)
		defer func() {
			// Every tick's job was reported added once, by one client: the
			// ticks delivered and those still waiting.
			for _, c := range append(clients, joined) {
				if err := c.Shutdown(ctx); !errors.Is(err, redeq.ErrClientClosed) {
					require.NoError(t, err)
				}
			}
			ticks, _ := l.ticks()
			st, err := e.another(t, nil).Stats(ctx, "sweeps")
			require.NoError(t, err)
			sum := 0
			for _, o := range obs {
				n, skipped := o.counts("sweep/sweeps")
				require.Zero(t, skipped)
				sum += n
			}
			require.Equal(t, len(ticks)+int(st.Pool), sum, "ticks reported added: %d delivered, %d waiting", len(ticks), st.Pool)
		}()

		infos, err := e.c.Schedules(ctx)
		require.NoError(t, err)
		require.Len(t, infos, 1)
		require.Equal(t, int64(0), infos[0].Skipped, "no tick is skipped while clients run")
		require.False(t, infos[0].LastTick.IsZero())
		require.True(t, infos[0].Next.After(infos[0].LastTick))

		ticks, counts := l.ticks()
		for i, ms := range ticks {
			require.Equal(t, 1, counts[ms], "tick %d delivered %d times", ms, counts[ms])
			require.Zero(t, ms%1000, "a tick of @every 1s is a whole second")
			if i > 0 {
				require.Equal(t, int64(1000), ms-ticks[i-1], "no tick is missing between %d and %d", ticks[i-1], ms)
			}
		}
		l.mu.Lock()
		defer l.mu.Unlock()
		require.Empty(t, l.early, "a tick's job runs at or after its instant")
		require.Empty(t, l.bad, "every job of the topic is a tick TickOf reads")
	})
}

func waitTicks(t *testing.T, l *tickCounter, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		ticks, _ := l.ticks()
		return len(ticks) >= n
	}, time.Duration(n+40)*time.Second, 20*time.Millisecond, "%d ticks delivered", n)
}

// frozen sets the miniredis clock to at, which then stands still until
// the next call.
func frozen(e *env, at time.Time) { e.be.Mini.SetTime(at) }

// noonAt is 12:m:s on the day the miniredis schedule tests freeze their
// clock on.
func noonAt(m, s int) time.Time { return time.Date(2026, 3, 1, 12, m, s, 0, time.UTC) }

// waitTick waits until the job of schedule name's tick at is stored.
func waitTick(t *testing.T, c *redeq.Client, topic, name string, at time.Time) {
	t.Helper()
	require.Eventually(t, func() bool { return hasTick(t, c, topic, name, at) }, 5*time.Second, 10*time.Millisecond,
		"tick %s of %q", at.Format("15:04:05"), name)
}

// hasTick reports whether the job of schedule name's tick at is stored.
func hasTick(t *testing.T, c *redeq.Client, topic, name string, at time.Time) bool {
	t.Helper()
	_, err := c.Get(context.Background(), topic, name+"@"+strconv.FormatInt(at.UnixMilli(), 10))
	if errors.Is(err, redeq.ErrJobNotFound) {
		return false
	}
	require.NoError(t, err)
	return true
}

// waitSchedule polls Schedules until ok holds for schedule name.
func waitSchedule(t *testing.T, c *redeq.Client, name string, ok func(redeq.ScheduleInfo) bool) redeq.ScheduleInfo {
	t.Helper()
	var last redeq.ScheduleInfo
	require.Eventually(t, func() bool {
		infos, err := c.Schedules(context.Background())
		require.NoError(t, err)
		for _, in := range infos {
			if in.Name == name {
				last = in
				return ok(in)
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond, "schedule %q: last seen %+v", name, &last)
	return last
}

// TestScheduleCatchUp: after the whole fleet was down, the missed ticks
// follow the schedule's policy (the latest runs; none runs; each within
// the window runs), the others are counted as skipped, and the tick added
// before the fleet went down still runs; a changed schedule put by the
// first client back catches up the same way, with its new content.
func TestScheduleCatchUp(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 12, 0, 10, 0, time.UTC)
	minute := func(m int) time.Time { return t0.Truncate(time.Minute).Add(time.Duration(m) * time.Minute) }
	for _, tc := range []struct {
		policy  redeq.CatchUp
		window  time.Duration
		run     []int // missed ticks (minutes after t0's) whose jobs exist
		skipped int64
		changed bool // the first client back puts a new body first
	}{
		{redeq.CatchUpLatest, 0, []int{10}, 8, false},
		{redeq.CatchUpNone, 0, nil, 9, false},
		{redeq.CatchUpAll, 0, []int{2, 3, 4, 5, 6, 7, 8, 9, 10}, 0, false},
		{redeq.CatchUpAll, 5 * time.Minute, []int{6, 7, 8, 9, 10}, 4, false},
		{redeq.CatchUpLatest, 0, []int{10}, 8, true},
		{redeq.CatchUpAll, 5 * time.Minute, []int{6, 7, 8, 9, 10}, 4, true},
	} {
		name := tc.policy.String() + "-" + tc.window.String()
		if tc.changed {
			name += "-changed"
		}
		t.Run(name, func(t *testing.T) {
			be := testutil.Backends(t)[0] // the clock moves on miniredis only
			e := setup(t, be, testutil.Config(t))
			ctx := context.Background()
			frozen(e, t0)
			s := redeq.Schedule{Name: "digest", Topic: "digests", Spec: "@every 1m", CatchUp: tc.policy, CatchUpWindow: tc.window}
			require.NoError(t, e.c.PutSchedule(ctx, s))
			startSched(t, e.c, nil)
			waitSchedule(t, e.c, "digest", func(in redeq.ScheduleInfo) bool { return in.Next.Equal(minute(1)) })
			require.Eventually(t, func() bool { return hasTick(t, e.c, "digests", "digest", minute(1)) }, 5*time.Second, 10*time.Millisecond)
			require.NoError(t, e.c.Shutdown(ctx))

			// The fleet is down from 12:00:10 to 12:10:30: ticks 12:01
			// (added before) to 12:10 pass meanwhile.
			frozen(e, minute(10).Add(30*time.Second))
			back := e.another(t, nil)
			if tc.changed {
				s.Body = []byte("new")
				require.NoError(t, back.PutSchedule(ctx, s))
			}
			startSched(t, back, nil)
			require.Eventually(t, func() bool { return hasTick(t, back, "digests", "digest", minute(11)) }, 5*time.Second, 10*time.Millisecond, "the next tick waits ahead")
			in := waitSchedule(t, back, "digest", func(in redeq.ScheduleInfo) bool { return in.Skipped == tc.skipped })
			require.Equal(t, tc.skipped, in.Skipped, "%+v", in)
			require.True(t, hasTick(t, back, "digests", "digest", minute(1)), "the tick added before the outage stays")
			want := map[int]bool{}
			for _, m := range tc.run {
				want[m] = true
			}
			for m := 2; m <= 10; m++ {
				require.Equal(t, want[m], hasTick(t, back, "digests", "digest", minute(m)), "job of missed tick %d", m)
				if want[m] {
					job, err := back.Get(ctx, "digests", "digest@"+strconv.FormatInt(minute(m).UnixMilli(), 10))
					require.NoError(t, err)
					require.Equal(t, string(s.Body), string(job.Body), "a missed tick runs as the schedule is now")
				}
			}
		})
	}
}

// TestScheduleChanges: a replaced spec takes effect from the next tick
// (the waiting tick of the old one goes); a pause removes the waiting tick
// and counts the ticks that pass meanwhile; a deleted tick job skips that
// tick only; a delete removes the schedule and its waiting tick.
func TestScheduleChanges(t *testing.T) {
	t.Parallel()
	be := testutil.Backends(t)[0]
	e := setup(t, be, testutil.Config(t))
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 12, 0, 10, 0, time.UTC)
	at := func(m, s int) time.Time { return time.Date(2026, 3, 1, 12, m, s, 0, time.UTC) }
	frozen(e, t0)
	s := redeq.Schedule{Name: "report", Topic: "reports", Spec: "@every 1m"}
	require.NoError(t, e.c.PutSchedule(ctx, s))
	startSched(t, e.c, nil)
	require.Eventually(t, func() bool { return hasTick(t, e.c, "reports", "report", at(1, 0)) }, 5*time.Second, 10*time.Millisecond)

	// Replace: the next tick follows the new spec.
	s.Spec = "30 * * * * *"
	require.NoError(t, e.c.PutSchedule(ctx, s))
	require.Eventually(t, func() bool { return hasTick(t, e.c, "reports", "report", at(0, 30)) }, 5*time.Second, 10*time.Millisecond)
	require.False(t, hasTick(t, e.c, "reports", "report", at(1, 0)), "the old spec's waiting tick is removed")

	// A deleted tick job skips that tick, not the schedule.
	_, err := e.c.Delete(ctx, "reports", "report@"+strconv.FormatInt(at(0, 30).UnixMilli(), 10))
	require.NoError(t, err)
	frozen(e, at(0, 31))
	require.Eventually(t, func() bool { return hasTick(t, e.c, "reports", "report", at(1, 30)) }, 5*time.Second, 10*time.Millisecond)
	require.False(t, hasTick(t, e.c, "reports", "report", at(0, 30)), "a deleted tick's job is not added again")

	// Pause: the waiting tick goes; ticks passing meanwhile are skipped.
	require.NoError(t, e.c.PauseSchedule(ctx, "report"))
	require.NoError(t, e.c.PauseSchedule(ctx, "report"), "pausing twice is no error")
	require.False(t, hasTick(t, e.c, "reports", "report", at(1, 30)))
	frozen(e, at(5, 40))
	in := waitSchedule(t, e.c, "report", func(redeq.ScheduleInfo) bool { return true })
	require.True(t, in.Paused)
	require.True(t, in.Next.IsZero())
	require.False(t, hasTick(t, e.c, "reports", "report", at(5, 30)), "nothing ticks while paused")
	require.NoError(t, e.c.ResumeSchedule(ctx, "report"))
	in = waitSchedule(t, e.c, "report", func(in redeq.ScheduleInfo) bool { return in.Next.Equal(at(6, 30)) })
	require.False(t, in.Paused)
	require.Equal(t, int64(5), in.Skipped, "ticks 1:30 to 5:30 passed while paused")
	require.Eventually(t, func() bool { return hasTick(t, e.c, "reports", "report", at(6, 30)) }, 5*time.Second, 10*time.Millisecond)

	// Delete: the record and its waiting tick go.
	require.NoError(t, e.c.DeleteSchedule(ctx, "report"))
	require.False(t, hasTick(t, e.c, "reports", "report", at(6, 30)))
	require.ErrorIs(t, e.c.DeleteSchedule(ctx, "report"), redeq.ErrScheduleNotFound)
	require.ErrorIs(t, e.c.PauseSchedule(ctx, "report"), redeq.ErrScheduleNotFound)
	require.ErrorIs(t, e.c.ResumeSchedule(ctx, "report"), redeq.ErrScheduleNotFound)
	infos, err := e.c.Schedules(ctx)
	require.NoError(t, err)
	require.Empty(t, infos)
}

// TestPutScheduleIdempotent: the same schedule put again, by many clients
// at once, changes nothing in Redis.
func TestPutScheduleIdempotent(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		s := redeq.Schedule{Name: "daily", Topic: "mail", Spec: "0 8 * * *", TimeZone: "Europe/Paris",
			Headers: map[string]string{"kind": "digest"}, RetryIntervals: []time.Duration{time.Minute}, MaxRetries: 3}
		require.NoError(t, e.c.PutSchedule(ctx, s))
		before := testutil.Dump(t, e.rdb, e.cfg.Prefix)
		var wg sync.WaitGroup
		for range 4 {
			c := e.another(t, nil)
			wg.Go(func() { require.NoError(t, c.PutSchedule(ctx, s)) })
		}
		wg.Wait()
		require.Equal(t, before, testutil.Dump(t, e.rdb, e.cfg.Prefix))
		infos, err := e.c.Schedules(ctx)
		require.NoError(t, err)
		require.Len(t, infos, 1)
		got := infos[0].Schedule
		require.Equal(t, s.Spec, got.Spec)
		require.Equal(t, s.TimeZone, got.TimeZone)
		require.Equal(t, s.Headers, got.Headers)
		require.Equal(t, s.RetryIntervals, got.RetryIntervals)
		require.Equal(t, s.MaxRetries, got.MaxRetries)
		require.Equal(t, 8, infos[0].Next.Hour(), "Next is read in the schedule's zone")
	})
}

// TestPutScheduleRefusesBadInput: a bad schedule is ErrInvalidSchedule
// with the reason, and nothing is written.
func TestPutScheduleRefusesBadInput(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		good := redeq.Schedule{Name: "n", Topic: "t", Spec: "@hourly"}
		long := make([]byte, redeq.MaxScheduleName+1)
		for i := range long {
			long[i] = 'a'
		}
		for _, tc := range []struct {
			name   string
			mod    func(*redeq.Schedule)
			reason string
		}{
			{"EmptyName", func(s *redeq.Schedule) { s.Name = "" }, "name is empty"},
			{"LongName", func(s *redeq.Schedule) { s.Name = string(long) }, "longer than"},
			{"NameWithAt", func(s *redeq.Schedule) { s.Name = "a@b" }, "@"},
			{"NameWithBrace", func(s *redeq.Schedule) { s.Name = "a{b" }, "no braces"},
			{"BadTopic", func(s *redeq.Schedule) { s.Topic = "a b" }, "topic"},
			{"BadSpec", func(s *redeq.Schedule) { s.Spec = "61 * * * *" }, "spec"},
			{"EmptySpec", func(s *redeq.Schedule) { s.Spec = "" }, "spec"},
			{"ShortEvery", func(s *redeq.Schedule) { s.Spec = "@every 10ms" }, "spec"},
			{"NeverTicks", func(s *redeq.Schedule) { s.Spec = "0 0 30 2 *" }, ""},
			{"BadZone", func(s *redeq.Schedule) { s.TimeZone = "Mars/Olympus" }, "time zone"},
			{"LocalZone", func(s *redeq.Schedule) { s.TimeZone = "Local" }, "Local"},
			{"NegativeWindow", func(s *redeq.Schedule) { s.CatchUpWindow = -time.Second }, "CatchUpWindow"},
			{"HugeWindow", func(s *redeq.Schedule) { s.CatchUpWindow = 400 * 24 * time.Hour }, "CatchUpWindow"},
			{"BadPolicy", func(s *redeq.Schedule) { s.CatchUp = 7 }, "CatchUp"},
			{"OwnHeader", func(s *redeq.Schedule) { s.Headers = map[string]string{redeq.HeaderTick: "1"} }, "redeq's own"},
			{"BadRetries", func(s *redeq.Schedule) { s.MaxRetries = -2 }, "MaxRetries"},
			{"EmptyIntervals", func(s *redeq.Schedule) { s.RetryIntervals = []time.Duration{} }, "RetryIntervals"},
			{"HugeBody", func(s *redeq.Schedule) { s.Body = make([]byte, e.cfg.MaxBodyBytes+1) }, "body"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				before := testutil.Dump(t, e.rdb, e.cfg.Prefix)
				s := good
				tc.mod(&s)
				err := e.c.PutSchedule(ctx, s)
				require.ErrorIs(t, err, redeq.ErrInvalidSchedule)
				require.ErrorContains(t, err, tc.reason)
				require.Equal(t, before, testutil.Dump(t, e.rdb, e.cfg.Prefix), "a refused put writes nothing")
			})
		}
		require.ErrorIs(t, e.c.DeleteSchedule(ctx, "a b"), redeq.ErrInvalidArgument)
		require.ErrorIs(t, e.c.DeleteSchedule(ctx, "missing"), redeq.ErrScheduleNotFound)
		require.Empty(t, testutil.Keys(t, e.rdb, e.cfg.Prefix), "nothing was written")
	})
}

// TestNextTicks: the next ticks of a schedule, in its zone, across a
// daylight-saving change; bad specs, zones and counts refused.
func TestNextTicks(t *testing.T) {
	t.Parallel()
	paris, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	s := redeq.Schedule{Spec: "30 2 * * *", TimeZone: "Europe/Paris"}
	ticks, err := redeq.NextTicks(s, time.Date(2026, 3, 28, 12, 0, 0, 0, paris), 3)
	require.NoError(t, err)
	// 02:30 does not exist on March 29th in Paris: it runs at 03:00.
	require.Equal(t, []time.Time{
		time.Date(2026, 3, 29, 3, 0, 0, 0, paris),
		time.Date(2026, 3, 30, 2, 30, 0, 0, paris),
		time.Date(2026, 3, 31, 2, 30, 0, 0, paris),
	}, ticks)
	for i := range ticks {
		require.True(t, ticks[i].Equal(ticks[i].In(paris)))
	}
	_, err = redeq.NextTicks(redeq.Schedule{Spec: "nope"}, time.Now(), 1)
	require.ErrorIs(t, err, redeq.ErrInvalidSchedule)
	_, err = redeq.NextTicks(redeq.Schedule{Spec: "@daily", TimeZone: "No/Where"}, time.Now(), 1)
	require.ErrorIs(t, err, redeq.ErrInvalidSchedule)
	_, err = redeq.NextTicks(redeq.Schedule{Spec: "@daily"}, time.Now(), -1)
	require.ErrorIs(t, err, redeq.ErrInvalidArgument)
}

// TestScheduleTickClaimOutlivesItsJob: a tick whose job was added but whose
// cursor did not move (the client failed between the two steps) is not
// added again by the next try once its job was deleted: the claim, written
// with the job, outlives it.
func TestScheduleTickClaimOutlivesItsJob(t *testing.T) {
	t.Parallel()
	be := testutil.Backends(t)[0]
	e := setup(t, be, testutil.Config(t))
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 12, 0, 10, 0, time.UTC)
	at := func(m int) time.Time { return time.Date(2026, 3, 1, 12, m, 0, 0, time.UTC) }
	frozen(e, t0)
	h := newScriptHook(t, "redeq/schedule_advance.lua")
	var mu sync.Mutex
	failing, tries := true, 0
	h.set(func(ctx context.Context, cmd redis.Cmder, next func() error) error {
		mu.Lock()
		defer mu.Unlock()
		tries++
		if failing {
			return errors.New("connection lost before the cursor moved")
		}
		return next()
	})
	c := e.hooked(t, h)
	require.NoError(t, c.PutSchedule(ctx, redeq.Schedule{Name: "sweep", Topic: "sweeps", Spec: "@every 1m"}))
	startSched(t, c, nil)
	require.Eventually(t, func() bool { return hasTick(t, c, "sweeps", "sweep", at(1)) }, 5*time.Second, 10*time.Millisecond)
	_, err := c.Delete(ctx, "sweeps", "sweep@"+strconv.FormatInt(at(1).UnixMilli(), 10))
	require.NoError(t, err)
	mu.Lock()
	seen := tries
	mu.Unlock()
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return tries >= seen+2 }, 10*time.Second, 10*time.Millisecond, "the pass tries again")
	require.False(t, hasTick(t, c, "sweeps", "sweep", at(1)), "the deleted tick's job is not added again while the cursor lags")
	mu.Lock()
	failing = false
	mu.Unlock()
	frozen(e, at(1).Add(time.Second))
	require.Eventually(t, func() bool { return hasTick(t, c, "sweeps", "sweep", at(2)) }, 10*time.Second, 10*time.Millisecond, "the schedule goes on")
	require.False(t, hasTick(t, c, "sweeps", "sweep", at(1)))
}

// TestScheduleCallsRerun: a put, pause, resume or delete that go-redis
// sends again after a lost reply answers as the first run did, and acts
// once.
func TestScheduleCallsRerun(t *testing.T) {
	t.Parallel()
	be := testutil.Backends(t)[0]
	e := setup(t, be, testutil.Config(t))
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 12, 0, 10, 0, time.UTC)
	at := func(m, s int) time.Time { return time.Date(2026, 3, 1, 12, m, s, 0, time.UTC) }
	frozen(e, t0)
	put := newScriptHook(t, "redeq/schedule_put.lua")
	state := newScriptHook(t, "redeq/schedule_state.lua")
	c := e.hooked(t, put, state)
	s := redeq.Schedule{Name: "r", Topic: "rs", Spec: "@every 1m"}
	require.NoError(t, c.PutSchedule(ctx, s))
	startSched(t, c, nil)
	require.Eventually(t, func() bool { return hasTick(t, c, "rs", "r", at(1, 0)) }, 5*time.Second, 10*time.Millisecond)
	record := e.cfg.Prefix + ":{sched:r}:schedule"
	// waiting waits until the pass that added the tick at also moved the
	// cursor: the record names it as the waiting tick, which the next call
	// removes (a call between the two steps is the known race of
	// docs/decisions.md, which the pass itself mends).
	waiting := func(at time.Time) {
		require.Eventually(t, func() bool {
			return e.rdb.HGet(ctx, record, "tick").Val() == strconv.FormatInt(at.UnixMilli(), 10)
		}, 5*time.Second, 10*time.Millisecond)
	}
	waiting(at(1, 0))
	version := func() string {
		v, err := e.rdb.HGet(ctx, record, "version").Result()
		require.NoError(t, err)
		return v
	}
	require.Equal(t, "1", version())

	put.set(rerun)
	state.set(rerun)
	s.Spec = "30 * * * * *"
	require.NoError(t, c.PutSchedule(ctx, s))
	require.Equal(t, "2", version(), "a rerun of a put changes the record once")
	require.False(t, hasTick(t, c, "rs", "r", at(1, 0)), "the rerun still removes the old waiting tick")
	require.Eventually(t, func() bool { return hasTick(t, c, "rs", "r", at(0, 30)) }, 5*time.Second, 10*time.Millisecond)
	waiting(at(0, 30))

	require.NoError(t, c.PauseSchedule(ctx, "r"))
	require.False(t, hasTick(t, c, "rs", "r", at(0, 30)), "the rerun of a pause still removes the waiting tick")
	require.NoError(t, c.ResumeSchedule(ctx, "r"))
	require.Eventually(t, func() bool { return hasTick(t, c, "rs", "r", at(0, 30)) }, 5*time.Second, 10*time.Millisecond)
	waiting(at(0, 30))
	require.NoError(t, c.DeleteSchedule(ctx, "r"), "a rerun of a delete is no ErrScheduleNotFound")
	require.False(t, hasTick(t, c, "rs", "r", at(0, 30)))
}

// TestScheduleOwnerKilled: when the client that owns a schedule is killed
// (SIGKILL), another takes its ticks over: every tick's job is still added
// exactly once and none is skipped.
func TestScheduleOwnerKilled(t *testing.T) {
	testutil.FaultTier(t)
	eachReal(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		s := redeq.Schedule{Name: "sweep", Topic: "sweeps", Spec: "@every 1s"}
		require.NoError(t, e.c.PutSchedule(ctx, s))
		ids := map[string]*child{}
		for range 2 {
			idc := make(chan string, 1)
			k := startChildKind(t, "mover", e.be, e.cfg.Prefix, "sweeps", func(line string) {
				if id, ok := strings.CutPrefix(line, "id "); ok {
					idc <- id
				}
			})
			select {
			case id := <-idc:
				ids[id] = k
			case <-time.After(30 * time.Second):
				t.Fatal("child did not start")
			}
		}
		// A consuming client that does not own the schedule, so the owner
		// killed is a child.
		var c *redeq.Client
		for range 20 {
			c = e.another(t, nil)
			live := []string{c.ConsumerID()}
			for id := range ids {
				live = append(live, id)
			}
			if bucket.Owner(live, "sched:sweep") != c.ConsumerID() {
				break
			}
		}
		l := newTickCounter("sweeps")
		startSched(t, c, l)
		waitTicks(t, l, 3)
		live := []string{c.ConsumerID()}
		for id := range ids {
			live = append(live, id)
		}
		owner := ids[bucket.Owner(live, "sched:sweep")]
		require.NotNil(t, owner, "a child owns the schedule: live %q, this client %q, owner %q",
			live, c.ConsumerID(), bucket.Owner(live, "sched:sweep"))
		owner.kill()
		ticks, _ := l.ticks()
		waitTicks(t, l, len(ticks)+5)

		infos, err := c.Schedules(ctx)
		require.NoError(t, err)
		require.Len(t, infos, 1)
		require.Equal(t, int64(0), infos[0].Skipped, "no tick is skipped when its owner dies")
		ticks, counts := l.ticks()
		for i, ms := range ticks {
			require.Equal(t, 1, counts[ms], "tick %d delivered %d times", ms, counts[ms])
			if i > 0 {
				require.Equal(t, int64(1000), ms-ticks[i-1], "no tick is missing between %d and %d", ticks[i-1], ms)
			}
		}
	})
}

// tickObserver counts what a ScheduleObserver hears.
type tickObserver struct {
	mu      sync.Mutex
	added   map[string]int
	skipped map[string]int64
}

func newTickObserver() *tickObserver {
	return &tickObserver{added: map[string]int{}, skipped: map[string]int64{}}
}

func (o *tickObserver) JobAdded(string)                                         {}
func (o *tickObserver) JobDelivered(*redeq.Job, time.Duration)                  {}
func (o *tickObserver) JobDone(*redeq.Job, redeq.Outcome, time.Duration, error) {}

func (o *tickObserver) TicksAdded(schedule, topic string, n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.added[schedule+"/"+topic] += n
}

func (o *tickObserver) TicksSkipped(schedule, topic string, n int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.skipped[schedule+"/"+topic] += n
}

func (o *tickObserver) counts(key string) (int, int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.added[key], o.skipped[key]
}

var _ redeq.ScheduleObserver = (*tickObserver)(nil)

// TestScheduleObserverAndLag: a client's ScheduleObserver hears each tick
// it adds and each missed tick its catch-up drops, once; ScheduleInfo.Lag
// reads 0 while the next tick waits ahead and, while no client runs, how
// long ago the first tick not added fell due.
func TestScheduleObserverAndLag(t *testing.T) {
	t.Parallel()
	be := testutil.Backends(t)[0] // the clock moves on miniredis only
	e := setup(t, be, testutil.Config(t))
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 12, 0, 10, 0, time.UTC)
	minute := func(m int) time.Time { return t0.Truncate(time.Minute).Add(time.Duration(m) * time.Minute) }
	frozen(e, t0)
	require.NoError(t, e.c.PutSchedule(ctx, redeq.Schedule{Name: "digest", Topic: "digests", Spec: "@every 1m"}))
	first := newTickObserver()
	require.NoError(t, e.c.Observe(redeq.Observers(first)), "a fan-out passes the ticks on")
	startSched(t, e.c, nil)
	require.Eventually(t, func() bool { return hasTick(t, e.c, "digests", "digest", minute(1)) }, 5*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { n, _ := first.counts("digest/digests"); return n == 1 }, 5*time.Second, 10*time.Millisecond)
	in := waitSchedule(t, e.c, "digest", func(redeq.ScheduleInfo) bool { return true })
	require.Zero(t, in.Lag, "the next tick waits ahead")
	require.NoError(t, e.c.Shutdown(ctx))

	// Down from 12:00:10 to 12:10:30: 12:01 was added, 12:02 is the
	// first tick not added.
	frozen(e, minute(10).Add(30*time.Second))
	in = waitSchedule(t, e.c, "digest", func(redeq.ScheduleInfo) bool { return true })
	require.Equal(t, 8*time.Minute+30*time.Second, in.Lag)

	back := e.another(t, nil)
	second := newTickObserver()
	require.NoError(t, back.Observe(second))
	startSched(t, back, nil)
	require.Eventually(t, func() bool { return hasTick(t, back, "digests", "digest", minute(11)) }, 5*time.Second, 10*time.Millisecond)
	// CatchUpLatest: 12:10 runs, 12:11 waits ahead, 12:02..12:09 skipped.
	require.Eventually(t, func() bool { n, s := second.counts("digest/digests"); return n == 2 && s == 8 }, 5*time.Second, 10*time.Millisecond)
	in = waitSchedule(t, back, "digest", func(in redeq.ScheduleInfo) bool { return in.Skipped == 8 })
	require.Zero(t, in.Lag)
	n, s := first.counts("digest/digests")
	require.Equal(t, 1, n, "a stopped client hears nothing more")
	require.Zero(t, s)
	frozen(e, minute(11).Add(time.Second))
	require.Eventually(t, func() bool { return hasTick(t, back, "digests", "digest", minute(12)) }, 5*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { n, _ := second.counts("digest/digests"); return n == 3 }, 5*time.Second, 10*time.Millisecond)
	n, s = second.counts("digest/digests")
	require.Equal(t, 3, n, "one report per tick")
	require.Equal(t, int64(8), s)
}

// TestScheduleObserverHearsTicksSkippedWhilePaused: the ticks that pass
// while a schedule is paused are counted in ScheduleInfo.Skipped and
// reported once to the ScheduleObserver of the client whose pass moves the
// cursor after the resume, whichever client resumed it (one with no
// observer, as the CLI's).
func TestScheduleObserverHearsTicksSkippedWhilePaused(t *testing.T) {
	t.Parallel()
	be := testutil.Backends(t)[0] // the clock moves on miniredis only
	e := setup(t, be, testutil.Config(t))
	ctx := context.Background()
	t0 := time.Date(2026, 3, 1, 12, 0, 10, 0, time.UTC)
	minute := func(m int) time.Time { return t0.Truncate(time.Minute).Add(time.Duration(m) * time.Minute) }
	frozen(e, t0)
	require.NoError(t, e.c.PutSchedule(ctx, redeq.Schedule{Name: "digest", Topic: "digests", Spec: "@every 1m"}))
	o := newTickObserver()
	require.NoError(t, e.c.Observe(o))
	startSched(t, e.c, nil)
	require.Eventually(t, func() bool { n, _ := o.counts("digest/digests"); return n == 1 }, 5*time.Second, 10*time.Millisecond)

	cli := e.another(t, nil) // not started, no observer
	require.NoError(t, cli.PauseSchedule(ctx, "digest"))
	frozen(e, minute(5).Add(30*time.Second))
	require.NoError(t, cli.ResumeSchedule(ctx, "digest"))
	// 12:01 (removed by the pause) to 12:05 passed while paused; 12:06
	// waits ahead.
	require.Eventually(t, func() bool { return hasTick(t, e.c, "digests", "digest", minute(6)) }, 5*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { _, s := o.counts("digest/digests"); return s == 5 }, 5*time.Second, 10*time.Millisecond)
	in := waitSchedule(t, e.c, "digest", func(in redeq.ScheduleInfo) bool { return in.Skipped == 5 })
	require.False(t, in.Paused)

	frozen(e, minute(6).Add(time.Second))
	require.Eventually(t, func() bool { return hasTick(t, e.c, "digests", "digest", minute(7)) }, 5*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { n, _ := o.counts("digest/digests"); return n == 3 }, 5*time.Second, 10*time.Millisecond)
	_, s := o.counts("digest/digests")
	require.Equal(t, int64(5), s, "reported once")
}

// TestNextTicksAcrossDaylightSaving: in a zone's wall clock, a local time
// that the spring change skips ticks once, at the first instant after the
// gap, and one that the autumn change repeats ticks once, at its first
// occurrence, even when computed from inside the repeated span; @every
// keeps its absolute spacing. In America/New_York (a one-hour shift at
// 02:00) and Australia/Lord_Howe (a 30-minute shift), for 5-field and
// 6-field specs and descriptors.
func TestNextTicksAcrossDaylightSaving(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, zone, spec, after string
		want                    []string
	}{
		// New York, spring: 2026-03-08 02:00 EST -> 03:00 EDT.
		{"NewYork/SpringDailyInTheGap", "America/New_York", "30 2 * * *", "2026-03-07T12:00:00-05:00",
			[]string{"2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"}},
		{"NewYork/SpringHourly", "America/New_York", "0 * * * *", "2026-03-08T00:30:00-05:00",
			[]string{"2026-03-08T01:00:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T04:00:00-04:00"}},
		{"NewYork/SpringTwoTicksInTheGapRunOnce", "America/New_York", "*/30 2 * * *", "2026-03-07T12:00:00-05:00",
			[]string{"2026-03-08T03:00:00-04:00", "2026-03-09T02:00:00-04:00", "2026-03-09T02:30:00-04:00"}},
		{"NewYork/SpringWithSeconds", "America/New_York", "0 15 2 * * *", "2026-03-07T12:00:00-05:00",
			[]string{"2026-03-08T03:00:00-04:00", "2026-03-09T02:15:00-04:00"}},
		{"NewYork/SpringEvery", "America/New_York", "@every 1h", "2026-03-08T00:30:00-05:00",
			[]string{"2026-03-08T01:00:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T04:00:00-04:00"}},
		// New York, autumn: 2026-11-01 02:00 EDT -> 01:00 EST.
		{"NewYork/AutumnDailyInTheRepeat", "America/New_York", "30 1 * * *", "2026-10-31T12:00:00-04:00",
			[]string{"2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"}},
		{"NewYork/AutumnFromInsideTheRepeat", "America/New_York", "30 1 * * *", "2026-11-01T01:15:00-05:00",
			[]string{"2026-11-02T01:30:00-05:00"}},
		{"NewYork/AutumnHourly", "America/New_York", "@hourly", "2026-11-01T00:30:00-04:00",
			[]string{"2026-11-01T01:00:00-04:00", "2026-11-01T02:00:00-05:00", "2026-11-01T03:00:00-05:00"}},
		{"NewYork/AutumnQuarterHours", "America/New_York", "*/15 * * * *", "2026-11-01T01:40:00-04:00",
			[]string{"2026-11-01T01:45:00-04:00", "2026-11-01T02:00:00-05:00"}},
		{"NewYork/AutumnWithSeconds", "America/New_York", "30 30 1 * * *", "2026-10-31T12:00:00-04:00",
			[]string{"2026-11-01T01:30:30-04:00", "2026-11-02T01:30:30-05:00"}},
		{"NewYork/AutumnEvery", "America/New_York", "@every 30m", "2026-11-01T01:40:00-04:00",
			[]string{"2026-11-01T01:00:00-05:00", "2026-11-01T01:30:00-05:00", "2026-11-01T02:00:00-05:00"}},
		// Lord Howe, spring: 2026-10-04 02:00 +10:30 -> 02:30 +11:00.
		{"LordHowe/SpringQuarterHours", "Australia/Lord_Howe", "0,15,30,45 2 * * *", "2026-10-03T12:00:00+10:30",
			[]string{"2026-10-04T02:30:00+11:00", "2026-10-04T02:45:00+11:00", "2026-10-05T02:00:00+11:00"}},
		{"LordHowe/SpringDailyInTheGap", "Australia/Lord_Howe", "15 2 * * *", "2026-10-03T12:00:00+10:30",
			[]string{"2026-10-04T02:30:00+11:00", "2026-10-05T02:15:00+11:00"}},
		{"LordHowe/SpringDaily", "Australia/Lord_Howe", "@daily", "2026-10-03T12:00:00+10:30",
			[]string{"2026-10-04T00:00:00+10:30", "2026-10-05T00:00:00+11:00"}},
		// Lord Howe, autumn: 2026-04-05 02:00 +11:00 -> 01:30 +10:30.
		{"LordHowe/AutumnQuarterHours", "Australia/Lord_Howe", "*/15 1 * * *", "2026-04-04T12:00:00+11:00",
			[]string{"2026-04-05T01:00:00+11:00", "2026-04-05T01:15:00+11:00", "2026-04-05T01:30:00+11:00",
				"2026-04-05T01:45:00+11:00", "2026-04-06T01:00:00+10:30"}},
		{"LordHowe/AutumnHourly", "Australia/Lord_Howe", "0 * * * *", "2026-04-05T00:30:00+11:00",
			[]string{"2026-04-05T01:00:00+11:00", "2026-04-05T02:00:00+10:30", "2026-04-05T03:00:00+10:30"}},
		{"LordHowe/AutumnFromInsideTheRepeat", "Australia/Lord_Howe", "45 1 * * *", "2026-04-05T01:35:00+10:30",
			[]string{"2026-04-06T01:45:00+10:30"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			loc, err := time.LoadLocation(tc.zone)
			require.NoError(t, err)
			after, err := time.Parse(time.RFC3339, tc.after)
			require.NoError(t, err)
			got, err := redeq.NextTicks(redeq.Schedule{Spec: tc.spec, TimeZone: tc.zone}, after, len(tc.want))
			require.NoError(t, err)
			var have []string
			for _, g := range got {
				require.Equal(t, loc, g.Location(), "ticks are in the schedule's zone")
				have = append(have, g.Format(time.RFC3339))
			}
			require.Equal(t, tc.want, have)
		})
	}
}

// TestScheduleChangeStopsTicksOfADeadPass: a delete, pause or change of a
// schedule made while a pass is writing a tick (after the pass read the
// record, or just after it wrote the tick) stops that tick even when the
// pass's process dies before its second step (the cursor move never
// comes): the rest of the fleet never runs a tick of the schedule as it
// was before the call.
func TestScheduleChangeStopsTicksOfADeadPass(t *testing.T) {
	testutil.FaultTier(t) // a few seconds per backend and change
	for _, tc := range []struct {
		change string
		after  bool // the call comes just after the tick's write, not before
	}{{"Delete", false}, {"Pause", false}, {"Change", false}, {"Delete", true}, {"Pause", true}} {
		change := tc.change
		name := change + "BeforeTheWrite"
		if tc.after {
			name = change + "AfterTheWrite"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel() // each case waits seconds past its tick, on a prefix and clients of its own
			each(t, func(t *testing.T, e *env) {
				ctx := context.Background()
				s := redeq.Schedule{Name: "r", Topic: "rs", Spec: "@every 1s", Body: []byte("old")}
				require.NoError(t, e.c.PutSchedule(ctx, s))
				tick := newScriptHook(t, "redeq/schedule_tick.lua")
				advance := newScriptHook(t, "redeq/schedule_advance.lua")
				var (
					mu     sync.Mutex
					orphan string // the job id the dying pass writes
				)
				tick.set(func(ctx context.Context, cmd redis.Cmder, next func() error) error {
					mu.Lock()
					first := orphan == ""
					if first {
						orphan = cmd.Args()[6].(string) // ARGV[1], after 3 keys
					}
					mu.Unlock()
					call := func() {
						switch change {
						case "Delete":
							require.NoError(t, e.c.DeleteSchedule(ctx, "r"))
						case "Pause":
							require.NoError(t, e.c.PauseSchedule(ctx, "r"))
						case "Change":
							changed := s
							changed.Body = []byte("new")
							require.NoError(t, e.c.PutSchedule(ctx, changed))
						}
					}
					if !first {
						return next()
					}
					if !tc.after {
						call() // after this pass read the record
						return next()
					}
					err := next()
					call() // after the tick's write, before the cursor move
					return err
				})
				// The process is gone before its cursor move.
				advance.set(func(context.Context, redis.Cmder, func() error) error {
					return errors.New("connection lost: the process died")
				})
				dying := e.hooked(t, tick, advance)
				startSched(t, dying, nil)
				require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return orphan != "" }, 10*time.Second, 10*time.Millisecond)
				mu.Lock()
				id := orphan
				mu.Unlock()
				ms, err := strconv.ParseInt(strings.TrimPrefix(id, "r@"), 10, 64)
				require.NoError(t, err)
				_ = dying.Shutdown(ctx)

				// The rest of the fleet runs on, past the tick's instant.
				var (
					lmu  sync.Mutex
					runs []string // "<id> <body>" of each delivery
				)
				l := redeq.ListenerFunc("rs", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
					lmu.Lock()
					runs = append(runs, job.ID+" "+string(job.Body))
					lmu.Unlock()
					ch.Ack()
					return nil
				})
				startSched(t, e.another(t, nil), l)
				require.Eventually(t, func() bool { return time.Now().After(time.UnixMilli(ms).Add(3 * time.Second)) }, 20*time.Second, 50*time.Millisecond)
				lmu.Lock()
				defer lmu.Unlock()
				require.NotContains(t, runs, id+" old", "tick %s of the schedule as it was before the %s ran", id, change)
			})
		})
	}
}

// deadPassKind is the child that runs schedules until a pass has written
// a tick: it prints "wrote <job id>" and hangs before the cursor move, for
// its parent to SIGKILL it there.
const deadPassKind = "deadpass"

func runDeadPassChild() {
	load := func(path string) *scriptHook {
		src, err := os.ReadFile(path)
		childMust(err)
		return &scriptHook{Script: testutil.ScriptOf(filepath.Base(path), script.Source(string(src)))}
	}
	tick, advance := load("schedule_tick.lua"), load("schedule_advance.lua")
	var (
		mu    sync.Mutex
		wrote string
	)
	tick.set(func(ctx context.Context, cmd redis.Cmder, next func() error) error {
		err := next()
		mu.Lock()
		if wrote == "" && err == nil {
			wrote = fmt.Sprint(cmd.Args()[6]) // ARGV[1], after 3 keys
		}
		mu.Unlock()
		return err
	})
	advance.set(func(context.Context, redis.Cmder, func() error) error {
		mu.Lock()
		id := wrote
		mu.Unlock()
		fmt.Println("wrote " + id)
		select {} // killed here
	})
	c := childClient(nil, tick, advance)
	childMust(c.Start(context.Background()))
	select {}
}

// TestSchedulePauseOrDeleteStopsTickOfAKilledPass: a client SIGKILLed between the
// two steps of a pass (its tick's job written, the cursor not yet moved),
// then a pause or delete of the schedule before the tick's instant: the
// rest of the fleet never runs that tick. (A tick whose instant came
// before the change runs, as every job due before it does.)
func TestSchedulePauseOrDeleteStopsTickOfAKilledPass(t *testing.T) {
	testutil.FaultTier(t)
	for _, change := range []string{"Pause", "Delete"} {
		t.Run(change, func(t *testing.T) {
			eachReal(t, func(t *testing.T, e *env) {
				ctx := context.Background()
				// One tick, some seconds on: the change comes before it
				// however slow the machine is to start the child.
				at := time.Now().UTC().Add(6 * time.Second).Truncate(time.Second)
				spec := fmt.Sprintf("%d %d %d %d %d *", at.Second(), at.Minute(), at.Hour(), at.Day(), int(at.Month()))
				require.NoError(t, e.c.PutSchedule(ctx, redeq.Schedule{Name: "r", Topic: "rs", Spec: spec}))
				wrote := make(chan string, 1)
				k := startChildKind(t, deadPassKind, e.be, e.cfg.Prefix, "rs", func(line string) {
					if id, ok := strings.CutPrefix(line, "wrote "); ok {
						wrote <- id
					}
				})
				var id string
				select {
				case id = <-wrote:
				case <-time.After(30 * time.Second):
					t.Fatal("the child wrote no tick")
				}
				k.kill()
				if change == "Pause" {
					require.NoError(t, e.c.PauseSchedule(ctx, "r"))
				} else {
					require.NoError(t, e.c.DeleteSchedule(ctx, "r"))
				}
				ms, err := strconv.ParseInt(strings.TrimPrefix(id, "r@"), 10, 64)
				require.NoError(t, err)
				require.Equal(t, at.UnixMilli(), ms, "the scenario: the killed pass wrote the one tick")
				now, err := e.rdb.Time(ctx).Result()
				require.NoError(t, err)
				require.Less(t, now.UnixMilli(), ms, "the scenario: the %s came before the tick's instant", change)

				l := newTickCounter("rs")
				startSched(t, e.c, l)
				require.Eventually(t, func() bool { return time.Now().After(time.UnixMilli(ms).Add(3 * time.Second)) }, 20*time.Second, 50*time.Millisecond)
				ticks, _ := l.ticks()
				require.NotContains(t, ticks, ms, "tick %s, written by the killed pass, ran after the %s", id, change)
			})
		})
	}
}

// TestScheduleChangeWhoseCallerDiesIsFinishedByAPass: a put that changes a
// schedule, a pause or a delete whose caller dies after its record write,
// before it stopped the waiting tick of the generation it ended, is
// finished by the next pass of any client: the old tick's job goes (a
// changed schedule's tick at that instant comes back with the new
// content), so it never runs, and a deleted schedule leaves the index.
func TestScheduleChangeWhoseCallerDiesIsFinishedByAPass(t *testing.T) {
	t.Parallel()
	for _, change := range []string{"Change", "Pause", "Delete"} {
		t.Run(change, func(t *testing.T) {
			each(t, func(t *testing.T, e *env) {
				ctx := context.Background()
				s := redeq.Schedule{Name: "y", Topic: "ys", Spec: "0 0 1 1 *", Body: []byte("old")}
				require.NoError(t, e.c.PutSchedule(ctx, s))
				startSched(t, e.c, nil)
				next, err := redeq.NextTicks(s, time.Now(), 1)
				require.NoError(t, err)
				id := "y@" + strconv.FormatInt(next[0].UnixMilli(), 10)
				require.Eventually(t, func() bool { return hasTick(t, e.c, "ys", "y", next[0]) }, 10*time.Second, 10*time.Millisecond)

				drop := newScriptHook(t, "redeq/schedule_drop.lua")
				drop.set(func(context.Context, redis.Cmder, func() error) error {
					return errors.New("connection lost: the process died")
				})
				dying := e.hooked(t, drop)
				switch change {
				case "Change":
					changed := s
					changed.Body = []byte("new")
					require.Error(t, dying.PutSchedule(ctx, changed))
				case "Pause":
					require.Error(t, dying.PauseSchedule(ctx, "y"))
				case "Delete":
					require.Error(t, dying.DeleteSchedule(ctx, "y"))
				}
				require.True(t, hasTick(t, e.c, "ys", "y", next[0]), "the caller died before it stopped the tick")

				require.Eventually(t, func() bool {
					job, err := e.c.Get(ctx, "ys", id)
					if errors.Is(err, redeq.ErrJobNotFound) {
						return change != "Change"
					}
					require.NoError(t, err)
					return string(job.Body) == "new"
				}, 10*time.Second, 10*time.Millisecond, "a pass stops the old generation's tick")
				require.Eventually(t, func() bool {
					return e.rdb.Exists(ctx, e.cfg.Prefix+":{sched:y}:stale").Val() == 0
				}, 10*time.Second, 10*time.Millisecond, "and forgets the generation")
				if change == "Delete" {
					require.Eventually(t, func() bool {
						return !slices.Contains(e.rdb.ZRange(ctx, e.cfg.Prefix+":schedules", 0, -1).Val(), "y")
					}, 10*time.Second, 10*time.Millisecond, "and the deleted schedule's index entry")
				}
			})
		})
	}
}

// TestScheduleChangeRetriedAfterAFailureFinishesIt: a put that changes a
// schedule, a pause or a delete whose first call failed after its record
// write, before it stopped the waiting tick, is finished by the caller's
// retry, with no pass running: when the retry returns, the tick's job is
// gone (and a deleted schedule's index entry with it), whatever the retry
// answers (nil for a put of the content stored already or a schedule
// paused already, ErrScheduleNotFound for one deleted already).
func TestScheduleChangeRetriedAfterAFailureFinishesIt(t *testing.T) {
	t.Parallel()
	for _, change := range []string{"Change", "Pause", "Delete"} {
		t.Run(change, func(t *testing.T) {
			each(t, func(t *testing.T, e *env) {
				ctx := context.Background()
				s := redeq.Schedule{Name: "q", Topic: "qs", Spec: "0 0 1 1 *"}
				require.NoError(t, e.c.PutSchedule(ctx, s))
				next, err := redeq.NextTicks(s, time.Now(), 1)
				require.NoError(t, err)
				// Another client adds the tick, then stops: no pass runs
				// from here on.
				adder := e.another(t, nil)
				startSched(t, adder, nil)
				require.Eventually(t, func() bool { return hasTick(t, e.c, "qs", "q", next[0]) }, 10*time.Second, 10*time.Millisecond)
				require.NoError(t, adder.Shutdown(ctx))

				drop := newScriptHook(t, "redeq/schedule_drop.lua")
				drop.set(func(context.Context, redis.Cmder, func() error) error { return errors.New("i/o timeout") })
				failing := e.hooked(t, drop)
				index := e.cfg.Prefix + ":schedules"
				switch change {
				case "Change":
					changed := s
					changed.Body = []byte("new")
					require.Error(t, failing.PutSchedule(ctx, changed))
					require.True(t, hasTick(t, e.c, "qs", "q", next[0]), "the scenario: the first call left the tick")
					require.NoError(t, e.c.PutSchedule(ctx, changed), "a retry of a put succeeds")
				case "Pause":
					require.Error(t, failing.PauseSchedule(ctx, "q"))
					require.True(t, hasTick(t, e.c, "qs", "q", next[0]), "the scenario: the first call left the tick")
					require.NoError(t, e.c.PauseSchedule(ctx, "q"), "a retry of a pause succeeds")
				case "Delete":
					require.Error(t, failing.DeleteSchedule(ctx, "q"))
					require.True(t, hasTick(t, e.c, "qs", "q", next[0]), "the scenario: the first call left the tick")
					require.ErrorIs(t, e.c.DeleteSchedule(ctx, "q"), redeq.ErrScheduleNotFound)
					require.NotContains(t, e.rdb.ZRange(ctx, index, 0, -1).Val(), "q", "the deleted schedule leaves the index")
				}
				require.False(t, hasTick(t, e.c, "qs", "q", next[0]), "the retry stopped the waiting tick")
				require.Zero(t, e.rdb.Exists(ctx, e.cfg.Prefix+":{sched:q}:stale").Val(), "and forgot the generation")
			})
		})
	}
}

// TestScheduleTickRunsOnceWhenItsStopIsLate: a change of a schedule's body
// keeps its tick instants; when the stop of the ended generation's waiting
// tick comes late (its caller failed in it, and the pass that finishes it
// takes seconds), so that the old tick's job may run first, the tick still
// runs once: with the old body when its job ran before the stop, else with
// the new one.
func TestScheduleTickRunsOnceWhenItsStopIsLate(t *testing.T) {
	testutil.FaultTier(t) // it waits for ticks seconds apart
	eachRealBeside(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var slowOn atomic.Bool
		slow := newScriptHook(t, "redeq/schedule_drop.lua")
		slow.set(func(ctx context.Context, cmd redis.Cmder, run func() error) error {
			if slowOn.Load() {
				time.Sleep(2 * time.Second)
			}
			return run()
		})
		runner := e.hooked(t, slow)
		s := redeq.Schedule{Name: "late", Topic: "lates", Spec: "@every 4s", Body: []byte("old")}
		require.NoError(t, runner.PutSchedule(ctx, s))
		l := newTickCounter("lates")
		startSched(t, runner, l)
		var next time.Time
		require.Eventually(t, func() bool {
			n, err := redeq.NextTicks(s, time.Now(), 1)
			require.NoError(t, err)
			next = n[0]
			return time.Until(next) > time.Second && time.Until(next) < 1700*time.Millisecond && hasTick(t, runner, "lates", "late", next)
		}, 20*time.Second, 5*time.Millisecond)
		slowOn.Store(true)
		dead := newScriptHook(t, "redeq/schedule_drop.lua")
		dead.set(func(context.Context, redis.Cmder, func() error) error { return errors.New("connection reset") })
		changed := s
		changed.Body = []byte("new")
		require.Error(t, e.hooked(t, dead).PutSchedule(ctx, changed))
		require.Eventually(t, func() bool { return time.Now().After(next.Add(4 * time.Second)) }, 20*time.Second, 50*time.Millisecond)
		_, counts := l.ticks()
		require.Equal(t, 1, counts[next.UnixMilli()], "tick %d runs once", next.UnixMilli())
	})
}

// TestResumeThatReachesRedisLateRunsNoPausedTick: a ResumeSchedule whose
// call reaches Redis after ticks that passed while the schedule was still
// paused runs none of them: they are counted in Skipped, and the schedule
// ticks from the first tick after the resume took effect.
func TestResumeThatReachesRedisLateRunsNoPausedTick(t *testing.T) {
	t.Parallel()
	be := testutil.Backends(t)[0] // the clock moves on miniredis only
	e := setup(t, be, testutil.Config(t))
	ctx := context.Background()
	at := noonAt
	frozen(e, at(0, 10))
	s := redeq.Schedule{Name: "late", Topic: "lates", Spec: "@every 1m"}
	require.NoError(t, e.c.PutSchedule(ctx, s))
	startSched(t, e.c, nil)
	waitTick(t, e.c, "lates", "late", at(1, 0))
	require.NoError(t, e.c.PauseSchedule(ctx, "late"))
	frozen(e, at(5, 40))

	// The first resume call is on the wire until 12:08:40.
	var once sync.Once
	hook := newScriptHook(t, "redeq/schedule_state.lua")
	hook.set(func(ctx context.Context, cmd redis.Cmder, next func() error) error {
		if fmt.Sprint(cmd.Args()[7]) == "resume" {
			once.Do(func() { frozen(e, at(8, 40)) })
		}
		return next()
	})
	require.NoError(t, e.hooked(t, hook).ResumeSchedule(ctx, "late"))
	in := waitSchedule(t, e.c, "late", func(in redeq.ScheduleInfo) bool { return in.Next.Equal(at(9, 0)) })
	require.False(t, in.Paused)
	require.Equal(t, int64(8), in.Skipped, "ticks 12:01 to 12:08 passed while paused")
	waitTick(t, e.c, "lates", "late", at(9, 0))
	for m := 1; m <= 8; m++ {
		require.False(t, hasTick(t, e.c, "lates", "late", at(m, 0)), "tick 12:%02d passed while paused", m)
	}
}

// TestScheduleResumedWhileItsOwnerMarksItPausedTicks: a resume that lands
// while the owner's pass, which read the schedule paused, is writing the
// paused mark into the schedule index still ticks: the pass finds the
// schedule resumed and leaves its index entry due. (No pass but the full
// one looks at an entry marked paused, so a mark left over a resumed
// schedule would stop it until then.)
func TestScheduleResumedWhileItsOwnerMarksItPausedTicks(t *testing.T) {
	t.Parallel()
	e, ctx := heldSchedule(t)
	mark := &cmdOnce{match: pausedMarkOf(e, "held")}
	owner := e.hooked(t, mark)
	pausedAfterATick(t, e, owner)
	// The owner's next pass reads the schedule paused and marks its entry
	// so; the resume lands between the two.
	mark.arm(func() error {
		require.NoError(t, e.c.ResumeSchedule(ctx, "held"))
		return nil
	})
	require.NoError(t, e.rdb.ZAdd(ctx, keys.Schedules(e.cfg.Prefix), redis.Z{Score: 0, Member: "held"}).Err())
	require.Eventually(t, mark.fired, 5*time.Second, 10*time.Millisecond, "the owner's pass never marked the schedule paused")
	waitTick(t, e.c, "helds", "held", noonAt(2, 0))
	in := waitSchedule(t, e.c, "held", func(in redeq.ScheduleInfo) bool { return in.Next.Equal(noonAt(2, 0)) })
	require.False(t, in.Paused)
}

// TestScheduleResumedWhileItsOwnerMarksItPausedTicksDespiteAFailedReread:
// as above, with the owner's read of the record after its paused mark
// failing once: the resume returned nil, and the schedule ticks again.
func TestScheduleResumedWhileItsOwnerMarksItPausedTicksDespiteAFailedReread(t *testing.T) {
	t.Parallel()
	e, ctx := heldSchedule(t)
	mark := &cmdOnce{match: pausedMarkOf(e, "held")}
	record := keys.ForSchedule(e.cfg.Prefix, "held").Record()
	read := &cmdOnce{match: func(args []any) bool {
		return len(args) == 2 && fmt.Sprint(args[0]) == "hgetall" && fmt.Sprint(args[1]) == record
	}}
	owner := e.hooked(t, mark, read)
	pausedAfterATick(t, e, owner)
	mark.arm(func() error {
		require.NoError(t, e.c.ResumeSchedule(ctx, "held"))
		read.arm(unsent) // the owner's next read of the record, after its mark
		return nil
	})
	require.NoError(t, e.rdb.ZAdd(ctx, keys.Schedules(e.cfg.Prefix), redis.Z{Score: 0, Member: "held"}).Err())
	require.Eventually(t, mark.fired, 5*time.Second, 10*time.Millisecond, "the owner's pass never marked the schedule paused")
	require.Eventually(t, read.fired, 5*time.Second, 10*time.Millisecond, "the read after the mark never failed")
	waitTick(t, e.c, "helds", "held", noonAt(2, 0))
}

// TestResumeRetriedAfterItsIndexWriteFailedTicks: a resume whose record
// write landed and whose index write failed returns an error; retried, it
// returns nil, and the schedule ticks again.
func TestResumeRetriedAfterItsIndexWriteFailedTicks(t *testing.T) {
	t.Parallel()
	e, ctx := heldSchedule(t)
	pausedAfterATick(t, e, e.c)
	write := &cmdOnce{match: dueMarkOf(e, "held")}
	write.arm(unsent)
	resumer := e.hooked(t, write)
	require.Error(t, resumer.ResumeSchedule(ctx, "held"), "the index write fails")
	require.True(t, write.fired())
	require.NoError(t, resumer.ResumeSchedule(ctx, "held"), "retried")
	waitTick(t, e.c, "helds", "held", noonAt(2, 0))
}

// TestResumeRetriedAfterItsIndexWriteFailedSetsItsEntryDue: a resume
// retried after its index write failed (its record write landed) sets the
// schedule's index entry due itself, with no pass of any client to heal
// it.
func TestResumeRetriedAfterItsIndexWriteFailedSetsItsEntryDue(t *testing.T) {
	t.Parallel()
	e, ctx := heldSchedule(t)
	require.NoError(t, e.c.PauseSchedule(ctx, "held"))
	index := keys.Schedules(e.cfg.Prefix)
	require.Equal(t, float64(pool.MaxDueMs), e.rdb.ZScore(ctx, index, "held").Val())
	frozen(e, noonAt(1, 30))
	write := &cmdOnce{match: dueMarkOf(e, "held")}
	write.arm(unsent)
	resumer := e.hooked(t, write)
	require.Error(t, resumer.ResumeSchedule(ctx, "held"))
	require.Equal(t, float64(pool.MaxDueMs), e.rdb.ZScore(ctx, index, "held").Val(), "the failed resume left the paused mark")
	require.NoError(t, resumer.ResumeSchedule(ctx, "held"))
	require.Equal(t, float64(0), e.rdb.ZScore(ctx, index, "held").Val(), "the retried resume sets the entry due")
}

// TestScheduleWhoseIndexEntrySaysPausedWhileItIsActiveTicks: an active
// schedule whose index entry a writer left marked paused (one that died
// between a record's change and its index write) ticks again: the owner's
// full pass reads the records of paused entries too.
func TestScheduleWhoseIndexEntrySaysPausedWhileItIsActiveTicks(t *testing.T) {
	t.Parallel()
	e, ctx := heldSchedule(t)
	startSched(t, e.c, nil)
	waitTick(t, e.c, "helds", "held", noonAt(1, 0))
	require.NoError(t, e.rdb.ZAdd(ctx, keys.Schedules(e.cfg.Prefix), redis.Z{Score: float64(pool.MaxDueMs), Member: "held"}).Err())
	frozen(e, noonAt(1, 30))
	waitTick(t, e.c, "helds", "held", noonAt(2, 0))
}

// heldSchedule is a miniredis setup (its clock moves) whose clock stands
// at 12:00:10, with schedule "held" ("@every 1m" on topic "helds") put.
func heldSchedule(t *testing.T) (*env, context.Context) {
	t.Helper()
	e := setup(t, testutil.Backends(t)[0], testutil.Config(t))
	ctx := context.Background()
	frozen(e, noonAt(0, 10))
	require.NoError(t, e.c.PutSchedule(ctx, redeq.Schedule{Name: "held", Topic: "helds", Spec: "@every 1m"}))
	return e, ctx
}

// pausedAfterATick starts owner, waits for the job of held's 12:01 tick,
// pauses held and moves the clock to 12:01:30.
func pausedAfterATick(t *testing.T, e *env, owner *redeq.Client) {
	t.Helper()
	startSched(t, owner, nil)
	waitTick(t, e.c, "helds", "held", noonAt(1, 0))
	require.NoError(t, e.c.PauseSchedule(context.Background(), "held"))
	frozen(e, noonAt(1, 30))
}

// pausedMarkOf matches a pass's ZADD XX that marks schedule name paused in
// e's schedule index.
func pausedMarkOf(e *env, name string) func([]any) bool {
	index := keys.Schedules(e.cfg.Prefix)
	return func(args []any) bool {
		if len(args) != 5 || fmt.Sprint(args[0]) != "zadd" || fmt.Sprint(args[1]) != index ||
			!strings.EqualFold(fmt.Sprint(args[2]), "xx") || fmt.Sprint(args[4]) != name {
			return false
		}
		score, ok := args[3].(float64)
		return ok && score >= float64(pool.MaxDueMs)
	}
}

// dueMarkOf matches a plain ZADD of schedule name into e's schedule index
// (a resume's).
func dueMarkOf(e *env, name string) func([]any) bool {
	index := keys.Schedules(e.cfg.Prefix)
	return func(args []any) bool {
		return len(args) == 4 && fmt.Sprint(args[0]) == "zadd" && fmt.Sprint(args[1]) == index && fmt.Sprint(args[3]) == name
	}
}

// unsent fails a command as if it never reached Redis.
func unsent() error { return testutil.ErrUnsent }

// cmdOnce runs its armed function once, before the client's next command
// that match accepts: the command fails with the function's error, or is
// sent when it returns nil.
type cmdOnce struct {
	match func(args []any) bool
	mu    sync.Mutex
	f     func() error
	did   bool
}

func (h *cmdOnce) arm(f func() error) {
	h.mu.Lock()
	h.f = f
	h.mu.Unlock()
}

// fired reports whether the armed function has run and returned.
func (h *cmdOnce) fired() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.did
}

func (h *cmdOnce) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *cmdOnce) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *cmdOnce) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !h.match(cmd.Args()) {
			return next(ctx, cmd)
		}
		h.mu.Lock()
		f := h.f
		h.f = nil
		h.mu.Unlock()
		if f == nil {
			return next(ctx, cmd)
		}
		err := f()
		h.mu.Lock()
		h.did = true
		h.mu.Unlock()
		if err != nil {
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

// TestTickWrittenLateAcrossAChangeRunsOnce: a tick due before a change of
// its schedule, whose job the ended generation's pass had not written yet
// when the change came (its call was held on the wire), runs once: the
// held write adds nothing, and the new generation adds the tick, with the
// new content.
func TestTickWrittenLateAcrossAChangeRunsOnce(t *testing.T) {
	t.Parallel()
	be := testutil.Backends(t)[0] // the clock moves on miniredis only
	e := setup(t, be, testutil.Config(t))
	ctx := context.Background()
	at := noonAt
	id := func(m int) string { return "held@" + strconv.FormatInt(at(m, 0).UnixMilli(), 10) }
	frozen(e, at(0, 10))
	s := redeq.Schedule{Name: "held", Topic: "helds", Spec: "@every 1m", Body: []byte("old")}
	require.NoError(t, e.c.PutSchedule(ctx, s))

	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hook := newScriptHook(t, "redeq/schedule_tick.lua")
	hook.set(func(ctx context.Context, cmd redis.Cmder, next func() error) error {
		if fmt.Sprint(cmd.Args()[6]) == id(2) {
			once.Do(func() {
				close(held)
				<-release
			})
		}
		return next()
	})
	runner := e.hooked(t, hook)
	startSched(t, runner, nil)
	waitTick(t, e.c, "helds", "held", at(1, 0))
	frozen(e, at(1, 0)) // the next pass adds tick 12:02 ahead; its write is held
	<-held

	frozen(e, at(2, 30))
	s.Body = []byte("new")
	require.NoError(t, e.c.PutSchedule(ctx, s))
	close(release)
	waitTick(t, e.c, "helds", "held", at(3, 0))
	job, err := e.c.Get(ctx, "helds", id(2))
	require.NoError(t, err, "the tick due before the change is added")
	require.Equal(t, "new", string(job.Body), "by the new generation: the held write added nothing")
	in := waitSchedule(t, e.c, "held", func(in redeq.ScheduleInfo) bool { return in.Next.Equal(at(3, 0)) })
	require.Zero(t, in.Skipped)
}

// TestScheduleWindowRoundsUpToAMillisecond: a CatchUpWindow is kept in
// whole milliseconds, rounded up as retry intervals are, so a window under
// a millisecond is one millisecond, never the 24 h default.
func TestScheduleWindowRoundsUpToAMillisecond(t *testing.T) {
	t.Parallel()
	e := setup(t, testutil.Backends(t)[0], testutil.Config(t))
	ctx := context.Background()
	s := redeq.Schedule{Name: "w", Topic: "ws", Spec: "@hourly", CatchUp: redeq.CatchUpAll, CatchUpWindow: 500 * time.Microsecond}
	require.NoError(t, e.c.PutSchedule(ctx, s))
	in := waitSchedule(t, e.c, "w", func(redeq.ScheduleInfo) bool { return true })
	require.Equal(t, time.Millisecond, in.CatchUpWindow)
	s.CatchUpWindow = 1500 * time.Microsecond
	require.NoError(t, e.c.PutSchedule(ctx, s))
	in = waitSchedule(t, e.c, "w", func(redeq.ScheduleInfo) bool { return true })
	require.Equal(t, 2*time.Millisecond, in.CatchUpWindow)
}

// lostAdvances returns a client whose every schedule_advance.lua call is
// lost before it reaches Redis: its passes add their ticks' jobs, and the
// schedule's cursor stays where it was.
func lostAdvances(t *testing.T, e *env) *redeq.Client {
	hook := newScriptHook(t, "redeq/schedule_advance.lua")
	hook.set(func(context.Context, redis.Cmder, func() error) error { return testutil.ErrUnsent })
	return e.hooked(t, hook)
}

// aheadWithCursorBehind puts s, an "@every 1m" schedule, at 12:00:10 and
// starts a client whose cursor moves are lost: with the clock then at
// 12:01:30, the jobs of ticks 12:01 and 12:02 exist and the cursor is
// still at 12:00:10. It returns that client.
func aheadWithCursorBehind(t *testing.T, e *env, s redeq.Schedule) *redeq.Client {
	t.Helper()
	frozen(e, noonAt(0, 10))
	require.NoError(t, e.c.PutSchedule(context.Background(), s))
	runner := lostAdvances(t, e)
	startSched(t, runner, nil)
	waitTick(t, e.c, s.Topic, s.Name, noonAt(1, 0))
	frozen(e, noonAt(1, 30))
	waitTick(t, e.c, s.Topic, s.Name, noonAt(2, 0))
	return runner
}

// TestTickAddedBeforeAnOutageWithItsCursorBehindRunsOnce: a tick whose job
// was added ahead before the whole fleet went down, by a pass whose cursor
// move was lost, is on time, not missed: it runs, the latest missed tick
// runs too, and only the others are counted as skipped.
func TestTickAddedBeforeAnOutageWithItsCursorBehindRunsOnce(t *testing.T) {
	t.Parallel()
	be := testutil.Backends(t)[0] // the clock moves on miniredis only
	e := setup(t, be, testutil.Config(t))
	ctx := context.Background()
	at := func(m int) time.Time { return noonAt(m, 0) }
	frozen(e, at(0).Add(10*time.Second))
	s := redeq.Schedule{Name: "out", Topic: "outs", Spec: "@every 1m"}
	require.NoError(t, e.c.PutSchedule(ctx, s))
	runner := lostAdvances(t, e)
	startSched(t, runner, nil)
	waitTick(t, e.c, "outs", "out", at(1))
	require.NoError(t, runner.Shutdown(ctx))

	frozen(e, at(10).Add(30*time.Second))
	back := e.another(t, nil)
	startSched(t, back, nil)
	require.Eventually(t, func() bool { return hasTick(t, back, "outs", "out", at(11)) }, 5*time.Second, 10*time.Millisecond, "the next tick waits ahead")
	in := waitSchedule(t, back, "out", func(in redeq.ScheduleInfo) bool { return in.Skipped != 0 })
	require.Equal(t, int64(8), in.Skipped, "missed ticks 12:02 to 12:09 are skipped")
	require.True(t, hasTick(t, back, "outs", "out", at(1)), "the tick added before the outage runs")
	require.True(t, hasTick(t, back, "outs", "out", at(10)), "the latest missed tick runs")
	for m := 2; m <= 9; m++ {
		require.False(t, hasTick(t, back, "outs", "out", at(m)), "missed tick 12:%02d", m)
	}
}

// TestPauseCountsNoTickThatRanAsSkipped: a pause that stops a generation
// whose pass added a tick's job, due before the pause, without moving the
// cursor past it: that tick runs, and the resume counts only the ticks
// after it as skipped, also when the pause failed before it stopped the
// ticks and its caller resumes instead of retrying.
func TestPauseCountsNoTickThatRanAsSkipped(t *testing.T) {
	t.Parallel()
	for _, failed := range []bool{false, true} {
		t.Run(map[bool]string{false: "Paused", true: "PauseFailed"}[failed], func(t *testing.T) {
			be := testutil.Backends(t)[0] // the clock moves on miniredis only
			e := setup(t, be, testutil.Config(t))
			ctx := context.Background()
			at := noonAt
			runner := aheadWithCursorBehind(t, e, redeq.Schedule{Name: "pz", Topic: "pzs", Spec: "@every 1m"})

			if failed {
				require.NoError(t, runner.Shutdown(ctx)) // no pass finishes the pause
				drop := newScriptHook(t, "redeq/schedule_drop.lua")
				drop.set(func(context.Context, redis.Cmder, func() error) error { return testutil.ErrUnsent })
				require.Error(t, e.hooked(t, drop).PauseSchedule(ctx, "pz"))
			} else {
				require.NoError(t, e.c.PauseSchedule(ctx, "pz"))
				require.False(t, hasTick(t, e.c, "pzs", "pz", at(2, 0)), "the waiting tick goes")
			}
			require.True(t, hasTick(t, e.c, "pzs", "pz", at(1, 0)), "the tick due before the pause stays")
			frozen(e, at(5, 40))
			require.NoError(t, e.c.ResumeSchedule(ctx, "pz"))
			require.False(t, hasTick(t, e.c, "pzs", "pz", at(2, 0)), "the resume finished the pause's stop")
			in := waitSchedule(t, e.c, "pz", func(redeq.ScheduleInfo) bool { return true })
			require.Equal(t, int64(4), in.Skipped, "ticks 12:02 to 12:05 passed while paused; 12:01 ran")
		})
	}
}

// TestTopicChangeAddsNoTickThatRanAgain: a put that moves a schedule to
// another topic, while a tick due before it had its job added by a pass
// that did not move the cursor past it, does not add that tick again in
// the new topic; the next tick goes to the new topic.
func TestTopicChangeAddsNoTickThatRanAgain(t *testing.T) {
	t.Parallel()
	be := testutil.Backends(t)[0] // the clock moves on miniredis only
	e := setup(t, be, testutil.Config(t))
	ctx := context.Background()
	at := noonAt
	s := redeq.Schedule{Name: "tz", Topic: "tza", Spec: "@every 1m"}
	aheadWithCursorBehind(t, e, s)

	s.Topic = "tzb"
	require.NoError(t, e.c.PutSchedule(ctx, s))
	require.Eventually(t, func() bool { return hasTick(t, e.c, "tzb", "tz", at(2, 0)) }, 5*time.Second, 10*time.Millisecond,
		"the next tick goes to the new topic")
	require.True(t, hasTick(t, e.c, "tza", "tz", at(1, 0)), "the tick due before the change runs in its topic")
	require.False(t, hasTick(t, e.c, "tzb", "tz", at(1, 0)), "and is not added again in the new one")
	require.False(t, hasTick(t, e.c, "tza", "tz", at(2, 0)), "the old topic's waiting tick goes")
}

// TestOutageStaysMissedWhenASecondFollows: the ticks missed in an outage
// of the whole fleet follow the catch-up policy also when a second span
// with no pass follows before any pass handled the schedule (Redis
// unreachable again right after the fleet came back).
func TestOutageStaysMissedWhenASecondFollows(t *testing.T) {
	t.Parallel()
	be := testutil.Backends(t)[0] // the clock moves on miniredis only
	e := setup(t, be, testutil.Config(t))
	ctx := context.Background()
	at := noonAt
	frozen(e, at(0, 10))
	s := redeq.Schedule{Name: "ss", Topic: "sss", Spec: "@every 1m", CatchUp: redeq.CatchUpNone}
	require.NoError(t, e.c.PutSchedule(ctx, s))
	startSched(t, e.c, nil)
	waitTick(t, e.c, "sss", "ss", at(1, 0))
	require.NoError(t, e.c.Shutdown(ctx))

	// The fleet comes back at 12:10:30; its passes record themselves but
	// fail on the schedule, then a second span with no pass follows.
	frozen(e, at(10, 30))
	var failing atomic.Bool
	var tries atomic.Int32
	failing.Store(true)
	intent := newScriptHook(t, "redeq/schedule_intent.lua")
	intent.set(func(ctx context.Context, cmd redis.Cmder, next func() error) error {
		tries.Add(1)
		if failing.Load() {
			return testutil.ErrUnsent
		}
		return next()
	})
	back := e.hooked(t, intent)
	startSched(t, back, nil)
	require.Eventually(t, func() bool { return tries.Load() >= 3 }, 5*time.Second, 10*time.Millisecond)
	frozen(e, at(10, 40))
	time.Sleep(100 * time.Millisecond)
	failing.Store(false)
	waitTick(t, back, "sss", "ss", at(11, 0))
	in := waitSchedule(t, back, "ss", func(in redeq.ScheduleInfo) bool { return in.Skipped != 0 })
	require.Equal(t, int64(9), in.Skipped, "ticks 12:02 to 12:10 were missed")
	for m := 2; m <= 10; m++ {
		require.False(t, hasTick(t, back, "sss", "ss", at(m, 0)), "CatchUpNone: missed tick 12:%02d does not run", m)
	}
}

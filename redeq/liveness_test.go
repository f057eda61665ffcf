package redeq_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// blockingListener runs every job until release is closed (or the client
// shuts down), counting the runs of each id.
func blockingListener(topic string, release chan struct{}) *listener {
	l := newListener(topic, func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		select {
		case <-release:
			ch.Ack()
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	l.workers = 2
	return l
}

// TestForgottenConsumerRejoinsAfterHeartbeatRerun: a reaper forgot a
// consumer (it looked silent), and the consumer's next heartbeat reply is
// lost and go-redis reruns it. The rerun finds the entry the first run
// wrote, so the reply says "was there": the consumer must still join its
// topics again, or a job it fetches afterwards is never recovered when it
// dies.
func TestForgottenConsumerRejoinsAfterHeartbeatRerun(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		hb := newScriptHook(t, "consumer/heartbeat.lua")
		var beats atomic.Int64
		var mode atomic.Int32 // 0 pass, 1 rerun the next one, 2 fail (the consumer is dead)
		var dead atomic.Bool  // its lease renewals fail too
		hb.set(func(ctx context.Context, cmd redis.Cmder, next func() error) error {
			switch mode.Load() {
			case 1:
				mode.Store(0)
				defer beats.Add(1)
				return rerun(ctx, cmd, next)
			case 2:
				cmd.SetErr(errors.New("dead"))
				return cmd.Err()
			}
			beats.Add(1)
			return next()
		})
		rdb := e.be.New(t)
		rdb.AddHook(hb)
		rdb.AddHook(cutLeases(t, &dead))
		a, err := redeq.New(rdb, e.cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
		release := make(chan struct{})
		defer close(release)
		l := blockingListener("t", release)
		startWith(t, a, l)
		require.NoError(t, e.c.Start(ctx)) // moves and reaps
		cid := a.ConsumerID()
		consumers, alive := keys.ForTopic(e.cfg.Prefix, "t").Consumers(), keys.Alive(e.cfg.Prefix)

		// What a reaper does to a consumer it found silent; its next
		// heartbeat is run twice.
		mode.Store(1)
		require.NoError(t, e.rdb.ZRem(ctx, alive, cid).Err())
		require.NoError(t, e.rdb.ZRem(ctx, consumers, cid).Err())
		before := beats.Load()
		testutil.Eventually(t, 5*time.Second, "heartbeats", func() bool { return beats.Load() >= before+3 })

		// It fetches a job, then dies.
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
		testutil.Eventually(t, 5*time.Second, "running", func() bool { return l.count() == 1 })
		dead.Store(true)
		mode.Store(2)
		member := e.rdb.ZScore(ctx, consumers, cid).Err()
		testutil.Eventually(t, 10*e.cfg.ConsumerTimeout+5*time.Second, fmt.Sprintf("recovered (consumer-set lookup: %v)", member), func() bool {
			return state(t, e.c, "t", "j") != redeq.StateInFlight
		})
	})
}

// outage fails every command of the clients that share it, as an
// unreachable server would, until it is lifted. Set liftAfter and the
// first command sent by a reaper's loop after that time (on a client whose
// hook is marked reaper) lifts it for everyone: Redis is back the moment
// that reaper's pass starts, before the consumers' next heartbeats.
type outage struct {
	down      *atomic.Bool
	liftAfter *atomic.Int64 // unix ns; 0: never lifted by a reaper
	lifted    chan struct{}
	reaper    bool
}

func newOutage() *outage {
	return &outage{down: new(atomic.Bool), liftAfter: new(atomic.Int64), lifted: make(chan struct{})}
}

// forReaper returns the same outage, for the reaper's client.
func (o *outage) forReaper() *outage { c := *o; c.reaper = true; return &c }

func (o *outage) check() error {
	if !o.down.Load() {
		return nil
	}
	if at := o.liftAfter.Load(); o.reaper && at != 0 && time.Now().UnixNano() >= at &&
		strings.Contains(string(debug.Stack()), "(*Group).reapLoop") {
		if o.down.CompareAndSwap(true, false) {
			close(o.lifted)
		}
		return nil
	}
	return errors.New("dial tcp: connection refused (simulated outage)")
}

func (o *outage) DialHook(next redis.DialHook) redis.DialHook { return next }

func (o *outage) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := o.check(); err != nil {
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

func (o *outage) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := o.check(); err != nil {
			for _, cmd := range cmds {
				cmd.SetErr(err)
			}
			return err
		}
		return next(ctx, cmds)
	}
}

// TestReaperWaitsAfterOutageEnds: Redis is unreachable for several
// ConsumerTimeouts while a consumer runs a long job. The reaper's retries
// back off to a ConsumerTimeout apart; when Redis answers again its very
// next pass must not reap: the live consumer has not had the chance to
// heartbeat since the outage ended. The job is never recovered: the
// handler, which honours its ctx, is canceled once its lease may have
// lapsed, and its job given back unspent runs again once Redis answers
// (Attempt 0, Recoveries 0), after the first run ended.
func TestReaperWaitsAfterOutageEnds(t *testing.T) {
	testutil.FaultTier(t) // an outage of several ConsumerTimeouts
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		out := newOutage()
		a := e.hooked(t, out)
		release := make(chan struct{})
		l := blockingListener("t", release)
		startWith(t, a, l)

		looks := newScriptHook(t, "consumer/silent.lua")
		var passes atomic.Int64
		looks.set(func(ctx context.Context, cmd redis.Cmder, next func() error) error {
			passes.Add(1)
			return next()
		})
		rrdb := e.be.New(t)
		rrdb.AddHook(out.forReaper())
		rrdb.AddHook(looks)
		r, err := redeq.New(rrdb, e.cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = r.Shutdown(context.Background()) })
		require.NoError(t, r.Start(ctx)) // moves and reaps, consumes nothing

		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
		testutil.Eventually(t, 5*time.Second, "running", func() bool { return l.count() == 1 })

		out.down.Store(true)
		out.liftAfter.Store(time.Now().Add(4 * e.cfg.ConsumerTimeout).UnixNano())
		select {
		case <-out.lifted:
		case <-time.After(10*e.cfg.ConsumerTimeout + 5*time.Second):
			t.Fatal("the reaper never came back")
		}
		// Give the reaper ample passes after the outage: two ConsumerTimeouts.
		after := passes.Load()
		testutil.Eventually(t, 20*e.cfg.ConsumerTimeout+5*time.Second, "reaper passes", func() bool { return passes.Load() >= after+10 })
		close(release)
		testutil.Eventually(t, 5*time.Second, "acked", func() bool { return state(t, e.c, "t", "j") == "" })
		settle(t, e, "t")
		ds := l.deliveries()
		require.LessOrEqual(t, len(ds), 2, "more runs than the one canceled for its lease and its give-back")
		for _, d := range ds {
			require.Zero(t, d.job.Recoveries, "the reaper took a live consumer's job as soon as Redis came back")
			require.Zero(t, d.job.Attempt, "the canceled run spent an attempt")
		}
	})
}

// TestReaperPausedBeforeRecoverSparesConsumerThatCameBack: a reaper finds
// a consumer silent and takes it out of the alive set, then stalls (its
// process paused, its call delayed) before it recovers the consumer's
// in-flight set. The consumer comes back, joins its topics again, fetches
// a job and runs it, heartbeating, for longer than ConsumerTimeout. When
// the reaper resumes it must not take that job: it was fetched by a live
// consumer after the reaper's look.
func TestReaperPausedBeforeRecoverSparesConsumerThatCameBack(t *testing.T) {
	testutil.FaultTier(t) // a reaper paused for several ConsumerTimeouts
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		hb := newScriptHook(t, "consumer/heartbeat.lua")
		a := e.hooked(t, hb)
		release := make(chan struct{})
		l := blockingListener("t", release)
		startWith(t, a, l)

		rec := newScriptHook(t, "consumer/recover.lua")
		paused, resume := make(chan struct{}), make(chan struct{})
		var once atomic.Bool
		r := e.hooked(t, rec)

		// The consumer falls silent; the reaper stalls at its first recover.
		hb.set(func(context.Context, redis.Cmder, func() error) error { return errors.New("cut off") })
		rec.set(func(ctx context.Context, cmd redis.Cmder, next func() error) error {
			if once.CompareAndSwap(false, true) {
				close(paused)
				<-resume
			}
			return next()
		})
		require.NoError(t, r.Start(ctx)) // moves and reaps, consumes nothing
		select {
		case <-paused:
		case <-time.After(10*e.cfg.ConsumerTimeout + 5*time.Second):
			t.Fatal("the consumer was never reaped")
		}
		alive := keys.Alive(e.cfg.Prefix)

		// The consumer comes back, fetches a job and holds it, alive.
		hb.set(nil)
		testutil.Eventually(t, 5*time.Second, "heartbeat", func() bool {
			s, err := e.rdb.ZScore(ctx, alive, a.ConsumerID()).Result()
			return err == nil && s > float64(time.Now().Add(-e.cfg.ConsumerTimeout/2).UnixMilli())
		})
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
		testutil.Eventually(t, 5*time.Second, "running", func() bool { return l.count() == 1 })
		time.Sleep(2 * e.cfg.ConsumerTimeout) // a long handler, heartbeating all along
		close(resume)
		time.Sleep(2 * e.cfg.ConsumerTimeout) // the window in which a wrong recovery would strike
		close(release)
		testutil.Eventually(t, 5*time.Second, "acked", func() bool { return state(t, e.c, "t", "j") == "" })
		settle(t, e, "t")
		require.Equal(t, 1, l.count(), "a reaper that resumed took the job of a consumer that came back")
	})
}

// TestLostAliveEntrySparesLiveConsumer: a failover (or a restart without
// persistence) of the alive set's node loses the heartbeats while the
// consumer sets, on other slots, survive. A live consumer running a long
// job must keep it: a reaper that looks before the consumer's next
// heartbeat must not take a missing entry for a consumer silent for
// longer than ConsumerTimeout.
func TestLostAliveEntrySparesLiveConsumer(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		hb := newScriptHook(t, "consumer/heartbeat.lua")
		a := e.hooked(t, hb)
		release := make(chan struct{})
		l := blockingListener("t", release)
		startWith(t, a, l)

		passes := &reaperPasses{sha: scriptSHA(t, "consumer/silent.lua")}
		r := e.hooked(t, passes)
		require.NoError(t, r.Start(ctx)) // moves and reaps, consumes nothing

		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
		testutil.Eventually(t, 5*time.Second, "running", func() bool { return l.count() == 1 })
		time.Sleep(e.cfg.ConsumerTimeout) // a long handler

		// The alive set is lost; the consumer's next heartbeat reaches the
		// server after the reaper's next look.
		held := make(chan struct{})
		hb.set(func(ctx context.Context, cmd redis.Cmder, next func() error) error {
			<-held
			return next()
		})
		require.NoError(t, e.rdb.Del(ctx, keys.Alive(e.cfg.Prefix)).Err())
		before := passes.n.Load()
		// Two passes started: the first one after the loss is complete.
		testutil.Eventually(t, 10*e.cfg.ConsumerTimeout, "reaper looked", func() bool { return passes.n.Load() >= before+2 })
		close(held)
		hb.set(nil)
		time.Sleep(2 * e.cfg.ConsumerTimeout) // the window in which a wrong recovery would strike
		close(release)
		testutil.Eventually(t, 5*time.Second, "acked", func() bool { return state(t, e.c, "t", "j") == "" })
		settle(t, e, "t")
		require.Equal(t, 1, l.count(), "a live consumer's job was taken after its heartbeat entry was lost")
	})
}

// reaperPasses counts the passes of a client's reaper: each starts with
// one read of the heartbeats (silent.lua).
type reaperPasses struct {
	n   atomic.Int64
	sha string
}

func (h *reaperPasses) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *reaperPasses) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) > 1 && strings.EqualFold(fmt.Sprint(args[0]), "evalsha") && fmt.Sprint(args[1]) == h.sha {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *reaperPasses) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestDeadConsumerRecoveredAmongManyLive: a topic with more than a
// thousand live consumers (a large fleet on one topic). The one that
// joined last dies holding a job: the job must run again.
func TestDeadConsumerRecoveredAmongManyLive(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
		require.NoError(t, e.c.Start(ctx)) // moves and reaps
		testutil.Eventually(t, 5*time.Second, "due", func() bool { return state(t, e.c, "t", "j") == redeq.StateReady })

		consumers, alive := keys.ForTopic(e.cfg.Prefix, "t").Consumers(), keys.Alive(e.cfg.Prefix)
		const live = 1000
		ids := make([]string, live)
		joined := make([]redis.Z, live)
		for i := range ids {
			ids[i] = fmt.Sprintf("live-%d", i)
			joined[i] = redis.Z{Score: float64(i + 1), Member: ids[i]}
		}
		beat := func() error {
			now := float64(time.Now().UnixMilli())
			zs := make([]redis.Z, live)
			for i, id := range ids {
				zs[i] = redis.Z{Score: now, Member: id}
			}
			return e.rdb.ZAdd(ctx, alive, zs...).Err()
		}
		require.NoError(t, beat())
		require.NoError(t, e.rdb.ZAdd(ctx, consumers, joined...).Err())
		stop, done := make(chan struct{}), make(chan struct{})
		go func() { // the live consumers heartbeat
			defer close(done)
			for {
				select {
				case <-stop:
					return
				case <-time.After(e.cfg.HeartbeatInterval):
					_ = beat()
				}
			}
		}()
		defer func() { close(stop); <-done }()

		// The last to join takes the job and dies.
		require.NoError(t, e.rdb.ZAdd(ctx, consumers, redis.Z{Score: float64(time.Now().UnixMilli()), Member: "late"}).Err())
		crash(t, e, "t", "late", 1)
		testutil.Eventually(t, 10*e.cfg.ConsumerTimeout+5*time.Second, "recovered", func() bool { return state(t, e.c, "t", "j") == redeq.StateReady })
	})
}

// TestReaperScriptsSurviveRerun: go-redis reruns a script whose reply was
// lost. Every script of the reaper run twice still recovers a dead
// consumer's job once (one recovery counted, one run) and forgets it, and
// spares a live consumer holding a job for longer than ConsumerTimeout.
func TestReaperScriptsSurviveRerun(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		for _, id := range []string{"dead", "long"} {
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: id}))
		}
		rrdb := e.be.New(t)
		for _, path := range []string{"consumer/silent.lua", "consumer/gone.lua", "consumer/recover.lua", "consumer/heartbeat.lua"} {
			h := newScriptHook(t, path)
			h.set(rerun)
			rrdb.AddHook(h)
		}
		r, err := redeq.New(rrdb, e.cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = r.Shutdown(context.Background()) })
		require.NoError(t, r.Start(ctx)) // moves and reaps
		testutil.Eventually(t, 5*time.Second, "due", func() bool { return stats(t, e.c, "t").Ready == 2 })
		items := crash(t, e, "t", "crashed", 1)
		dead := items[0].ID

		// A live consumer, its heartbeats rerun too, takes the other job
		// and holds it for several ConsumerTimeouts.
		ardb := e.be.New(t)
		hb := newScriptHook(t, "consumer/heartbeat.lua")
		hb.set(rerun)
		ardb.AddHook(hb)
		a, err := redeq.New(ardb, e.cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
		release := make(chan struct{})
		l := blockingListener("t", release)
		startWith(t, a, l)
		testutil.Eventually(t, 5*time.Second, "running", func() bool { return l.count() >= 1 })
		testutil.Eventually(t, 10*e.cfg.ConsumerTimeout, "dead consumer's job recovered and run", func() bool {
			return l.byID()[dead] == 1
		})
		time.Sleep(3 * e.cfg.ConsumerTimeout)
		close(release)
		settle(t, e, "t")
		require.Equal(t, map[string]int{"dead": 1, "long": 1}, l.byID())
		for _, d := range l.deliveries() {
			if d.job.ID == dead {
				require.Equal(t, 1, d.job.Recoveries)
			}
		}
		require.ErrorIs(t, e.rdb.ZScore(ctx, keys.ForTopic(e.cfg.Prefix, "t").Consumers(), "crashed").Err(), redis.Nil, "dead consumer not forgotten")
	})
}

// livenessReads counts what a client's reaper reads to find silent
// consumers: passes (reads of the heartbeats) and the entries they return.
type livenessReads struct {
	passes, members, looks atomic.Int64
	silentSHA              string
}

func (h *livenessReads) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *livenessReads) count(cmd redis.Cmder) {
	args := cmd.Args()
	switch strings.ToLower(fmt.Sprint(args[0])) {
	case "zrange":
		if k, _ := args[1].(string); strings.HasSuffix(k, "}:consumers") {
			if z, ok := cmd.(*redis.ZSliceCmd); ok {
				h.members.Add(int64(len(z.Val())))
			}
		}
	case "evalsha":
		if fmt.Sprint(args[1]) == h.silentSHA {
			h.passes.Add(1)
			if v, err := cmd.(*redis.Cmd).StringSlice(); err == nil {
				h.looks.Add(int64(len(v)))
			}
		}
	}
}

func (h *livenessReads) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.count(cmd)
		return err
	}
}

func (h *livenessReads) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.count(cmd)
		}
		return err
	}
}

// TestIdleLivenessCostLinearInClients: an idle fleet of clients, each
// listening to every topic. Two of them look for silent consumers, and
// what the fleet reads each ReapInterval to tell live consumers from
// silent ones (consumer-set entries and heartbeats looked up, summed over
// the clients' reaper passes) must not grow with clients x topics: four
// times the topics may not cost four times as much.
func TestIdleLivenessCostLinearInClients(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		measure := func(clients, topics int) float64 {
			prefix := fmt.Sprintf("%s-%dx%d", e.cfg.Prefix, clients, topics)
			cfg := e.cfg
			cfg.Prefix = prefix
			var hooks []*livenessReads
			var cs []*redeq.Client
			for range clients {
				h := &livenessReads{silentSHA: scriptSHA(t, "consumer/silent.lua")}
				rdb := e.be.New(t)
				rdb.AddHook(h)
				c, err := redeq.New(rdb, cfg)
				require.NoError(t, err)
				for i := range topics {
					require.NoError(t, c.Register(redeq.ListenerFunc(fmt.Sprintf("t%d", i), func(context.Context, *redeq.Job, *redeq.Channel) error { return nil })))
				}
				require.NoError(t, c.Start(ctx))
				hooks, cs = append(hooks, h), append(cs, c)
			}
			// Every client has seen the whole fleet and joined every topic.
			testutil.Eventually(t, 10*time.Second, "fleet", func() bool {
				for i := range topics {
					if stats(t, cs[0], fmt.Sprintf("t%d", i)).Consumers != int64(clients) {
						return false
					}
				}
				return true
			})
			time.Sleep(3 * cfg.ScanInterval)
			var p0, r0 []int64
			for _, h := range hooks {
				p0, r0 = append(p0, h.passes.Load()), append(r0, h.members.Load()+h.looks.Load())
			}
			// Two clients of the fleet look for silent consumers.
			testutil.Eventually(t, 20*time.Second, "passes", func() bool {
				n := 0
				for i, h := range hooks {
					if h.passes.Load() >= p0[i]+10 {
						n++
					}
				}
				return n >= 2
			})
			fleet, looking := 0.0, 0 // per ReapInterval: the sum of each client's reads per pass
			for i, h := range hooks {
				if passes := h.passes.Load() - p0[i]; passes > 0 {
					looking++
					fleet += float64(h.members.Load()+h.looks.Load()-r0[i]) / float64(passes)
				}
			}
			require.Equal(t, 2, looking, "clients that looked for silent consumers, of %d", clients)
			for _, c := range cs {
				require.NoError(t, c.Shutdown(ctx))
			}
			t.Logf("%d clients x %d topics: %.1f entries read per ReapInterval", clients, topics, fleet)
			return fleet
		}
		small := measure(4, 2)
		large := measure(4, 8)
		require.LessOrEqual(t, large, 2*small, "the fleet's liveness reads grow with clients x topics")
	})
}

// TestDeadReaperLockDoesNotDelayRecovery: a reaper is killed in the middle
// of a pass, holding its topic's reaper lock, which lives on for
// LockExpiry. A consumer of the topic dies: its job must run again within
// about 1.2 x ConsumerTimeout, not wait for the dead reaper's lock (here
// LockExpiry is 20 ConsumerTimeouts; by default it is 20s against a 15s
// ConsumerTimeout).
func TestDeadReaperLockDoesNotDelayRecovery(t *testing.T) {
	// miniredis expires keys only when told to: real servers only.
	eachReal(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		cfg := e.cfg
		cfg.LockExpiry = 20 * cfg.ConsumerTimeout
		c := e.another(t, func(c *config.Config) { *c = cfg })
		require.NoError(t, c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
		require.NoError(t, c.Start(ctx)) // moves and reaps
		testutil.Eventually(t, 5*time.Second, "due", func() bool { return state(t, c, "t", "j") == redeq.StateReady })
		// The lock a reaper killed while it reaped this consumer left
		// behind: it lives a third of ConsumerTimeout, whatever LockExpiry.
		lock := keys.ReapLock(cfg.Prefix, "crashed")
		require.NoError(t, e.rdb.Set(ctx, lock, "killed-reaper", cfg.ConsumerTimeout/3).Err())
		crash(t, e, "t", "crashed", 1)
		testutil.Eventually(t, 10*cfg.ConsumerTimeout, "recovered", func() bool { return state(t, c, "t", "j") == redeq.StateReady })
	})
}

// TestStoppedConsumerKeepsJobsFetchedAfterContinue: a consumer process
// stopped with SIGSTOP for several ConsumerTimeouts loses the job it held
// to the reaper. Continued, it joins its topics again before it fetches:
// the jobs it takes then are recovered when it is killed afterwards.
func TestStoppedConsumerKeepsJobsFetchedAfterContinue(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		require.NoError(t, e.c.Start(ctx)) // moves and reaps, consumes nothing
		ch := startChild(t, e.be, e.cfg.Prefix, "t")
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "a"}))
		next := func() string {
			select {
			case id := <-ch.held:
				return id
			case <-time.After(10 * time.Second):
				t.Fatal("the child took no job")
				return ""
			}
		}
		require.Equal(t, "a", next())
		require.NoError(t, ch.cmd.Process.Signal(syscall.SIGSTOP))
		testutil.Eventually(t, 10*e.cfg.ConsumerTimeout+5*time.Second, "recovered while stopped", func() bool { return state(t, e.c, "t", "a") == redeq.StateReady })
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "b"}))
		require.NoError(t, ch.cmd.Process.Signal(syscall.SIGCONT))
		got := map[string]bool{next(): true, next(): true}
		require.Equal(t, map[string]bool{"a": true, "b": true}, got)
		ch.kill()
		testutil.Eventually(t, 10*e.cfg.ConsumerTimeout+5*time.Second, "recovered after the kill", func() bool {
			return state(t, e.c, "t", "a") == redeq.StateReady && state(t, e.c, "t", "b") == redeq.StateReady
		})
	})
}

// TestLostConsumerEntryStillRecovered: a failover of a topic's node loses
// the consumer's entry in the topic's consumer set (its join was the last
// write before the failover, not yet on the replica), while its heartbeats,
// on another slot, go on. When that consumer dies later holding a job of
// the topic, the job must run again.
func TestLostConsumerEntryStillRecovered(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		hb := newScriptHook(t, "consumer/heartbeat.lua")
		var beats atomic.Int64
		var dead atomic.Bool
		hb.set(func(ctx context.Context, cmd redis.Cmder, next func() error) error {
			if dead.Load() {
				cmd.SetErr(errors.New("dead"))
				return cmd.Err()
			}
			beats.Add(1)
			return next()
		})
		rdb := e.be.New(t)
		rdb.AddHook(hb)
		rdb.AddHook(cutLeases(t, &dead))
		a, err := redeq.New(rdb, e.cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
		release := make(chan struct{})
		defer close(release)
		l := blockingListener("t", release)
		startWith(t, a, l)
		require.NoError(t, e.c.Start(ctx)) // moves and reaps

		require.NoError(t, e.rdb.ZRem(ctx, keys.ForTopic(e.cfg.Prefix, "t").Consumers(), a.ConsumerID()).Err())
		before := beats.Load()
		testutil.Eventually(t, 5*time.Second, "heartbeats", func() bool { return beats.Load() >= before+3 })
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
		testutil.Eventually(t, 5*time.Second, "running", func() bool { return l.count() == 1 })
		dead.Store(true)
		testutil.Eventually(t, 10*e.cfg.ConsumerTimeout+5*time.Second, "recovered", func() bool {
			return state(t, e.c, "t", "j") != redeq.StateInFlight
		})
	})
}

// TestStallWithinToleranceKeepsJob: a live consumer stalled (a SIGSTOP
// standing for a GC pause, swap, a VM migration) for less than
// ConsumerTimeout - HeartbeatInterval keeps its job, even when the stall
// begins just before its next heartbeat. Silence is counted from the last
// heartbeat, as docs/operations.md says: a stall of ConsumerTimeout itself
// can outlast it by up to HeartbeatInterval, and is not covered.
func TestStallWithinToleranceKeepsJob(t *testing.T) {
	t.Parallel() // its own Redis and processes: it runs beside the other fault tests
	_, be := privateServer(t)
	ctx := context.Background()
	cfg := testutil.Config(t)
	cfg.ConsumerTimeout = 1500 * time.Millisecond
	cfg.HeartbeatInterval = 500 * time.Millisecond // the most allowed: ConsumerTimeout/3
	e := setup(t, be, cfg)
	require.NoError(t, e.c.Start(ctx)) // moves and reaps, consumes nothing

	ch := startFaultChild(t, "slow", be, cfg.Prefix, "t",
		childConsumerTimeoutEnv+"=1500", childHeartbeatEnv+"=500", childHoldEnv+"=12000")
	cid := strings.TrimSpace(ch.expect(t, "id ", 15*time.Second))
	require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
	require.Equal(t, "j", ch.expect(t, "start ", 10*time.Second))

	// A second live consumer that would get the job if it were recovered.
	l := newListener("t", nil)
	startWith(t, e.another(t, nil), l)
	time.Sleep(2 * cfg.ConsumerTimeout) // every reaper has looked for a full ConsumerTimeout

	// Stop the child just before its next heartbeat.
	alive := keys.Alive(cfg.Prefix)
	last := e.rdb.ZScore(ctx, alive, cid).Val()
	require.NotZero(t, last, "child heartbeats")
	testutil.Eventually(t, 3*time.Second, "a fresh heartbeat", func() bool { return e.rdb.ZScore(ctx, alive, cid).Val() != last })
	time.Sleep(cfg.HeartbeatInterval - 50*time.Millisecond)
	stall := (cfg.ConsumerTimeout - cfg.HeartbeatInterval) * 95 / 100
	require.NoError(t, ch.cmd.Process.Signal(syscall.SIGSTOP))
	stopped := time.Now()
	time.Sleep(stall)
	require.NoError(t, ch.cmd.Process.Signal(syscall.SIGCONT))
	t.Logf("child stalled %v (ConsumerTimeout %v, HeartbeatInterval %v)", time.Since(stopped), cfg.ConsumerTimeout, cfg.HeartbeatInterval)

	// The child is alive again and finishes the job.
	require.Equal(t, "j", ch.expect(t, "done ", 15*time.Second))
	time.Sleep(500 * time.Millisecond)
	job, err := e.c.Get(ctx, "t", "j")
	if err == nil {
		t.Logf("job after the stall: state %s recoveries %d", job.State, job.Recoveries)
	}
	require.Zerof(t, l.count(), "a consumer stalled %v < ConsumerTimeout %v - HeartbeatInterval %v had its job handed to another live consumer (%d deliveries there, recoveries %v) while it still ran it",
		stall, cfg.ConsumerTimeout, cfg.HeartbeatInterval, l.count(), recoveriesOf(l))
	_ = redis.Nil
}

// TestLeaseKeepsJobOfConsumerCutOffFromAliveSet: a consumer whose
// heartbeats fail (cut off from the alive set's node) while it reaches
// its job's node keeps the job it runs: a reaper finds it silent, but its
// lease on the job's bucket lives (renewed, expiring within
// ConsumerTimeout), so the job is not recovered, runs once, and its ack
// applies. Once the consumer holds nothing there, the lease expires by
// itself and the reaper forgets the consumer.
func TestLeaseKeepsJobOfConsumerCutOffFromAliveSet(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		hb := newScriptHook(t, "consumer/heartbeat.lua")
		var cut atomic.Bool
		hb.set(func(ctx context.Context, cmd redis.Cmder, next func() error) error {
			if cut.Load() {
				cmd.SetErr(errors.New("cut off from the alive set"))
				return cmd.Err()
			}
			return next()
		})
		a := e.hooked(t, hb)
		release := make(chan struct{})
		l := blockingListener("t", release)
		startWith(t, a, l)
		require.NoError(t, e.c.Start(ctx)) // moves and reaps
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
		testutil.Eventually(t, 5*time.Second, "running", func() bool { return l.count() == 1 })
		cid := a.ConsumerID()
		lease := keys.ForBucket(e.cfg.Prefix, "t", 0).Lease(cid)
		testutil.Eventually(t, 5*time.Second, "leased", func() bool {
			ttl, err := e.rdb.PTTL(ctx, lease).Result()
			require.NoError(t, err)
			require.LessOrEqual(t, ttl, e.cfg.ConsumerTimeout, "a lease longer than ConsumerTimeout")
			return ttl > 0
		})

		cut.Store(true)
		alive := keys.Alive(e.cfg.Prefix)
		beat, err := e.rdb.ZScore(ctx, alive, cid).Result()
		require.NoError(t, err)
		// Silent for the reaper from a ConsumerTimeout on; it would have
		// recovered the job by 2 of them, had the lease not held it.
		time.Sleep(4 * e.cfg.ConsumerTimeout)
		job, err := e.c.Get(ctx, "t", "j")
		require.NoError(t, err)
		require.Equal(t, redeq.StateInFlight, job.State)
		require.Zero(t, job.Recoveries)
		require.Equal(t, beat, e.rdb.ZScore(ctx, alive, cid).Val(), "no heartbeat got through")
		close(release)
		testutil.Eventually(t, 5*time.Second, "acked", func() bool { return state(t, e.c, "t", "j") == "" })
		require.Equal(t, 1, l.count())
		testutil.Eventually(t, 20*e.cfg.ConsumerTimeout, "the lease expired and the consumer is forgotten", func() bool {
			if e.be.Mini != nil {
				e.be.Mini.FastForward(e.cfg.ConsumerTimeout / 4) // its keys expire only so
			}
			return e.rdb.Exists(ctx, lease).Val() == 0 && e.rdb.ZScore(ctx, alive, cid).Err() == redis.Nil
		})
	})
}

// hungEverywhere returns a client of be whose connections to every node
// pass through a fault proxy; hang holds every reply and leaves every new
// connection unanswered (the requests still reach the servers), unhang
// lets them through again.
func hungEverywhere(t *testing.T, be testutil.Backend) (rdb redis.UniversalClient, hang, unhang func()) {
	t.Helper()
	proxies := map[string]*testutil.Proxy{}
	for _, addr := range be.Addrs {
		proxies[addr] = testutil.StartProxy(t, addr)
	}
	rdb = throughProxies(be, proxies)
	set := func(on bool) {
		for _, p := range proxies {
			p.HoldNew.Store(on)
			p.Stall.Store(on)
		}
	}
	t.Cleanup(func() {
		set(false)
		for _, p := range proxies {
			p.Cut()
		}
		rdb.Close()
	})
	return rdb, func() { set(true) }, func() { set(false) }
}

// TestHungConsumerStopsHandlerBeforeOthersRunItsJob: a consumer (A)
// runs a long handler when its connections to every Redis node hang
// (replies held, new connections unanswered) while consumer B reaches
// them. Once A's lease on the job's bucket may have lapsed, A cancels the
// handler's ctx; the handler returns before B recovers the job and runs
// it: a job runs in one handler at a time. A's late outcome does not land
// over B's: the job runs to its ack in B, once more.
func TestHungConsumerStopsHandlerBeforeOthersRunItsJob(t *testing.T) {
	testutil.FaultTier(t) // private proxies, runs for seconds
	eachRealBeside(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var rec testutil.Recorder
		rdbA, hang, unhang := hungEverywhere(t, e.be)
		a, err := redeq.New(rdbA, e.cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
		la := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			end := rec.Begin(testutil.Run{ID: job.ID, Attempt: job.Attempt, Recoveries: job.Recoveries})
			defer end()
			<-ctx.Done() // a long job that stops when told
			return ctx.Err()
		})
		startWith(t, a, la)
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
		testutil.Eventually(t, 5*time.Second, "A runs the job", func() bool { return rec.Running() == 1 })

		hang()
		defer unhang() // before the cleanups: A's Shutdown reaches Redis
		hungAt := time.Now()
		lb := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			end := rec.Begin(testutil.Run{ID: job.ID, Attempt: job.Attempt, Recoveries: job.Recoveries})
			defer end()
			ch.Ack()
			return nil
		})
		startWith(t, e.c, lb)
		testutil.Eventually(t, 20*e.cfg.ConsumerTimeout+5*time.Second, "B runs the job", func() bool { return rec.Count("j") == 2 })
		runs := rec.Of("j")
		require.Empty(t, rec.AtOnce(), "two handlers ran the job at once")
		require.False(t, runs[0].End.IsZero(), "A's handler still runs while B runs the job")
		require.True(t, runs[0].End.Before(runs[1].At), "A's handler ended %v after B's began", runs[0].End.Sub(runs[1].At))
		require.Equal(t, 1, runs[1].Recoveries, "B runs the job recovered")
		t.Logf("A's handler stopped %v after the hang, B began %v after it", runs[0].End.Sub(hungAt), runs[1].At.Sub(hungAt))
		testutil.Eventually(t, 5*time.Second, "acked", func() bool { return state(t, e.c, "t", "j") == "" })
		unhang()
		time.Sleep(2 * e.cfg.ConsumerTimeout) // A's outcome, fenced, lands or not: nothing changes
		require.Equal(t, redeq.State(""), state(t, e.c, "t", "j"))
		require.Equal(t, 2, rec.Count("j"))
	})
}

// TestHandlerCtxEndsWhenItsLeaseMayLapse: a handler's ctx lives while the
// lease renewals of its job's bucket get through, however long it runs;
// once they fail, it ends (context.Cause ErrLeaseLapsed) before the lease
// may lapse, and not before ConsumerTimeout less a renewal period and the
// margin has passed. The error the handler returns then spends no
// attempt: the job runs again, Attempt 0, not recovered.
func TestHandlerCtxEndsWhenItsLeaseMayLapse(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var cut atomic.Bool
		a := e.hooked(t, cutLeases(t, &cut))
		type run struct {
			attempt, recoveries int
			cause               error
			ended               time.Time
		}
		runs := make(chan run, 2)
		var started atomic.Int64
		l := newListener("t", func(hctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			if started.Add(1) > 1 {
				runs <- run{attempt: job.Attempt, recoveries: job.Recoveries}
				ch.Ack()
				return nil
			}
			<-hctx.Done()
			runs <- run{cause: context.Cause(hctx), ended: time.Now()}
			return hctx.Err()
		})
		startWith(t, a, l)
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
		testutil.Eventually(t, 5*time.Second, "running", func() bool { return l.count() == 1 })
		time.Sleep(2 * e.cfg.ConsumerTimeout) // renewed all along
		require.Empty(t, runs, "a handler's ctx ended while its lease was renewed")

		cut.Store(true)
		cutAt := time.Now()
		var first run
		select {
		case first = <-runs:
		case <-time.After(e.cfg.ConsumerTimeout + 5*time.Second):
			t.Fatal("the handler's ctx did not end once its lease could not be renewed")
		}
		cut.Store(false)
		require.ErrorIs(t, first.cause, redeq.ErrLeaseLapsed)
		earliest := e.cfg.ConsumerTimeout - e.cfg.ConsumerTimeout/10 - e.cfg.HeartbeatInterval
		require.GreaterOrEqual(t, first.ended.Sub(cutAt), earliest-50*time.Millisecond, "canceled while the lease surely lasted")
		t.Logf("the handler's ctx ended %v after the renewals stopped getting through", first.ended.Sub(cutAt))
		var again run
		select {
		case again = <-runs:
		case <-time.After(10 * time.Second):
			t.Fatal("the job did not run again")
		}
		require.Zero(t, again.attempt, "the canceled run spent an attempt")
		require.Zero(t, again.recoveries, "the job was recovered rather than given back")
		testutil.Eventually(t, 5*time.Second, "acked", func() bool { return state(t, e.c, "t", "j") == "" })
	})
}

// hungOnFetch returns a client of be whose connections to every node pass
// through a fault proxy; once armed, the first fetch it sends hangs every
// connection (replies held, new connections unanswered; the fetch itself
// still reaches the server and runs). hungAt is when that fetch was sent
// (zero before), unhang lets everything through again.
func hungOnFetch(t *testing.T, be testutil.Backend) (rdb redis.UniversalClient, arm func(), hungAt func() time.Time, unhang func()) {
	t.Helper()
	fetch := testutil.LoadScript(t, "../ready/fetch.lua")
	proxies := map[string]*testutil.Proxy{}
	for _, addr := range be.Addrs {
		proxies[addr] = testutil.StartProxy(t, addr)
	}
	set := func(on bool) {
		for _, p := range proxies {
			p.HoldNew.Store(on)
			p.Stall.Store(on)
		}
	}
	var armed atomic.Bool
	var at atomic.Pointer[time.Time]
	for _, p := range proxies {
		p.Match(func(b []byte) bool {
			if bytes.Contains(b, []byte(fetch.SHA)) && armed.CompareAndSwap(true, false) {
				now := time.Now()
				at.Store(&now)
				set(true) // before the fetch reaches the server: its reply is held
			}
			return false
		})
	}
	rdb = throughProxies(be, proxies)
	t.Cleanup(func() {
		set(false)
		for _, p := range proxies {
			p.Cut()
		}
		rdb.Close()
	})
	hungAt = func() time.Time {
		if p := at.Load(); p != nil {
			return *p
		}
		return time.Time{}
	}
	return rdb, func() { armed.Store(true) }, hungAt, func() { set(false) }
}

// TestLateFetchReplyRunsNoHandlerBesideTheRecoveredJob: consumer A's
// connections to every node hang just as it sends the fetch that takes a
// job (the script runs; its reply is held for 2 s, under go-redis's read
// timeout). A looks silent, so consumer B recovers the job and runs it.
// When A's reply finally arrives, the delivery's lease may have lapsed
// long ago: A calls no handler for it, since another consumer may be
// running the job. A job runs in one handler at a time.
func TestLateFetchReplyRunsNoHandlerBesideTheRecoveredJob(t *testing.T) {
	testutil.FaultTier(t) // private proxies, runs for seconds
	eachReal(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		var rec testutil.Recorder
		rdbA, arm, hungAt, unhang := hungOnFetch(t, e.be)
		a, err := redeq.New(rdbA, e.cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = a.Shutdown(context.Background()) })
		// A's handler honours its ctx: it returns as soon as it ends.
		la := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			end := rec.BeginWith(testutil.Run{ID: job.ID, Recoveries: job.Recoveries, Bound: "A"})
			select {
			case <-ctx.Done():
				end("canceled")
				return ctx.Err()
			case <-time.After(5 * time.Second):
			}
			end("ack")
			ch.Ack()
			return nil
		})
		startWith(t, a, la)
		time.Sleep(3 * e.cfg.HeartbeatInterval) // A heartbeats: its fetches are let through
		arm()
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
		testutil.Eventually(t, 5*time.Second, "A sends its fetch", func() bool { return !hungAt().IsZero() })
		defer unhang() // before the cleanups: A's Shutdown reaches Redis
		lb := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			end := rec.BeginWith(testutil.Run{ID: job.ID, Recoveries: job.Recoveries, Bound: "B"})
			time.Sleep(3 * time.Second)
			end("ack")
			ch.Ack()
			return nil
		})
		startWith(t, e.another(t, nil), lb)
		testutil.Eventually(t, 10*time.Second, "B runs the recovered job", func() bool { return rec.Count("j") >= 1 })
		// A's fetch reply comes through, late, while B runs the job.
		time.Sleep(time.Until(hungAt().Add(2 * time.Second)))
		unhang()
		testutil.Eventually(t, 10*time.Second, "acked", func() bool { return state(t, e.c, "t", "j") == "" })
		time.Sleep(time.Second)
		for _, r := range rec.Of("j") {
			t.Logf("run by %s from +%v to +%v after the hang, recoveries %d, %s", r.Bound,
				r.At.Sub(hungAt()).Round(time.Millisecond), r.End.Sub(hungAt()).Round(time.Millisecond), r.Recoveries, r.Result)
		}
		require.Empty(t, rec.AtOnce(), "two handlers ran the job at once")
	})
}

// throughProxies is a client of be whose connections to each node pass
// through that node's proxy.
func throughProxies(be testutil.Backend, proxies map[string]*testutil.Proxy) redis.UniversalClient {
	if be.Name != "cluster" {
		return redis.NewClient(&redis.Options{Addr: proxies[be.Addrs[0]].Addr()})
	}
	var d net.Dialer
	return redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: be.Addrs,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			p, ok := proxies[addr]
			if !ok {
				return nil, fmt.Errorf("no proxy in front of %s", addr)
			}
			return d.DialContext(ctx, network, p.Addr())
		},
	})
}

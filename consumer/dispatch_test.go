package consumer

import (
	"context"
	"log/slog"
	"slices"
	"sync/atomic"
	"testing"
	"time"
)

// TestDispatch proves what the dispatcher promises: a bucket whose fetch
// hangs holds up no other bucket's, a late answer starts no more jobs
// than there are free workers, a lost reply is reconciled before the
// bucket is fetched from again, a quarantined job runs alone, and a
// runner under a backlog fetches for every worker at once while one
// without fetches as soon as half its workers are free.
func TestDispatch(t *testing.T) {
	// fetchesOf lists the wants of the fetches that took jobs.
	fetchesOf := func(log *journal) []int {
		var wants []int
		for _, e := range log.all() {
			if e.kind == "fetch" && e.err == nil && len(e.ids) > 0 {
				wants = append(wants, e.want)
			}
		}
		return wants
	}

	t.Run("BacklogFetchesForEveryWorkerAtOnce", func(t *testing.T) {
		// Four workers, eight jobs: the first fetch takes four and leaves
		// more, so the runner is under load. Two jobs ending free half the
		// workers, which fetches nothing yet (the linger is lengthened out
		// of the way); the other two ending make one fetch for all four.
		gt, log := newGate(), &journal{}
		backlog(t, gt, log, time.Minute)
		gt.let("a")
		gt.let("b")
		eventually(t, "a and b are settled", func() bool { return settled(log, "t", "a")() && settled(log, "t", "b")() })
		time.Sleep(20 * time.Millisecond) // a fetch for the two free workers would be under way by now
		if got := fetchesOf(log); len(got) != 1 {
			t.Fatalf("fetches %v with half the workers free under a backlog, want only the first", got)
		}
		gt.let("c")
		gt.let("d")
		eventually(t, "a second fetch", func() bool { return len(fetchesOf(log)) == 2 })
		if got := fetchesOf(log); got[1] != 4 {
			t.Fatalf("fetches %v, want the second for all 4 workers", got)
		}
		gt.pass("e", "f", "g", "h")
		eventually(t, "h is settled", settled(log, "t", "h"))
	})

	t.Run("BacklogFetchesForFewerWorkersAfterALinger", func(t *testing.T) {
		// Four workers, eight jobs, under load: two jobs ending free half
		// the workers, and once they have been free for a linger they are
		// fetched for, the other two still running. Workers that end wake
		// the dispatcher only when it may fetch: the first one's wake
		// starts the linger, and the linger's end brings the fetch.
		gt, log := newGate(), &journal{}
		backlog(t, gt, log, 50*time.Millisecond)
		gt.let("a")
		gt.let("b")
		eventually(t, "a second fetch", func() bool { return len(fetchesOf(log)) == 2 })
		if got := fetchesOf(log); got[1] != 2 {
			t.Fatalf("fetches %v, want the second for the 2 free workers", got)
		}
		gt.pass("c", "d", "e", "f", "g", "h")
		eventually(t, "h is settled", settled(log, "t", "h"))
	})

	t.Run("NoBacklogFetchesForHalfTheWorkers", func(t *testing.T) {
		// Four workers, four jobs: the first fetch takes them all and
		// leaves none, so the runner is not under load. Two more jobs come;
		// two jobs ending make a fetch for the two free workers at once,
		// without waiting for the other two (nor for the linger).
		gt := newGate()
		log := &journal{}
		rg := newRig(t, &listener{topic: "t", workers: 4, on: gt.handler}, rigOptions{log: log})
		rg.r.lingerAfter = time.Minute
		for _, id := range []string{"a", "b", "c", "d"} {
			rg.f.push(0, job(id, 0))
		}
		rg.start()
		for range 4 {
			gt.wait(t)
		}
		rg.f.push(0, job("e", 0), job("f", 0))
		rg.r.wake(0)
		gt.let("a")
		gt.let("b")
		eventually(t, "a second fetch", func() bool { return len(fetchesOf(log)) == 2 })
		if got := fetchesOf(log); got[1] != 2 {
			t.Fatalf("fetches %v, want the second for the 2 free workers", got)
		}
		gt.pass("c", "d", "e", "f")
		eventually(t, "f is settled", settled(log, "t", "f"))
	})

	t.Run("SlowFetchFreesItsWorkersForOtherBuckets", func(t *testing.T) {
		// One worker, two buckets: bucket 0's fetch hangs with the worker
		// reserved; once it is slow, bucket 1's job runs beside it.
		gt := newGate()
		rg := newRig(t, &listener{topic: "t", workers: 1, on: gt.handler}, rigOptions{buckets: 2})
		hung := make(chan struct{})
		rg.f.setHook(func(ctx context.Context, b int) (bool, error) {
			if b == 0 {
				select {
				case <-hung:
				case <-ctx.Done():
					return false, ctx.Err()
				}
			}
			return false, nil
		})
		rg.f.push(0, job("a", 0))
		rg.f.push(1, job("b", 0))
		rg.start()
		if id := gt.wait(t); id != "b" {
			t.Fatalf("first job to run is %q, want bucket 1's b while bucket 0's fetch hangs", id)
		}
		gt.let("b")
		close(hung)
		if id := gt.wait(t); id != "a" {
			t.Fatalf("job %q ran, want a once its fetch answered", id)
		}
		gt.let("a")
		eventually(t, "a is settled", settled(rg.f.log, "t", "a"))
	})

	t.Run("LateAnswerKeepsWhatFreeWorkersStart", func(t *testing.T) {
		// Bucket 0's fetch answers after it was slow, while the one worker
		// runs bucket 1's job: the job it brought is not started beside
		// it, but given back by a reconcile, and runs once, later.
		gt := newGate()
		log := &journal{}
		rg := newRig(t, &listener{topic: "t", workers: 1, on: gt.handler}, rigOptions{buckets: 2, log: log})
		hung := make(chan struct{})
		var fetches0 atomic.Int32
		rg.f.setHook(func(ctx context.Context, b int) (bool, error) {
			if b == 0 && fetches0.Add(1) == 1 {
				select {
				case <-hung:
				case <-ctx.Done():
					return false, ctx.Err()
				}
			}
			return false, nil
		})
		rg.f.push(0, job("late", 0))
		rg.f.push(1, job("b", 0))
		rg.start()
		if id := gt.wait(t); id != "b" {
			t.Fatalf("first job to run is %q, want b", id)
		}
		close(hung) // answers now, with the only worker busy
		eventually(t, "the late job is given back", func() bool {
			return log.index(0, func(e event) bool { return e.kind == "reconcile" && e.b == 0 && slices.Contains(e.ids, "late") }) >= 0
		})
		if got := gt.startedSince(); len(got) > 0 {
			t.Fatalf("%v started beside b on the only worker", got)
		}
		gt.let("b")
		if id := gt.wait(t); id != "late" {
			t.Fatalf("job %q ran, want late", id)
		}
		gt.let("late")
		eventually(t, "late is settled", settled(log, "t", "late"))
		most, ran := gt.stats()
		if most != 1 || ran["late"] != 1 {
			t.Fatalf("at most %d handlers ran at once (want 1); late ran %d times (want 1)%s", most, ran["late"], describe(log))
		}
		// The slow bucket's next fetch asked for one job.
		i := log.index(0, func(e event) bool {
			return e.kind == "fetch" && e.b == 0 && slices.Contains(e.ids, "late") && e.want == 1
		})
		if i < 0 {
			t.Fatalf("no fetch of one job from the slow bucket:%s", describe(log))
		}
	})

	t.Run("LostReplyIsReconciledBeforeTheNextFetch", func(t *testing.T) {
		// The first fetch takes the job into this consumer's in-flight
		// list and its reply is lost: a reconcile gives it back before the
		// bucket's next fetch, and the job runs once.
		gt := newGate()
		gt.pass("a")
		log := &journal{}
		rg := newRig(t, &listener{topic: "t", workers: 2, on: gt.handler}, rigOptions{log: log})
		var fetches atomic.Int32
		rg.f.setHook(func(ctx context.Context, b int) (bool, error) {
			return fetches.Add(1) == 1, nil
		})
		rg.f.push(0, job("a", 0))
		rg.start()
		eventually(t, "a is settled", settled(log, "t", "a"))
		lost := log.index(0, func(e event) bool { return e.kind == "fetch" && e.err == errLost })
		back := log.index(lost, func(e event) bool { return e.kind == "reconcile" && slices.Contains(e.ids, "a") })
		again := log.index(lost+1, func(e event) bool { return e.kind == "fetch" })
		if lost < 0 || back < 0 || again < back {
			t.Fatalf("want a lost fetch, a reconcile giving a back, then the next fetch:%s", describe(log))
		}
		if _, ran := gt.stats(); ran["a"] != 1 {
			t.Fatalf("a ran %d times, want 1", ran["a"])
		}
	})

	t.Run("QuarantineStopFetchesTheJobAloneOnceIdle", func(t *testing.T) {
		// The fetch stops at a quarantined job behind a: nothing more is
		// fetched until a's outcome is applied; then the quarantined job
		// is fetched alone, and nothing else until its outcome is applied.
		gt := newGate()
		log := &journal{}
		rg := newRig(t, &listener{topic: "t", workers: 4, on: gt.handler}, rigOptions{log: log})
		rg.f.push(0, job("a", 0), job("q", 2), job("c", 0))
		rg.start()
		if id := gt.wait(t); id != "a" {
			t.Fatalf("job %q ran first, want a", id)
		}
		stop := log.index(0, func(e event) bool { return e.kind == "fetch" && slices.Equal(e.ids, []string{"a"}) })
		if stop < 0 {
			t.Fatalf("the first fetch did not stop at q:%s", describe(log))
		}
		gt.let("a")
		if id := gt.wait(t); id != "q" {
			t.Fatalf("job %q ran, want q", id)
		}
		gt.let("q")
		if id := gt.wait(t); id != "c" {
			t.Fatalf("job %q ran, want c", id)
		}
		gt.let("c")
		eventually(t, "c is settled", settled(log, "t", "c"))
		aDone := log.index(0, func(e event) bool { return e.kind == "settle" && slices.Contains(e.ids, "a") })
		qFetch := log.index(0, func(e event) bool { return e.kind == "fetch" && slices.Contains(e.ids, "q") })
		qDone := log.index(0, func(e event) bool { return e.kind == "settle" && slices.Contains(e.ids, "q") })
		cFetch := log.index(0, func(e event) bool { return e.kind == "fetch" && slices.Contains(e.ids, "c") })
		for i, e := range log.all() {
			if e.kind == "fetch" && i > stop && i < aDone {
				t.Fatalf("fetched while a ran after the stop at q:%s", describe(log))
			}
		}
		if qFetch < aDone || !log.all()[qFetch].alone || cFetch < qDone {
			t.Fatalf("want a settled, q fetched alone, q settled, then c fetched:%s", describe(log))
		}
	})

	t.Run("QuarantineSlotIsSharedByTheRunnersGivenIt", func(t *testing.T) {
		// Two listeners given one slot: while one runs its quarantined
		// job, the other does not fetch its own, and does once the first
		// one's outcome is applied.
		q := NewQuarantine()
		log := &journal{}
		ga, gb := newGate(), newGate()
		ra := newRig(t, &listener{topic: "a", workers: 2, on: ga.handler}, rigOptions{quarantine: q, log: log})
		rb := newRig(t, &listener{topic: "b", workers: 2, on: gb.handler}, rigOptions{quarantine: q, log: log})
		ra.f.push(0, job("qa", 2))
		rb.f.push(0, job("qb", 2))
		ra.start()
		if id := ga.wait(t); id != "qa" {
			t.Fatalf("job %q ran, want qa", id)
		}
		rb.start()
		eventually(t, "b's fetch stops at qb", func() bool {
			return log.index(0, func(e event) bool { return e.kind == "fetch" && e.topic == "b" }) >= 0
		})
		ga.let("qa")
		if id := gb.wait(t); id != "qb" {
			t.Fatalf("job %q ran, want qb", id)
		}
		gb.let("qb")
		eventually(t, "qb is settled", settled(log, "b", "qb"))
		qaDone := log.index(0, func(e event) bool { return e.kind == "settle" && e.topic == "a" })
		qbFetch := log.index(0, func(e event) bool { return e.kind == "fetch" && slices.Contains(e.ids, "qb") })
		if qbFetch < qaDone {
			t.Fatalf("qb was fetched before qa's outcome was applied:%s", describe(log))
		}
	})

	t.Run("RunnersGivenTwoSlotsRunQuarantinedJobsTogether", func(t *testing.T) {
		// The slot is the value given, not the process: listeners given
		// slots of their own run their quarantined jobs side by side.
		ga, gb := newGate(), newGate()
		ra := newRig(t, &listener{topic: "a", workers: 2, on: ga.handler}, rigOptions{quarantine: NewQuarantine()})
		rb := newRig(t, &listener{topic: "b", workers: 2, on: gb.handler}, rigOptions{quarantine: NewQuarantine()})
		ra.f.push(0, job("qa", 2))
		rb.f.push(0, job("qb", 2))
		ra.start()
		if id := ga.wait(t); id != "qa" {
			t.Fatalf("job %q ran, want qa", id)
		}
		rb.start()
		if id := gb.wait(t); id != "qb" {
			t.Fatalf("job %q ran, want qb beside qa", id)
		}
		ga.let("qa")
		gb.let("qb")
	})

	t.Run("FailedFetchBacksOffAloneAndRecovers", func(t *testing.T) {
		// Bucket 0's fetches fail: bucket 1's jobs run meanwhile, and
		// bucket 0's run once its fetches succeed again.
		gt := newGate()
		gt.pass("a", "b")
		log := &journal{}
		rg := newRig(t, &listener{topic: "t", workers: 2, on: gt.handler}, rigOptions{buckets: 2, log: log})
		var failing atomic.Bool
		failing.Store(true)
		rg.f.setHook(func(ctx context.Context, b int) (bool, error) {
			if b == 0 && failing.Load() {
				return false, context.DeadlineExceeded
			}
			return false, nil
		})
		rg.f.push(0, job("a", 0))
		rg.f.push(1, job("b", 0))
		rg.start()
		eventually(t, "b is settled", settled(log, "t", "b"))
		eventually(t, "bucket 0's fetch failed twice", func() bool {
			first := log.index(0, func(e event) bool { return e.kind == "fetch" && e.b == 0 && e.err != nil })
			return first >= 0 && log.index(first+1, func(e event) bool { return e.kind == "fetch" && e.b == 0 && e.err != nil }) >= 0
		})
		failing.Store(false)
		eventually(t, "a is settled", settled(log, "t", "a"))
	})

	t.Run("FetchWaitsForAHeartbeatToGetThrough", func(t *testing.T) {
		// Unheard for most of a ConsumerTimeout, the runner fetches
		// nothing (a reaper may forget it); it fetches once a heartbeat
		// got through again.
		gt := newGate()
		gt.pass("a")
		log := &journal{}
		waits := newLogSignal("redeq: fetch waits for a heartbeat to get through")
		rg := newRig(t, &listener{topic: "t", workers: 1, on: gt.handler}, rigOptions{log: log, logger: slog.New(waits)})
		rg.g.base = time.Now().Add(-rg.g.cfg.ConsumerTimeout) // last heard at base
		rg.f.push(0, job("a", 0))
		rg.start()
		waits.wait(t) // the dispatcher's pass decided not to fetch
		if i := log.index(0, func(e event) bool { return e.kind == "fetch" }); i >= 0 {
			t.Fatalf("fetched while no heartbeat got through:%s", describe(log))
		}
		rg.g.heardAt.Store(int64(time.Since(rg.g.base)))
		eventually(t, "a is settled", settled(log, "t", "a"))
	})
}

// backlog starts a runner of four workers gated by gt, logging to log,
// whose free workers linger for linger, on eight jobs a to h, and waits
// until its first fetch's four (a to d) run: it is under load.
func backlog(t *testing.T, gt *gate, log *journal, linger time.Duration) {
	t.Helper()
	rg := newRig(t, &listener{topic: "t", workers: 4, on: gt.handler}, rigOptions{log: log})
	rg.r.lingerAfter = linger
	for _, id := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		rg.f.push(0, job(id, 0))
	}
	rg.start()
	for range 4 {
		gt.wait(t)
	}
}

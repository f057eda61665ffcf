package consumer

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/redeq-go/redeq/ack"
	"github.com/redeq-go/redeq/internal/env"
	"github.com/redeq-go/redeq/internal/rdb"
)

// maxSettle bounds the outcomes one settle script applies.
const maxSettle = ack.MaxSettle

// settleState is the settler's: the outcomes on their way to it, and its
// lifecycle.
type settleState struct {
	// submits counts the outcomes on their way to the settler: Shutdown
	// waits for them before it stops the settler.
	submits     sync.WaitGroup
	outs        chan settleReq
	stopSettle  chan struct{}
	settlerDone chan struct{}
	// retryWait is the backoff of a failed settle: the zero value, which
	// tests shorten.
	retryWait env.Backoff
	// lingerFor is settleLinger; tests lengthen it.
	lingerFor time.Duration
}

func (s *settleState) init(workers int) {
	s.lingerFor = settleLinger
	s.outs = make(chan settleReq, 2*workers)
	s.stopSettle = make(chan struct{})
	s.settlerDone = make(chan struct{})
}

type settleReq struct {
	bucket int
	out    ack.Outcome
}

// conclude ends the run of delivery member of bucket b with its outcome
// (nil: none, its handler was canceled): it hands the outcome to the
// settler. When Shutdown left the delivery in flight for it (keepRunning),
// the settler is gone: it applies the outcome itself, or gives the job
// back to the head of its ready list, once; when Redis cannot be reached
// then (a client from Open closed its connection), the reaper recovers
// the job after ConsumerTimeout.
func (r *runner) conclude(b int, member string, out *ack.Outcome) {
	var pending *sync.WaitGroup
	if out != nil {
		pending = &r.submits // counted before keepRunning, or kept
	}
	if kept := r.dl.finish(b, member, pending); !kept {
		if out != nil {
			r.submit(b, *out)
			r.submits.Done()
		}
		return // the rollback gives back a job without an outcome
	}
	defer func() {
		r.g.keptN.Add(-1)
		r.g.keptWG.Done()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), concludeTimeout)
	defer cancel()
	var err error
	if out != nil {
		_, err = r.applier.Settle(ctx, b, []ack.Outcome{*out})
	} else {
		_, err = r.applier.Release(ctx, b, []string{member})
	}
	if err != nil {
		r.g.env.Logger.Warn("redeq: cannot conclude a job whose handler returned after shutdown (the reaper recovers it after ConsumerTimeout)", "topic", r.topic, "bucket", b, "err", err)
	}
}

// concludeTimeout bounds conclude's own call to Redis.
const concludeTimeout = 2 * time.Second

// submit hands an outcome to the settler; after the settler stopped the
// outcome is dropped and the job is left to the rollback or the reaper.
func (r *runner) submit(bucket int, out ack.Outcome) {
	select {
	case r.outs <- settleReq{bucket: bucket, out: out}:
	case <-r.settlerDone:
	}
}

// settle hands outcomes to their bucket's lane until stopSettle is
// closed, then hands over what is queued, lets the lanes apply it and
// closes settlerDone. Each bucket settles on a lane of its own, so that an
// outcome that cannot be applied (its bucket's Redis node hangs) holds up
// no other bucket's.
func (r *runner) settle() {
	defer close(r.settlerDone)
	lanes := make([]chan ack.Outcome, r.buckets)
	var wg sync.WaitGroup
	send := func(s settleReq) {
		ch := lanes[s.bucket]
		if ch == nil {
			// A lane holds at most the bucket's deliveries this runner
			// holds, which dispatch bounds to heldPerWorker times the
			// capacity: the send never blocks, and the settler never
			// waits for one bucket while the others' outcomes queue
			// behind it.
			ch = make(chan ack.Outcome, heldPerWorker*r.capacity)
			lanes[s.bucket] = ch
			wg.Go(func() { r.lane(s.bucket, ch) })
		}
		ch <- s.out
	}
	for {
		select {
		case o := <-r.outs:
			send(o)
		case <-r.stopSettle:
			for {
				select {
				case o := <-r.outs:
					send(o)
					continue
				default:
				}
				break
			}
			for _, ch := range lanes {
				if ch != nil {
					close(ch)
				}
			}
			wg.Wait()
			return
		}
	}
}

// settleLinger bounds how long a lane under load waits for more
// outcomes before it settles those it holds.
const settleLinger = time.Millisecond

// lane applies bucket b's outcomes in batches until in is closed. Under
// load (more handlers running than the outcomes it holds) a lane waits up
// to settleLinger for a batch of twice capacity outcomes, so that one
// settle carries the outcomes of two fetches (a runner under a backlog
// fetches for every worker at once: batchFor): the settles, each some
// eight commands whatever its size, then cost the server less per job.
// No job's start waits for it (a worker is free once it handed its outcome
// on), and while a settle is under way the next fetches go on (dispatch's
// room, heldPerWorker). An outcome that comes alone is settled at once.
func (r *runner) lane(b int, in chan ack.Outcome) {
	log := r.g.env.Logger.With("topic", r.topic)
	var linger *time.Timer
	var settled time.Time // the end of the lane's latest settle
	// One buffer for the lane's batches, grown as they need: a settle is
	// done with its batch when flush returns.
	buf := make([]ack.Outcome, 0, min(2*r.capacity, maxSettle))
	for o := range in {
		batch := append(buf[:0], o)
		open := true
	more:
		for len(batch) < maxSettle {
			select {
			case o, ok := <-in:
				if !ok {
					open = false
					break more
				}
				batch = append(batch, o)
			default:
				break more
			}
		}
		target := min(2*r.capacity, maxSettle)
		if open && len(batch) < target && time.Since(settled) < 4*r.lingerFor {
			if linger == nil {
				linger = time.NewTimer(r.lingerFor)
			} else {
				linger.Reset(r.lingerFor)
			}
		wait:
			for len(batch) < target {
				select {
				case o, ok := <-in:
					if !ok {
						break wait
					}
					batch = append(batch, o)
				case <-linger.C:
					break wait
				}
			}
			linger.Stop()
		}
		r.flush(b, batch, log)
		settled = time.Now()
		clear(batch) // what the outcomes hold is garbage now
		buf = batch[:0]
	}
}

// flush settles a batch of bucket b, retrying Redis failures until they
// succeed or the group gives up at the end of Shutdown.
func (r *runner) flush(b int, outs []ack.Outcome, log *slog.Logger) {
	ctx := r.g.settleCtx
	bo := r.retryWait
	unconfirmed := false // applied once, but not by enough replicas
	for {
		applied, err := r.applier.Settle(ctx, b, outs)
		if err == nil {
			r.dl.unhold(b, outs)
			signal(r.freed) // a runner waiting to be idle may go on
			for i, ok := range applied {
				if !ok && !unconfirmed {
					log.Info("redeq: outcome dropped: job deleted or recovered by another consumer, or the outcome applied by a resend of this settle whose first reply was lost", "id", outs[i].ID, "op", string(outs[i].Op))
				}
			}
			return
		}
		if ctx.Err() != nil {
			log.Warn("redeq: outcomes not applied before shutdown; the jobs run again", "count", len(outs), "err", err)
			return
		}
		unconfirmed = unconfirmed || errors.Is(err, rdb.ErrNotReplicated)
		wait := bo.Next()
		r.g.env.Failure("redeq: settle failed", "topic", r.topic, "bucket", b, "err", err, "retry_in", wait)
		sleep(ctx, wait)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

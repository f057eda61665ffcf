package redeq_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// fetchReplyLost is a hook that loses the reply of the first fetch
// script of one ready list, after the script ran:
//   - "lost": the caller gets an error (a read timeout, a reset
//     connection after the server answered);
//   - "rerun": the script runs once unseen, then again (what go-redis does
//     on a read timeout: it resends the command, and the caller sees only
//     the second reply).
type fetchReplyLost struct {
	raw   *redis.Client
	ready string
	mode  string
	fired atomic.Bool
}

func (h *fetchReplyLost) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *fetchReplyLost) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *fetchReplyLost) isFetch(cmd redis.Cmder) bool {
	a := cmd.Args()
	if len(a) < 4 {
		return false
	}
	name := strings.ToLower(fmt.Sprint(a[0]))
	return (name == "evalsha" || name == "eval") && fmt.Sprint(a[3]) == h.ready
}

func (h *fetchReplyLost) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.fired.Load() || !h.isFetch(cmd) {
			return next(ctx, cmd)
		}
		switch h.mode {
		case "lost":
			if err := next(ctx, cmd); err != nil {
				return err
			}
			h.fired.Store(true)
			err := errors.New("read tcp: i/o timeout (simulated lost reply)")
			cmd.SetErr(err)
			return err
		default: // rerun
			if err := h.raw.Do(ctx, cmd.Args()...).Err(); err == nil {
				h.fired.Store(true)
			}
			return next(ctx, cmd)
		}
	}
}

// TestReview17QuarantinedBesideUnheldDelivery attacks promise 1 ("a job
// recovered Quarantine times or more runs alone: ... nothing else of its
// own listener is in flight with it"). A listener (2 buckets) starts with
// the healthy job h ready in one bucket and the quarantined job q in the
// other. The first fetch of h's bucket takes h, but its reply is lost. The
// runner decides it is idle from what it knows it holds (runner.idle
// reads r.held only), not from its in-flight sets in Redis, so it fetches
// and runs q while h still sits in this consumer's in-flight set of the
// other bucket:
//   - "lost": the bucket waits out its backoff before the reconcile
//     (dispatch skips a bucket before retryAt, reconcile included), while
//     the solo fetch is launched at once;
//   - "rerun": the loss is hidden; only the periodic sweep (every
//     ConsumerTimeout, 15 s by default) reconciles the bucket.
//
// If q is the poison and kills the process now, the reaper counts a
// recovery for h too, the very thing quarantine is for.
func TestReview17QuarantinedBesideUnheldDelivery(t *testing.T) {
	if !isolated(t) {
		return // it takes the quarantine slot: a process of its own
	}
	for _, mode := range []string{"lost", "rerun"} {
		t.Run(mode, func(t *testing.T) {
			// Not parallel: both take the process-wide quarantine slot.
			srv, be := privateServer(t)
			ctx := context.Background()
			cfg := testutil.Config(t)
			cfg.Concurrency = 2
			cfg.ConsumerTimeout = 3 * time.Second
			cfg.HeartbeatInterval = 300 * time.Millisecond
			e := setup(t, be, cfg)
			hID, qID := "", ""
			for i := 0; hID == "" || qID == ""; i++ {
				id := fmt.Sprint("j", i)
				switch bucketOf(id, 2) {
				case 0:
					if hID == "" {
						hID = id
					}
				case 1:
					if qID == "" {
						qID = id
					}
				}
			}
			hb, qb := keys.ForBucket(cfg.Prefix, "t", 0), keys.ForBucket(cfg.Prefix, "t", 1)
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: hID}))
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: qID}))
			quarantine(t, e.rdb, e.cfg, "t", qID, 2)
			require.NoError(t, e.c.Start(ctx)) // moves, consumes nothing
			waitFor(t, 5*time.Second, "both ready", func() bool { return stats(t, e.c, "t").Ready == 2 })

			raw := srv.Client(nil)
			hook := &fetchReplyLost{raw: raw, ready: hb.Ready(), mode: mode}
			x := e.hooked(t, hook)
			var mu sync.Mutex
			var beside []string
			var qStart time.Time
			var overlap time.Duration
			l := newListener("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
				if job.ID == qID {
					others := func() []string {
						var out []string
						for _, k := range []string{hb.InFlight(x.ConsumerID()), qb.InFlight(x.ConsumerID())} {
							ms, _ := raw.ZRange(ctx, k, 0, -1).Result()
							for _, m := range ms {
								if !strings.HasSuffix(m, ":"+qID) {
									out = append(out, m)
								}
							}
						}
						return out
					}
					mu.Lock()
					qStart = time.Now()
					beside = others()
					mu.Unlock()
					// Run up to 5 s, measuring how long the other delivery
					// stays in flight beside this one.
					for time.Since(qStart) < 5*time.Second && len(others()) > 0 {
						time.Sleep(5 * time.Millisecond)
					}
					mu.Lock()
					overlap = time.Since(qStart)
					mu.Unlock()
				}
				ch.Ack()
				return nil
			})
			l.workers = 4
			startWith(t, x, l)
			waitFor(t, 10*time.Second, "q and h ran", func() bool {
				n := l.byID()
				return n[qID] == 1 && n[hID] == 1
			})
			var hStart time.Time
			for _, d := range l.deliveries() {
				if d.job.ID == hID {
					hStart = d.at
				}
			}
			mu.Lock()
			defer mu.Unlock()
			require.True(t, hook.fired.Load(), "the fetch reply was never lost")
			t.Logf("mode %s: when quarantined %s started, this consumer's in-flight sets also held %v, for %v; %s started %v after %s",
				mode, qID, beside, overlap.Round(time.Millisecond), hID, hStart.Sub(qStart).Round(time.Millisecond), qID)
			require.Empty(t, beside, "the quarantined job ran while another delivery of its listener was in flight (in this consumer's in-flight set)")
		})
	}
}

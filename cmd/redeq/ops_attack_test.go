package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestCLIPurgeSparesJobsThatDiedAfterItsQuestion: purge removes the dead
// jobs its question named, not a job of the same id that died after it:
// one deleted and added again, or one requeued, that died again while the
// question waited stays dead.
func TestCLIPurgeSparesJobsThatDiedAfterItsQuestion(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		for _, how := range []string{"readded", "requeued"} {
			t.Run(b.Name+"/"+how, func(t *testing.T) {
				e := newEnv(t, b)
				ctx := context.Background()
				park(t, e, "d1", "d2")
				old := e.job(t, "orders", "d1")
				stdin := &answerAfter{before: func() {
					if how == "readded" {
						_, err := e.c.Delete(ctx, "orders", "d1")
						require.NoError(t, err)
						time.Sleep(5 * time.Millisecond) // a CreatedAt of its own
						park(t, e, "d1")
					} else {
						w, err := redeq.New(e.b.New(t), e.c.Config())
						require.NoError(t, err)
						require.NoError(t, w.Register(redeq.ListenerFunc("orders", func(context.Context, *redeq.Job, *redeq.Channel) error {
							return redeq.SkipRetry(errors.New("boom again"))
						})))
						require.NoError(t, w.Start(ctx))
						require.NoError(t, e.c.RequeueDead(ctx, "orders", "d1", 0))
						waitFor(t, func() bool {
							j, err := e.c.Get(ctx, "orders", "d1")
							return err == nil && j.State == redeq.StateDead && j.Reason != old.Reason
						})
						require.NoError(t, w.Shutdown(ctx))
					}
				}, r: strings.NewReader("y\n")}
				var out, errb strings.Builder
				code := run(ctx, []string{"--redis", e.url, "--prefix", e.prefix, "purge", "dead", "orders"}, stdin, &out, &errb)
				require.Equal(t, 0, code, errb.String())
				require.Contains(t, errb.String(), "Remove the 2 dead jobs of orders, for good? [y/N]")
				_, err := e.c.Get(ctx, "orders", "d2")
				require.ErrorIs(t, err, redeq.ErrJobNotFound, "d2 was named")
				j, err := e.c.Get(ctx, "orders", "d1")
				require.NoError(t, err, "d1 died again after the question (%s): it stays", how)
				require.Equal(t, redeq.StateDead, j.State)
				if how == "readded" {
					require.NotEqual(t, old.CreatedAt, j.CreatedAt)
				}
			})
		}
	}
}

// TestCLIRequeueAllRequeuesEachJobOnceBeyondOneBulk: requeue --all over
// more jobs than one bulk call takes (redeq.MaxBulk), spread over 8
// buckets, requeues each job parked (or dead) when it starts once, while
// a listener parks (or kills) again each job it runs.
func TestCLIRequeueAllRequeuesEachJobOnceBeyondOneBulk(t *testing.T) {
	testutil.FaultTier(t)
	const jobs = 2*redeq.MaxBulk + 500
	for _, b := range testutil.RealBackends(t) {
		for _, from := range []string{"unack", "dead"} {
			t.Run(b.Name+"/"+from, func(t *testing.T) {
				e := newEnv(t, b)
				cfg := e.c.Config()
				cfg.Concurrency = 8
				c, err := redeq.New(b.New(t), cfg)
				require.NoError(t, err)
				e.c = c
				ctx := context.Background()
				var mu sync.Mutex
				runs := map[string]int{}
				w, err := redeq.New(b.New(t), cfg)
				require.NoError(t, err)
				require.NoError(t, w.Register(redeq.ListenerFunc("orders", func(_ context.Context, j *redeq.Job, _ *redeq.Channel) error {
					mu.Lock()
					runs[j.ID]++
					mu.Unlock()
					if from == "dead" {
						return redeq.SkipRetry(errors.New("boom"))
					}
					return nil
				})))
				require.NoError(t, w.Start(ctx))
				t.Cleanup(func() { _ = w.Shutdown(context.Background()) })
				var batch []*redeq.Job
				for i := range jobs {
					batch = append(batch, &redeq.Job{Topic: "orders", ID: fmt.Sprint("j", i)})
				}
				require.NoError(t, e.c.AddBatch(ctx, batch))
				parked := func() bool {
					st, err := e.c.Stats(ctx, "orders")
					require.NoError(t, err)
					n := st.UnAck
					if from == "dead" {
						n = st.Dead
					}
					return n == jobs && st.Scheduled+st.Ready+st.InFlight == 0
				}
				waitFor(t, parked)
				require.Equal(t, fmt.Sprintf("requeued %d jobs of orders from %s\n", jobs, from), e.ok(t, "requeue", from, "orders", "--all"))
				waitFor(t, func() bool {
					mu.Lock()
					defer mu.Unlock()
					for _, n := range runs {
						if n < 2 {
							return false
						}
					}
					return parked()
				})
				mu.Lock()
				defer mu.Unlock()
				for id, n := range runs {
					require.Equal(t, 2, n, "job %s ran %d times: once before the command, once after its one requeue", id, n)
				}
			})
		}
	}
}

// TestCLIRequeueAllSparesAJobParkedAfterItStarted: requeue --all requeues
// the jobs parked when it starts, not a job of one of their ids deleted,
// added again and parked while it runs.
func TestCLIRequeueAllSparesAJobParkedAfterItStarted(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		if b.Name == "cluster" {
			continue // the proxy fronts one server
		}
		t.Run(b.Name, func(t *testing.T) {
			e := newEnv(t, b)
			ctx := context.Background()
			park(t, e, "u1", "u2")
			old := e.job(t, "orders", "u1")
			p := testutil.StartProxy(t, b.Addrs[0])
			// Hold the command's requeue for 2 s: the only request that names u1
			// (the first page of List names no id).
			p.Match(func(req []byte) bool {
				return bytes.Contains(req, []byte("u1"))
			})
			p.FaultDelay.Store(int64(2 * time.Second))
			p.DelayRequest.Store(1)
			done := make(chan int, 1)
			var out, errb strings.Builder
			go func() {
				done <- run(ctx, []string{"--redis", "redis://" + p.Addr(), "--prefix", e.prefix, "requeue", "unack", "orders", "--all"}, strings.NewReader(""), &out, &errb)
			}()
			waitFor(t, func() bool { return p.Matched() > 0 })
			_, err := e.c.Delete(ctx, "orders", "u1")
			require.NoError(t, err)
			time.Sleep(5 * time.Millisecond)
			park(t, e, "u1") // a new job of the id, parked after the command started
			require.Equal(t, 0, <-done, errb.String())
			t.Log(out.String())
			j := e.job(t, "orders", "u1")
			require.NotEqual(t, old.CreatedAt, j.CreatedAt)
			require.Equal(t, redeq.StateUnAck, j.State, "the new u1 was parked after the command started: it stays")
		})
	}
}

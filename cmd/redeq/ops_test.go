package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// park runs a worker over topic "orders" until the jobs named are parked:
// ids starting with "d" die, the others go to un_ack.
func park(t *testing.T, e *cliEnv, ids ...string) {
	t.Helper()
	ctx := context.Background()
	var batch []*redeq.Job
	for _, id := range ids {
		batch = append(batch, &redeq.Job{Topic: "orders", ID: id})
	}
	require.NoError(t, e.c.AddBatch(ctx, batch))
	w, err := redeq.New(e.b.New(t), e.c.Config())
	require.NoError(t, err)
	require.NoError(t, w.Register(redeq.ListenerFunc("orders", func(_ context.Context, j *redeq.Job, _ *redeq.Channel) error {
		if j.ID[0] == 'd' {
			return redeq.SkipRetry(errors.New("boom"))
		}
		return nil
	})))
	require.NoError(t, w.Start(ctx))
	t.Cleanup(func() { _ = w.Shutdown(context.Background()) })
	for _, id := range ids {
		want := redeq.StateUnAck
		if id[0] == 'd' {
			want = redeq.StateDead
		}
		waitState(t, e.c, id, want)
	}
	require.NoError(t, w.Shutdown(ctx))
}

// TestCLIPurgeDead: purge asks first and removes nothing unless told yes;
// then the dead set is empty and the other jobs stay.
func TestCLIPurgeDead(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := newEnv(t, b)
			ctx := context.Background()
			park(t, e, "d1", "d2", "d3")
			e.ok(t, "add", "--create", "orders", "later", "--delay", "1h")

			code, _, errs := e.run(t, "n\n", "purge", "dead", "orders")
			require.Equal(t, 1, code)
			require.Contains(t, errs, "Remove the 3 dead jobs of orders, for good? [y/N]")
			require.Contains(t, errs, "not confirmed")
			code, _, _ = e.run(t, "", "purge", "dead", "orders")
			require.Equal(t, 1, code, "no answer is no")
			st, err := e.c.Stats(ctx, "orders")
			require.NoError(t, err)
			require.EqualValues(t, 3, st.Dead)

			code, out, errs := e.run(t, "y\n", "purge", "dead", "orders")
			require.Equal(t, 0, code, errs)
			require.Equal(t, "purged 3 dead jobs of orders\n", out)
			st, err = e.c.Stats(ctx, "orders")
			require.NoError(t, err)
			require.Zero(t, st.Dead)
			require.EqualValues(t, 1, st.Pool, "the scheduled job stays")
			require.JSONEq(t, `{"done":"purged","topic":"orders","count":0,"skipped":0,"changed":0}`, e.ok(t, "purge", "dead", "orders", "--yes", "-o", "json"))

			code, _, _ = e.run(t, "", "purge", "unack", "orders", "--yes")
			require.Equal(t, 2, code)
			code, _, _ = e.run(t, "", "purge", "dead", "nosuchtopic", "--yes")
			require.Equal(t, 3, code)
		})
	}
}

// TestCLIRequeueAll: --all requeues every job parked in un_ack, or dead,
// and leaves the other set alone; an id with --all, or neither, is a
// usage error.
func TestCLIRequeueAll(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := newEnv(t, b)
			park(t, e, "d1", "d2", "u1", "u2")
			require.Equal(t, "requeued 2 jobs of orders from dead\n", e.ok(t, "requeue", "dead", "orders", "--all", "--in", "1h"))
			for _, id := range []string{"d1", "d2"} {
				require.Equal(t, redeq.StateScheduled, e.job(t, "orders", id).State, id)
			}
			for _, id := range []string{"u1", "u2"} {
				require.Equal(t, redeq.StateUnAck, e.job(t, "orders", id).State, id)
			}
			var got struct{ Count int }
			require.NoError(t, json.Unmarshal([]byte(e.ok(t, "requeue", "unack", "orders", "--all", "--in", "1h", "-o", "json")), &got))
			require.Equal(t, 2, got.Count)
			for _, id := range []string{"u1", "u2"} {
				require.Equal(t, redeq.StateScheduled, e.job(t, "orders", id).State, id)
			}
			require.Equal(t, "requeued 0 jobs of orders from dead\n", e.ok(t, "requeue", "dead", "orders", "--all"))

			for _, a := range [][]string{{"requeue", "dead", "orders", "d1", "--all"}, {"requeue", "dead", "orders"}} {
				code, _, _ := e.run(t, "", a...)
				require.Equal(t, 2, code, "%v", a)
			}
			code, _, _ := e.run(t, "", "requeue", "dead", "nosuchtopic", "--all")
			require.Equal(t, 3, code)
		})
	}
}

// answerAfter is a standard input that runs before once, when the command
// first reads it (after it asked its question), then answers answer.
type answerAfter struct {
	before func()
	r      io.Reader
	once   sync.Once
}

func (a *answerAfter) Read(p []byte) (int, error) {
	a.once.Do(a.before)
	return a.r.Read(p)
}

// TestCLIPurgeRemovesTheJobsItNamed: purge removes the dead jobs its
// question counted, and the jobs that die while it waits for the answer
// stay dead.
func TestCLIPurgeRemovesTheJobsItNamed(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := newEnv(t, b)
			park(t, e, "d1", "d2", "d3")
			var later []string
			for i := range 40 {
				later = append(later, fmt.Sprint("dlater", i))
			}
			stdin := &answerAfter{before: func() { park(t, e, later...) }, r: strings.NewReader("y\n")}
			var out, errb strings.Builder
			code := run(context.Background(), []string{"--redis", e.url, "--prefix", e.prefix, "purge", "dead", "orders"}, stdin, &out, &errb)
			require.Equal(t, 0, code, errb.String())
			require.Contains(t, errb.String(), "Remove the 3 dead jobs of orders, for good? [y/N]")
			require.Equal(t, "purged 3 dead jobs of orders\n", out.String())
			for _, id := range []string{"d1", "d2", "d3"} {
				_, err := e.c.Get(context.Background(), "orders", id)
				require.ErrorIs(t, err, redeq.ErrJobNotFound, id)
			}
			for _, id := range later {
				require.Equal(t, redeq.StateDead, e.job(t, "orders", id).State, "%s died after the question", id)
			}
		})
	}
}

// TestCLIRequeueAllRequeuesEachJobOnce: requeue --all requeues each job
// parked (or dead) when it starts once, and stops, while a listener parks
// (or kills) again each job it runs.
func TestCLIRequeueAllRequeuesEachJobOnce(t *testing.T) {
	const jobs = 300
	for _, b := range testutil.Backends(t) {
		for _, from := range []string{"unack", "dead"} {
			t.Run(b.Name+"/"+from, func(t *testing.T) {
				e := newEnv(t, b)
				ctx := context.Background()
				var mu sync.Mutex
				runs := map[string]int{}
				w, err := redeq.New(b.New(t), e.c.Config())
				require.NoError(t, err)
				require.NoError(t, w.Register(redeq.ListenerFunc("orders", func(_ context.Context, j *redeq.Job, _ *redeq.Channel) error {
					mu.Lock()
					runs[j.ID]++
					mu.Unlock()
					if from == "dead" {
						return redeq.SkipRetry(errors.New("boom"))
					}
					return nil // parked in un_ack
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

// waitFor polls cond until it holds, for at most 20 seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	testutil.EventuallyEvery(t, 20*time.Second, 20*time.Millisecond, "the condition", cond)
}

// TestCLIStatsWatch: stats --watch prints the counts again every interval,
// with what changed in between, until its context ends (as on Ctrl-C),
// and then exits 0.
func TestCLIStatsWatch(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := newEnv(t, b)
			e.ok(t, "add", "--create", "orders", "o1", "--delay", "1h")
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var out, errb syncBuffer
			exit := make(chan int, 1)
			go func() {
				exit <- run(ctx, []string{"--redis", e.url, "--prefix", e.prefix, "stats", "orders", "--watch", "--interval", "100ms"}, strings.NewReader(""), &out, &errb)
			}()
			row := regexp.MustCompile(`(?m)^orders\s+(\d+)\s`)
			wait := func(want string) {
				t.Helper()
				deadline := time.Now().Add(10 * time.Second)
				for {
					m := row.FindAllStringSubmatch(out.String(), -1)
					if len(m) > 0 && m[len(m)-1][1] == want {
						return
					}
					require.True(t, time.Now().Before(deadline), "never printed %s scheduled: %s %s", want, out.String(), errb.String())
					time.Sleep(10 * time.Millisecond)
				}
			}
			wait("1")
			e.ok(t, "add", "--create", "orders", "o2", "--delay", "1h")
			wait("2")
			cancel()
			select {
			case code := <-exit:
				require.Equal(t, 0, code, errb.String())
			case <-time.After(10 * time.Second):
				t.Fatal("stats --watch did not stop when interrupted")
			}
			require.GreaterOrEqual(t, strings.Count(out.String(), "TOPIC"), 2)

			code, _, _ := e.run(t, "", "stats", "--watch", "--interval", "1ms")
			require.Equal(t, 2, code)
		})
	}
}

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
				require.Equal(t, "purged 1 dead jobs of orders; 1 left, dead again since listed\n", out.String())
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
// added again and parked while it runs; it reports that job as left.
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
			require.Equal(t, "requeued 1 jobs of orders from unack; 1 left, unack again since listed\n", out.String())
			j := e.job(t, "orders", "u1")
			require.NotEqual(t, old.CreatedAt, j.CreatedAt)
			require.Equal(t, redeq.StateUnAck, j.State, "the new u1 was parked after the command started: it stays")
		})
	}
}

// TestCLIDelaysCountOnTheServersClock: add --delay D and requeue --in D
// make a job due D from now by the Redis server's clock, whether the
// server's clock is ahead of this machine's or behind it (on miniredis).
func TestCLIDelaysCountOnTheServersClock(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		if b.Mini == nil {
			continue
		}
		for _, skew := range []time.Duration{10 * time.Minute, -10 * time.Minute} {
			t.Run(b.Name+"/"+skew.String(), func(t *testing.T) {
				e := newEnv(t, b)
				park(t, e, "u1")
				server := time.Now().Add(skew).Truncate(time.Millisecond)
				b.Mini.SetTime(server) // the embedded clock stands still from here
				want := server.Add(5 * time.Minute)
				e.ok(t, "add", "--create", "orders", "o1", "--delay", "5m")
				require.WithinDuration(t, want, e.job(t, "orders", "o1").RunAt, time.Second, "add --delay 5m")
				e.ok(t, "requeue", "unack", "orders", "u1", "--in", "5m")
				require.WithinDuration(t, want, e.job(t, "orders", "u1").RunAt, time.Second, "requeue --in 5m")
			})
		}
	}
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
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
	for _, id := range ids {
		e.ok(t, "add", "orders", id)
	}
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
			e.ok(t, "add", "orders", "later", "--delay", "1h")

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
			require.JSONEq(t, `{"done":"purged","topic":"orders","count":0}`, e.ok(t, "purge", "dead", "orders", "--yes", "-o", "json"))

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

// TestCLIStatsWatch: stats --watch prints the counts again every interval,
// with what changed in between, until its context ends (as on Ctrl-C),
// and then exits 0.
func TestCLIStatsWatch(t *testing.T) {
	for _, b := range testutil.Backends(t) {
		t.Run(b.Name, func(t *testing.T) {
			e := newEnv(t, b)
			e.ok(t, "add", "orders", "o1", "--delay", "1h")
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
			e.ok(t, "add", "orders", "o2", "--delay", "1h")
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

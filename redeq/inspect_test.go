package redeq_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/bucket"
	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/ready"
	"github.com/redeq-go/redeq/redeq"
)

// listAll follows List's cursors to the end, checking each page's size.
func listAll(t *testing.T, c *redeq.Client, topic string, st redeq.State, limit int) []*redeq.Job {
	t.Helper()
	var all []*redeq.Job
	cur := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 10_000, "List never ended")
		page, err := c.List(context.Background(), topic, st, redeq.ListOptions{Limit: limit, Cursor: cur})
		require.NoError(t, err)
		require.LessOrEqual(t, len(page.Jobs), limit)
		all = append(all, page.Jobs...)
		if page.Next == "" {
			return all
		}
		cur = page.Next
	}
}

func ids(jobs []*redeq.Job) []string {
	out := make([]string, len(jobs))
	for i, j := range jobs {
		out[i] = j.ID
	}
	return out
}

// moveDue moves every due job of every bucket of topic to its ready list,
// waiting until want jobs are ready.
func moveDue(t *testing.T, e *env, topic string, buckets, want int) {
	t.Helper()
	testutil.Eventually(t, 5*time.Second, "jobs ready", func() bool {
		for n := range buckets {
			_, err := bucket.Move(context.Background(), e.rdb, e.cfg.Prefix, topic, n, 1000)
			require.NoError(t, err)
		}
		return len(listAll(t, e.c, topic, redeq.StateReady, 1000)) == want
	})
}

// TestListEveryStateAcrossBuckets: pages of 3 over four buckets give each
// job of each state once, with its fields, and skip stale entries: a
// deleted or rescheduled job's ready entry, a deleted job's delivery.
func TestListEveryStateAcrossBuckets(t *testing.T) {
	t.Parallel()
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			cfg := testutil.Config(t)
			cfg.Concurrency = 4
			e := setup(t, be, cfg)
			ctx := context.Background()
			const topic = "t"

			// Parked and dead jobs, from a real listener.
			for i := range 5 {
				require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: fmt.Sprint("u", i)}))
				require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: fmt.Sprint("d", i)}))
			}
			worker := e.another(t, nil)
			startWith(t, worker, newListener(topic, func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
				if strings.HasPrefix(job.ID, "d") {
					return redeq.SkipRetry(errors.New("bad " + job.ID))
				}
				return nil // neither ack nor rejoin: parked
			}))
			testutil.Eventually(t, 10*time.Second, "parked and dead", func() bool {
				st := stats(t, e.c, topic)
				return st.UnAck == 5 && st.Dead == 5
			})
			require.NoError(t, worker.Shutdown(ctx))

			// In flight with two consumers, one delivery made stale.
			for i := range 8 {
				require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: fmt.Sprint("f", i)}))
			}
			moveDue(t, e, topic, 4, 8)
			for _, cid := range []string{"c1", "c2"} {
				require.NoError(t, e.rdb.ZAdd(ctx, keys.ForTopic(e.cfg.Prefix, topic).Consumers(), redisZ(cid)).Err())
			}
			for n := range 4 {
				_, _, err := ready.Fetch(ctx, e.rdb, e.cfg.Prefix, topic, n, "c1", 1, true)
				require.NoError(t, err)
				_, _, err = ready.Fetch(ctx, e.rdb, e.cfg.Prefix, topic, n, "c2", 100, true)
				require.NoError(t, err)
			}
			_, err := e.c.Delete(ctx, topic, "f7")
			require.NoError(t, err)

			// Ready, two of them made stale; scheduled.
			for i := range 10 {
				require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: fmt.Sprint("r", i)}))
			}
			moveDue(t, e, topic, 4, 10)
			_, err = e.c.Delete(ctx, topic, "r3")
			require.NoError(t, err)
			require.NoError(t, e.c.Reschedule(ctx, topic, "r5", time.Now().Add(time.Hour)))
			for i := range 7 {
				require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: fmt.Sprint("s", i), Delay: time.Duration(i+1) * time.Hour}))
			}

			want := map[redeq.State][]string{
				redeq.StateScheduled: {"r5", "s0", "s1", "s2", "s3", "s4", "s5", "s6"},
				redeq.StateReady:     {"r0", "r1", "r2", "r4", "r6", "r7", "r8", "r9"},
				redeq.StateInFlight:  {"f0", "f1", "f2", "f3", "f4", "f5", "f6"},
				redeq.StateUnAck:     {"u0", "u1", "u2", "u3", "u4"},
				redeq.StateDead:      {"d0", "d1", "d2", "d3", "d4"},
			}
			for st, w := range want {
				got := listAll(t, e.c, topic, st, 3)
				require.ElementsMatch(t, w, ids(got), "%s", st)
				for _, j := range got {
					require.Equal(t, st, j.State, j.ID)
					require.Equal(t, topic, j.Topic)
					require.False(t, j.CreatedAt.IsZero(), j.ID)
					stored, err := e.c.Get(ctx, topic, j.ID)
					require.NoError(t, err)
					require.Equal(t, stored.State, j.State, j.ID)
					require.Equal(t, stored.Consumer, j.Consumer, j.ID)
					require.Equal(t, stored.Reason, j.Reason, j.ID)
					switch st {
					case redeq.StateScheduled:
						require.Equal(t, stored.RunAt, j.RunAt, j.ID)
					case redeq.StateInFlight:
						require.Contains(t, []string{"c1", "c2"}, j.Consumer, j.ID)
					case redeq.StateDead:
						require.Contains(t, j.Reason, "bad "+j.ID)
						require.False(t, j.RunAt.IsZero(), "parked time")
					case redeq.StateUnAck:
						require.False(t, j.RunAt.IsZero(), "parked time")
					}
				}
			}
			// Scheduled jobs come by due time within a bucket.
			for n := range 4 {
				var last time.Time
				for _, j := range listAll(t, e.c, topic, redeq.StateScheduled, 2) {
					if bucket.Of(j.ID, 4) == n {
						require.False(t, j.RunAt.Before(last), "out of due order")
						last = j.RunAt
					}
				}
			}
		})
	}
}

// TestListResumesWhereItStopped: a page ends after the last job it gave,
// and the next page goes on from there even when consumers took jobs from
// the head of the ready list in between, or a listed scheduled job left.
func TestListResumesWhereItStopped(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		for i := range 20 {
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprintf("r%02d", i)}))
		}
		moveDue(t, e, "t", 1, 20)
		page, err := e.c.List(ctx, "t", redeq.StateReady, redeq.ListOptions{Limit: 8})
		require.NoError(t, err)
		require.Len(t, page.Jobs, 8)
		// A consumer takes 5 jobs from the head: the rest move up 5 places.
		_, _, err = ready.Fetch(ctx, e.rdb, e.cfg.Prefix, "t", 0, "c", 5, true)
		require.NoError(t, err)
		rest := listAllFrom(t, e.c, "t", redeq.StateReady, 8, page.Next)
		require.Equal(t, []string{"r08", "r09", "r10", "r11", "r12", "r13", "r14", "r15", "r16", "r17", "r18", "r19"}, ids(rest))

		for i := range 10 {
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "s", ID: fmt.Sprintf("s%02d", i), Delay: time.Duration(i+1) * time.Hour}))
		}
		page, err = e.c.List(ctx, "s", redeq.StateScheduled, redeq.ListOptions{Limit: 4})
		require.NoError(t, err)
		require.Equal(t, []string{"s00", "s01", "s02", "s03"}, ids(page.Jobs))
		_, err = e.c.Delete(ctx, "s", "s03") // the job the page ended on
		require.NoError(t, err)
		rest = listAllFrom(t, e.c, "s", redeq.StateScheduled, 4, page.Next)
		require.Equal(t, []string{"s04", "s05", "s06", "s07", "s08", "s09"}, ids(rest))
	})
}

func listAllFrom(t *testing.T, c *redeq.Client, topic string, st redeq.State, limit int, cur string) []*redeq.Job {
	t.Helper()
	var all []*redeq.Job
	for cur != "" {
		page, err := c.List(context.Background(), topic, st, redeq.ListOptions{Limit: limit, Cursor: cur})
		require.NoError(t, err)
		all = append(all, page.Jobs...)
		cur = page.Next
	}
	return all
}

// countCmds counts the commands a client sends, pipelined ones included.
type countCmds struct{ n atomic.Int64 }

func (h *countCmds) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countCmds) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *countCmds) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// TestListBoundedCost: a page costs at most 18 commands whatever the
// topic's size (meta, consumers, 16 bucket scripts), and a bucket script
// reads a bounded number of entries: 3,000 stale ready entries ahead of
// the one real job take several pages, not one read of the whole list.
func TestListBoundedCost(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		hook := &countCmds{}
		rdb := e.be.New(t)
		rdb.AddHook(hook)
		cfg := e.cfg
		cfg.Concurrency = 64
		c, err := redeq.New(rdb, cfg)
		require.NoError(t, err)
		batch := make([]*redeq.Job, 2000)
		for i := range batch {
			batch[i] = &redeq.Job{Topic: "big", ID: fmt.Sprint(i), Delay: time.Hour}
		}
		require.NoError(t, c.AddBatch(ctx, batch))
		for _, st := range []redeq.State{redeq.StateScheduled, redeq.StateInFlight, redeq.StateDead} {
			seen, cur, pages := 0, "", 0
			for {
				hook.n.Store(0)
				page, err := c.List(ctx, "big", st, redeq.ListOptions{Limit: 10, Cursor: cur})
				require.NoError(t, err)
				require.LessOrEqual(t, hook.n.Load(), int64(18), "commands for one page of %s", st)
				seen += len(page.Jobs)
				pages++
				if cur = page.Next; cur == "" {
					break
				}
			}
			if st == redeq.StateScheduled {
				require.Equal(t, 2000, seen)
				require.Equal(t, 200, pages)
			} else {
				require.Zero(t, seen)
				require.LessOrEqual(t, pages, 4, "64 empty buckets, 16 per page")
			}
		}

		// Stale entries ahead of one real ready job.
		k := keys.ForBucket(cfg.Prefix, "stale", 0)
		cfg1 := e.cfg
		cfg1.Concurrency = 1
		one, err := redeq.New(rdb, cfg1)
		require.NoError(t, err)
		require.NoError(t, one.Add(ctx, &redeq.Job{Topic: "stale", ID: "real"}))
		stale := make([]any, 3000)
		for i := range stale {
			stale[i] = fmt.Sprint("gone", i)
		}
		require.NoError(t, rdb.RPush(ctx, k.Ready(), stale...).Err())
		testutil.Eventually(t, 5*time.Second, "real ready", func() bool {
			_, err := bucket.Move(ctx, rdb, cfg.Prefix, "stale", 0, 10)
			require.NoError(t, err)
			return state(t, one, "stale", "real") == redeq.StateReady
		})
		hook.n.Store(0)
		page, err := one.List(ctx, "stale", redeq.StateReady, redeq.ListOptions{Limit: 10})
		require.NoError(t, err)
		require.LessOrEqual(t, hook.n.Load(), int64(18))
		require.Empty(t, page.Jobs, "16 reads of 74 entries reach no further than 1,184 entries")
		require.NotEmpty(t, page.Next)
		got := listAllFrom(t, one, "stale", redeq.StateReady, 10, page.Next)
		require.Equal(t, []string{"real"}, ids(got))
	})
}

// TestListAndStatsOfUnknownTopic: a topic nobody used is ErrUnknownTopic,
// not an empty answer, for Stats, List, Pause and Resume.
func TestListAndStatsOfUnknownTopic(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		_, err := e.c.Stats(ctx, "nobody")
		require.ErrorIs(t, err, redeq.ErrUnknownTopic)
		_, err = e.c.List(ctx, "nobody", redeq.StateReady, redeq.ListOptions{})
		require.ErrorIs(t, err, redeq.ErrUnknownTopic)
		require.ErrorIs(t, e.c.Pause(ctx, "nobody"), redeq.ErrUnknownTopic)
		require.ErrorIs(t, e.c.Resume(ctx, "nobody"), redeq.ErrUnknownTopic)
		require.Empty(t, testutil.Keys(t, e.rdb, e.cfg.Prefix), "a call on an unknown topic wrote something")

		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "used", ID: "1"}))
		_, err = e.c.Delete(ctx, "used", "1")
		require.NoError(t, err)
		st, err := e.c.Stats(ctx, "used")
		require.NoError(t, err, "a used topic, even empty, is known")
		require.Zero(t, st.Pool)
		page, err := e.c.List(ctx, "used", redeq.StateScheduled, redeq.ListOptions{})
		require.NoError(t, err)
		require.Empty(t, page.Jobs)
		require.Empty(t, page.Next)
	})
}

// TestListBadArguments: every bad argument is ErrInvalidArgument, naming
// what is wrong, and nothing is written.
func TestListBadArguments(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "1"}))
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "2"}))
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "u", ID: "1"}))
		page, err := e.c.List(ctx, "t", redeq.StateScheduled, redeq.ListOptions{Limit: 1})
		require.NoError(t, err)
		require.NotEmpty(t, page.Next)
		before := testutil.Dump(t, e.rdb, e.cfg.Prefix)
		var nilCtx context.Context
		cases := []struct {
			name  string
			call  func() error
			names string
		}{
			{"limit -1", func() error { return listErr(e.c.List(ctx, "t", redeq.StateReady, redeq.ListOptions{Limit: -1})) }, "Limit -1"},
			{"limit 1001", func() error { return listErr(e.c.List(ctx, "t", redeq.StateReady, redeq.ListOptions{Limit: 1001})) }, "Limit 1001"},
			{"state", func() error { return listErr(e.c.List(ctx, "t", "running", redeq.ListOptions{})) }, `state "running"`},
			{"topic", func() error { return listErr(e.c.List(ctx, "a b", redeq.StateReady, redeq.ListOptions{})) }, "topic"},
			{"cursor garbage", func() error {
				return listErr(e.c.List(ctx, "t", redeq.StateScheduled, redeq.ListOptions{Cursor: "!!"}))
			}, "cursor"},
			{"cursor of another state", func() error {
				return listErr(e.c.List(ctx, "t", redeq.StateDead, redeq.ListOptions{Cursor: page.Next}))
			}, `state "scheduled"`},
			{"cursor of another topic", func() error {
				return listErr(e.c.List(ctx, "u", redeq.StateScheduled, redeq.ListOptions{Cursor: page.Next}))
			}, `topic "t"`},
			{"nil ctx", func() error { return listErr(e.c.List(nilCtx, "t", redeq.StateReady, redeq.ListOptions{})) }, "nil context"},
			{"topics nil ctx", func() error { _, err := e.c.Topics(nilCtx); return err }, "nil context"},
			{"pause topic", func() error { return e.c.Pause(ctx, "a{b") }, "topic"},
		}
		for _, tc := range cases {
			err := tc.call()
			require.ErrorIs(t, err, redeq.ErrInvalidArgument, tc.name)
			require.ErrorContains(t, err, tc.names, tc.name)
		}
		require.Equal(t, before, testutil.Dump(t, e.rdb, e.cfg.Prefix), "a refused call wrote something")
	})
}

func listErr(_ redeq.Page, err error) error { return err }

// TestTopics lists every used topic by name with its bucket count, pause
// flag and consumers.
func TestTopics(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		got, err := e.c.Topics(ctx)
		require.NoError(t, err)
		require.Empty(t, got)
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "b", ID: "1"}))
		wide := e.another(t, func(c *config.Config) { c.Concurrency = 8 })
		require.NoError(t, wide.Add(ctx, &redeq.Job{Topic: "a", ID: "1"}))
		require.NoError(t, e.c.Pause(ctx, "b"))
		startWith(t, e.another(t, nil), newListener("b", nil))
		testutil.Eventually(t, 5*time.Second, "consumer heartbeat", func() bool { return stats(t, e.c, "b").Consumers == 1 })
		got, err = e.c.Topics(ctx)
		require.NoError(t, err)
		require.Equal(t, []redeq.TopicInfo{
			{Name: "a", Buckets: 8},
			{Name: "b", Buckets: 1, Paused: true, Consumers: 1},
		}, got)
		require.True(t, slices.IsSortedFunc(got, func(x, y redeq.TopicInfo) int { return strings.Compare(x.Name, y.Name) }))
	})
}

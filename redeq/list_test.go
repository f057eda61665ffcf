package redeq_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/bucket"
	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/ready"
	"github.com/redeq-go/redeq/redeq"
)

// listFrom follows List's cursors from cur ("" for the first page) to the
// end, pages of limit jobs.
func listFrom(t *testing.T, c *redeq.Client, topic string, st redeq.State, limit int, cur string) []*redeq.Job {
	t.Helper()
	var all []*redeq.Job
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

// firstPage is the first page of limit jobs.
func firstPage(t *testing.T, c *redeq.Client, topic string, st redeq.State, limit int) redeq.Page {
	t.Helper()
	page, err := c.List(context.Background(), topic, st, redeq.ListOptions{Limit: limit})
	require.NoError(t, err)
	require.Len(t, page.Jobs, limit)
	require.NotEmpty(t, page.Next)
	return page
}

// listedOnce checks that each job of stayed shows exactly once in listed.
func listedOnce(t *testing.T, stayed map[string]bool, listed []*redeq.Job) {
	t.Helper()
	count := map[string]int{}
	for _, j := range listed {
		count[j.ID]++
	}
	var twice, skipped []string
	for id := range stayed {
		switch {
		case count[id] == 0:
			skipped = append(skipped, id)
		case count[id] > 1:
			twice = append(twice, id)
		}
	}
	slices.Sort(twice)
	slices.Sort(skipped)
	require.Empty(t, twice, "jobs that stayed were listed twice")
	require.Empty(t, skipped, "jobs that stayed were not listed")
}

// readyNow reads the ids of topic's ready lists, straight from Redis.
func readyNow(t *testing.T, e *env, topic string, buckets int) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for n := range buckets {
		got, err := e.rdb.LRange(context.Background(), keys.ForBucket(e.cfg.Prefix, topic, n).Ready(), 0, -1).Result()
		require.NoError(t, err)
		for _, id := range got {
			out[id] = true
		}
	}
	return out
}

// addReady adds n jobs named prefix000... to topic, due now, and moves
// them to the ready lists of its buckets.
func addReady(t *testing.T, e *env, c *redeq.Client, topic, prefix string, n, buckets int) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		require.NoError(t, c.Add(ctx, &redeq.Job{Topic: topic, ID: fmt.Sprintf("%s%03d", prefix, i)}))
	}
	// A job due in this very ms may not be due yet for the mover: poll.
	testutil.Eventually(t, 5*time.Second, "jobs ready", func() bool {
		for b := range buckets {
			_, err := bucket.Move(ctx, e.rdb, e.cfg.Prefix, topic, b, 1000)
			require.NoError(t, err)
		}
		return stats(t, c, topic).Scheduled == 0
	})
}

// take fetches at most n jobs of bucket b of topic for consumer cid and
// returns their in-flight members and ids.
func take(t *testing.T, e *env, topic string, b int, cid string, n int) (members, ids []string) {
	t.Helper()
	items, _, err := ready.Fetch(context.Background(), e.rdb, e.cfg.Prefix, topic, b, cid, n, true)
	require.NoError(t, err)
	for _, it := range items {
		members = append(members, it.Token+":"+it.ID)
		ids = append(ids, it.ID)
	}
	return members, ids
}

// giveBack returns consumer cid's deliveries members to the head of bucket
// b's ready list, as a shutdown does with the jobs it could not finish.
func giveBack(t *testing.T, e *env, topic string, b int, cid string, members []string) {
	t.Helper()
	for len(members) > 0 {
		chunk := members[:min(len(members), 500)]
		members = members[len(chunk):]
		_, err := ready.ReleaseMembers(context.Background(), e.rdb, e.cfg.Prefix, topic, b, cid, chunk)
		require.NoError(t, err)
	}
}

// TestListPagesAJobThatStaysOnce: across the pages of a List, a job that
// stays where it is from the first page to the last is listed exactly
// once, in every state and over several buckets, whatever happens between
// the pages at the ends of its list: jobs given back to the head of a
// ready list (as a shutdown does), taken from its head, pushed at its
// tail; scheduled jobs added before and after it (ties of due time
// included), moved out when due, deleted (the page's last job too); jobs
// parked and dead set trimmed; deliveries made and given back.
func TestListPagesAJobThatStaysOnce(t *testing.T) {
	testutil.FaultTier(t) // it runs for seconds
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		one := e.another(t, func(c *config.Config) { c.Concurrency = 1 })

		// A ready list of one bucket: page 1 ends at place 99.
		readyCase := func(t *testing.T, topic string, between func(held []string) (moved []string)) {
			addReady(t, e, one, topic, "r", 300, 1)
			held, _ := take(t, e, topic, 0, "c", 5)
			stayed := readyNow(t, e, topic, 1)
			page := firstPage(t, one, topic, redeq.StateReady, 100)
			for _, id := range between(held) {
				delete(stayed, id)
			}
			listedOnce(t, stayed, append(page.Jobs, listFrom(t, one, topic, redeq.StateReady, 100, page.Next)...))
		}
		t.Run("ReadyGiveBackAtHead", func(t *testing.T) {
			readyCase(t, "ready-giveback", func(held []string) []string {
				giveBack(t, e, "ready-giveback", 0, "c", held)
				return nil
			})
		})
		t.Run("ReadyManyTakenFromHead", func(t *testing.T) {
			readyCase(t, "ready-taken", func([]string) []string {
				_, ids := take(t, e, "ready-taken", 0, "c", 90)
				return ids
			})
		})
		t.Run("ReadyManyGivenBack", func(t *testing.T) {
			readyCase(t, "ready-churn", func(held []string) []string {
				// More jobs pushed at the head than a page holds, some of
				// them taken after page 1, and new jobs at the tail.
				members, ids := take(t, e, "ready-churn", 0, "c", 150)
				giveBack(t, e, "ready-churn", 0, "c", append(held, members...))
				addReady(t, e, one, "ready-churn", "n", 20, 1)
				return ids
			})
		})
		t.Run("ReadyAfterShutdown", func(t *testing.T) {
			const topic = "ready-shutdown"
			addReady(t, e, one, topic, "r", 200, 1)
			worker := e.another(t, func(c *config.Config) { c.Concurrency = 1; c.Workers = 1 })
			running, release := make(chan string, 16), make(chan struct{})
			l := newListener(topic, func(ctx context.Context, job *redeq.Job, _ *redeq.Channel) error {
				running <- job.ID
				<-ctx.Done()
				<-release // past the shutdown's grace: the job stays in flight
				return ctx.Err()
			})
			startWith(t, worker, l)
			var first string
			select {
			case first = <-running:
			case <-time.After(10 * time.Second):
				require.FailNow(t, "no job ran")
			}
			stayed := readyNow(t, e, topic, 1)
			page := firstPage(t, one, topic, redeq.StateReady, 100)
			sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			_ = worker.Shutdown(sctx)
			close(release) // canceled, it returns: its job goes back to the head
			testutil.Eventually(t, 5*time.Second, "the running job given back", func() bool {
				got, err := one.Get(ctx, topic, first)
				require.NoError(t, err)
				return got.State == redeq.StateReady
			})
			listedOnce(t, stayed, append(page.Jobs, listFrom(t, one, topic, redeq.StateReady, 100, page.Next)...))
		})
		t.Run("ReadyAcrossBuckets", func(t *testing.T) {
			const topic = "ready-buckets"
			const buckets = 4
			four := e.another(t, func(c *config.Config) { c.Concurrency = buckets })
			addReady(t, e, four, topic, "r", 400, buckets)
			held := make([][]string, buckets)
			for b := range buckets {
				held[b], _ = take(t, e, topic, b, "c", 3)
			}
			stayed := readyNow(t, e, topic, buckets)
			page := firstPage(t, four, topic, redeq.StateReady, 60)
			for b := range buckets {
				members, ids := take(t, e, topic, b, "c", 20)
				giveBack(t, e, topic, b, "c", append(held[b], members[:10]...))
				for _, id := range ids {
					delete(stayed, id)
				}
			}
			listedOnce(t, stayed, append(page.Jobs, listFrom(t, four, topic, redeq.StateReady, 60, page.Next)...))
		})

		t.Run("Scheduled", func(t *testing.T) {
			const topic = "scheduled"
			due := time.Now().Add(time.Hour).Truncate(time.Millisecond)
			// Ids whose byte order differs from a locale's collation.
			var all []string
			for i := range 150 {
				all = append(all, fmt.Sprintf("s-%03d", i), fmt.Sprintf("S%03d", i))
			}
			for i, id := range all {
				at := due // most share one due time: the page ends among ties
				if i%10 == 0 {
					at = due.Add(time.Duration(i) * time.Second)
				}
				require.NoError(t, one.Add(ctx, &redeq.Job{Topic: topic, ID: id, RunAt: at}))
			}
			for i := range 10 { // due now: the mover takes them from the head
				require.NoError(t, one.Add(ctx, &redeq.Job{Topic: topic, ID: fmt.Sprintf("now%d", i)}))
			}
			stayed := map[string]bool{}
			for _, id := range all {
				stayed[id] = true
			}
			page := firstPage(t, one, topic, redeq.StateScheduled, 100)
			last := page.Jobs[len(page.Jobs)-1].ID
			require.Equal(t, due, page.Jobs[len(page.Jobs)-1].RunAt, "the page ends among ties")
			gone := []string{last, page.Jobs[50].ID, all[len(all)-1]}
			for _, id := range gone {
				_, err := one.Delete(ctx, topic, id)
				require.NoError(t, err)
				delete(stayed, id)
			}
			_, err := bucket.Move(ctx, e.rdb, e.cfg.Prefix, topic, 0, 1000)
			require.NoError(t, err)
			for i := range 20 { // before, among and after the page's end
				require.NoError(t, one.Add(ctx, &redeq.Job{Topic: topic, ID: fmt.Sprintf("early%d", i), RunAt: due.Add(-time.Minute)}))
				require.NoError(t, one.Add(ctx, &redeq.Job{Topic: topic, ID: fmt.Sprintf("tie%d", i), RunAt: due}))
				require.NoError(t, one.Add(ctx, &redeq.Job{Topic: topic, ID: fmt.Sprintf("late%d", i), RunAt: due.Add(time.Hour)}))
			}
			listedOnce(t, stayed, append(page.Jobs, listFrom(t, one, topic, redeq.StateScheduled, 100, page.Next)...))
		})

		t.Run("ScheduledAcrossBuckets", func(t *testing.T) {
			const topic = "scheduled-buckets"
			four := e.another(t, func(c *config.Config) { c.Concurrency = 4 })
			due := time.Now().Add(time.Hour).Truncate(time.Millisecond)
			stayed := map[string]bool{}
			for i := range 200 {
				id := fmt.Sprintf("s%03d", i)
				require.NoError(t, four.Add(ctx, &redeq.Job{Topic: topic, ID: id, RunAt: due.Add(time.Duration(i%7) * time.Second)}))
				stayed[id] = true
			}
			page := firstPage(t, four, topic, redeq.StateScheduled, 70)
			for _, id := range []string{page.Jobs[69].ID, page.Jobs[3].ID, "s150", "s151"} {
				_, err := four.Delete(ctx, topic, id)
				require.NoError(t, err)
				delete(stayed, id)
			}
			for i := range 40 {
				require.NoError(t, four.Add(ctx, &redeq.Job{Topic: topic, ID: fmt.Sprintf("n%03d", i), RunAt: due.Add(time.Duration(i%9-1) * time.Second)}))
			}
			listedOnce(t, stayed, append(page.Jobs, listFrom(t, four, topic, redeq.StateScheduled, 70, page.Next)...))
		})

		t.Run("UnAckAndDead", func(t *testing.T) {
			const topic = "parked"
			worker := e.another(t, func(c *config.Config) { c.Concurrency = 1; c.DeadRetention = 150 })
			startWith(t, worker, newListener(topic, func(_ context.Context, job *redeq.Job, _ *redeq.Channel) error {
				if strings.HasPrefix(job.ID, "d") {
					return redeq.SkipRetry(errors.New("bad " + job.ID))
				}
				return nil // neither ack nor rejoin: parked
			}))
			for i := range 150 {
				require.NoError(t, one.Add(ctx, &redeq.Job{Topic: topic, ID: fmt.Sprintf("u%03d", i)}))
				require.NoError(t, one.Add(ctx, &redeq.Job{Topic: topic, ID: fmt.Sprintf("d%03d", i)}))
			}
			testutil.Eventually(t, 20*time.Second, "parked and dead", func() bool {
				st := stats(t, one, topic)
				return st.UnAck == 150 && st.Dead == 150
			})
			unackStayed, deadStayed := map[string]bool{}, map[string]bool{}
			for i := range 150 {
				unackStayed[fmt.Sprintf("u%03d", i)] = true
				deadStayed[fmt.Sprintf("d%03d", i)] = true
			}
			unackPage := firstPage(t, one, topic, redeq.StateUnAck, 50)
			deadPage := firstPage(t, one, topic, redeq.StateDead, 50)

			// Un_acked jobs leave (one of them the page's last), more are
			// parked; 60 more die, so the oldest 60 dead are trimmed.
			for _, id := range []string{unackPage.Jobs[10].ID, unackPage.Jobs[49].ID, "u120"} {
				_, err := one.ProcessUnAck(ctx, topic, id)
				require.NoError(t, err)
				delete(unackStayed, id)
			}
			for i := range 60 {
				require.NoError(t, one.Add(ctx, &redeq.Job{Topic: topic, ID: fmt.Sprintf("d2-%03d", i)}))
				require.NoError(t, one.Add(ctx, &redeq.Job{Topic: topic, ID: fmt.Sprintf("u2-%03d", i)}))
			}
			testutil.Eventually(t, 20*time.Second, "more parked and dead", func() bool {
				for _, id := range []string{"d2-059", "u2-059"} {
					if j, err := one.Get(ctx, topic, id); err != nil || (j.State != redeq.StateDead && j.State != redeq.StateUnAck) {
						return false
					}
				}
				return stats(t, one, topic).UnAck == 147+60
			})
			for id := range deadStayed {
				if _, err := one.Get(ctx, topic, id); errors.Is(err, redeq.ErrJobNotFound) {
					delete(deadStayed, id) // trimmed
				}
			}
			require.Len(t, deadStayed, 90)
			listedOnce(t, unackStayed, append(unackPage.Jobs, listFrom(t, one, topic, redeq.StateUnAck, 50, unackPage.Next)...))
			listedOnce(t, deadStayed, append(deadPage.Jobs, listFrom(t, one, topic, redeq.StateDead, 50, deadPage.Next)...))
		})

		t.Run("InFlight", func(t *testing.T) {
			const topic = "inflight"
			addReady(t, e, one, topic, "f", 200, 1)
			for _, cid := range []string{"c1", "c2", "c3"} {
				require.NoError(t, e.rdb.ZAdd(ctx, keys.ForTopic(e.cfg.Prefix, topic).Consumers(), redisZ(cid)).Err())
			}
			members := map[string][]string{}
			stayed := map[string]bool{}
			for _, cid := range []string{"c1", "c2", "c3"} {
				ms, ids := take(t, e, topic, 0, cid, 40)
				require.Len(t, ids, 40)
				members[cid] = ms
				for _, id := range ids {
					stayed[id] = true
				}
			}
			page := firstPage(t, one, topic, redeq.StateInFlight, 50) // c1's, then 10 of c2's
			require.Equal(t, "c2", page.Jobs[len(page.Jobs)-1].Consumer)
			gone := func(cid string, ms ...string) {
				giveBack(t, e, topic, 0, cid, ms)
				for _, m := range ms {
					delete(stayed, m[strings.IndexByte(m, ':')+1:])
				}
			}
			// c1 gives everything back; c2 the page's last delivery and
			// some after it; c2 and c3 take more.
			last := page.Jobs[len(page.Jobs)-1].ID
			var lastMember string
			for _, m := range members["c2"] {
				if strings.HasSuffix(m, ":"+last) {
					lastMember = m
				}
			}
			require.NotEmpty(t, lastMember)
			gone("c1", members["c1"]...)
			gone("c2", lastMember, members["c2"][30], members["c2"][31])
			take(t, e, topic, 0, "c2", 20)
			take(t, e, topic, 0, "c3", 20)
			listedOnce(t, stayed, append(page.Jobs, listFrom(t, one, topic, redeq.StateInFlight, 50, page.Next)...))
		})
	})
}

// TestListJobsHaveGetsFields: every job of every state that List gives has
// each field Get gives it (State, Attempt, Recoveries, LastError, Reason,
// Consumer, RunAt, CreatedAt, body, headers, retry settings); RunAt of a
// ready job is when it fell due, of an un_acked or dead job when it was
// parked.
func TestListJobsHaveGetsFields(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		const topic = "fields"
		fail := errors.New("boom")
		worker := e.another(t, nil)
		startWith(t, worker, newListener(topic, func(_ context.Context, job *redeq.Job, _ *redeq.Channel) error {
			switch {
			case strings.HasPrefix(job.ID, "d"):
				return redeq.SkipRetry(fmt.Errorf("bad %s", job.ID))
			case strings.HasPrefix(job.ID, "u") && job.Attempt > 0:
				return nil // parked, with the error of its first delivery
			}
			return fmt.Errorf("%w %s", fail, job.ID)
		}))
		// One failure each, then: retried in an hour (s, r, f), parked (u),
		// dead (d).
		for _, id := range []string{"s", "r", "f", "u", "d"} {
			j := &redeq.Job{Topic: topic, ID: id, Body: []byte("body " + id), Headers: map[string]string{"tenant": id},
				MaxRetries: 5, RetryIntervals: []time.Duration{time.Hour}}
			if id == "u" {
				j.RetryIntervals = []time.Duration{time.Millisecond}
			}
			require.NoError(t, e.c.Add(ctx, j))
		}
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: "p", Delay: time.Hour, Body: []byte("plain")}))
		testutil.Eventually(t, 20*time.Second, "failed once, parked, dead", func() bool {
			st := stats(t, e.c, topic)
			return st.Scheduled == 4 && st.UnAck == 1 && st.Dead == 1
		})
		require.NoError(t, worker.Shutdown(ctx))

		// f due now and taken by consumer c: in flight; then r due now:
		// waiting in the ready list.
		dueNow := func(id string) int {
			require.NoError(t, e.c.Reschedule(ctx, topic, id, time.Now().Add(-time.Second)))
			b := bucket.Of(id, e.cfg.Concurrency)
			moved, err := bucket.Move(ctx, e.rdb, e.cfg.Prefix, topic, b, 100)
			require.NoError(t, err)
			require.Equal(t, 1, moved.Moved)
			return b
		}
		require.NoError(t, e.rdb.ZAdd(ctx, keys.ForTopic(e.cfg.Prefix, topic).Consumers(), redisZ("c")).Err())
		_, took := take(t, e, topic, dueNow("f"), "c", 10)
		require.Equal(t, []string{"f"}, took)
		dueNow("r")

		want := map[redeq.State][]string{
			redeq.StateScheduled: {"p", "s"},
			redeq.StateReady:     {"r"},
			redeq.StateInFlight:  {"f"},
			redeq.StateUnAck:     {"u"},
			redeq.StateDead:      {"d"},
		}
		for st, w := range want {
			listed := listFrom(t, e.c, topic, st, 10, "")
			var got []string
			for _, j := range listed {
				got = append(got, j.ID)
				stored, err := e.c.Get(ctx, topic, j.ID)
				require.NoError(t, err)
				if st == redeq.StateUnAck || st == redeq.StateDead || st == redeq.StateInFlight {
					require.False(t, j.RunAt.IsZero(), "%s: when it was parked or fetched", j.ID)
				}
				if st == redeq.StateInFlight {
					stored.RunAt = j.RunAt // Get leaves it zero; List gives the fetch time
				}
				if st == redeq.StateReady {
					require.WithinDuration(t, time.Now(), j.RunAt, time.Minute, "%s: when it fell due", j.ID)
				}
				require.Equal(t, stored, j, "%s: List and Get differ", j.ID)
				if j.ID != "p" {
					require.NotEmpty(t, j.LastError, j.ID)
				}
			}
			slices.Sort(got)
			require.Equal(t, w, got, "%s", st)
		}
		dead := listFrom(t, e.c, topic, redeq.StateDead, 10, "")
		require.Contains(t, dead[0].LastError, "bad d")
		require.Contains(t, dead[0].Reason, "bad d")
	})
}

// TestListRefusesAForgedReadyPlace: a ready cursor whose place is not a
// whole number that the scripts count exactly (float64: to 2^53) is
// ErrInvalidArgument, not a page read from a rounded place.
func TestListRefusesAForgedReadyPlace(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "a"}))
		for _, place := range []string{"99999999999999999999", "9007199254740993", "1.5", "x"} {
			cur := base64.RawURLEncoding.EncodeToString([]byte(strings.Join([]string{"2", "t", "ready", "0", "", place, ""}, "\n")))
			_, err := e.c.List(ctx, "t", redeq.StateReady, redeq.ListOptions{Cursor: cur})
			require.ErrorIs(t, err, redeq.ErrInvalidArgument, place)
		}
		cur := base64.RawURLEncoding.EncodeToString([]byte(strings.Join([]string{"2", "t", "ready", "0", "", "-5", ""}, "\n")))
		_, err := e.c.List(ctx, "t", redeq.StateReady, redeq.ListOptions{Cursor: cur})
		require.NoError(t, err, "a place below 0 is one a give-back makes")
	})
}

// TestListDueOrderMergesTheBuckets: with DueOrder, the pages of a topic's
// scheduled jobs list them in due order across its buckets (ties by id),
// each once, whatever the page size; a job added meanwhile before the
// cursor is not listed, one after it is; a DueOrder cursor is refused by
// a listing without DueOrder.
func TestListDueOrderMergesTheBuckets(t *testing.T) {
	t.Parallel()
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			cfg := testutil.Config(t)
			cfg.Concurrency = 8
			e := setup(t, be, cfg)
			ctx := context.Background()
			base := time.Now().Add(time.Hour).Truncate(time.Millisecond)
			var jobs []*redeq.Job
			type key struct {
				at time.Time
				id string
			}
			var want []key
			for i := range 300 {
				at := base.Add(time.Duration(i%97) * time.Second) // ties across buckets
				id := fmt.Sprintf("j%03d", (i*37)%300)
				jobs = append(jobs, &redeq.Job{Topic: "t", ID: id, RunAt: at})
				want = append(want, key{at, id})
			}
			require.NoError(t, e.c.AddBatch(ctx, jobs))
			slices.SortFunc(want, func(a, b key) int {
				if c := a.at.Compare(b.at); c != 0 {
					return c
				}
				return strings.Compare(a.id, b.id)
			})
			var ids []string
			for _, k := range want {
				ids = append(ids, k.id)
			}
			for _, limit := range []int{7, 100, 1000} {
				var got []string
				cur := ""
				for pages := 0; ; pages++ {
					require.Less(t, pages, 1000)
					page, err := e.c.List(ctx, "t", redeq.StateScheduled, redeq.ListOptions{Limit: limit, Cursor: cur, DueOrder: true})
					require.NoError(t, err)
					require.LessOrEqual(t, len(page.Jobs), limit)
					for _, j := range page.Jobs {
						got = append(got, j.ID)
					}
					if page.Next == "" {
						break
					}
					cur = page.Next
				}
				require.Equal(t, ids, got, "limit %d", limit)
			}

			page, err := e.c.List(ctx, "t", redeq.StateScheduled, redeq.ListOptions{Limit: 10, DueOrder: true})
			require.NoError(t, err)
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "early", RunAt: base.Add(-time.Minute)}))
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "late", RunAt: base.Add(time.Hour)}))
			var rest []string
			for cur := page.Next; cur != ""; {
				p, err := e.c.List(ctx, "t", redeq.StateScheduled, redeq.ListOptions{Limit: 50, Cursor: cur, DueOrder: true})
				require.NoError(t, err)
				for _, j := range p.Jobs {
					rest = append(rest, j.ID)
				}
				cur = p.Next
			}
			require.NotContains(t, rest, "early", "before the cursor")
			require.Equal(t, "late", rest[len(rest)-1])

			_, err = e.c.List(ctx, "t", redeq.StateScheduled, redeq.ListOptions{Cursor: page.Next})
			require.ErrorIs(t, err, redeq.ErrInvalidArgument)
			_, err = e.c.List(ctx, "t", redeq.StateDead, redeq.ListOptions{Cursor: page.Next, DueOrder: true})
			require.ErrorIs(t, err, redeq.ErrInvalidArgument)
		})
	}
}

// TestListGivesGetsFieldsToRetriedReadyAndBroadcastJobs: a job waiting in
// the ready list after a failed attempt, and a scheduled broadcast job,
// come from List with the fields Get gives them: LastError, Attempt,
// Broadcast, body, headers and retry settings.
func TestListGivesGetsFieldsToRetriedReadyAndBroadcastJobs(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		const topic = "fields"
		failed := make(chan struct{}, 1)
		l := newListener(topic, func(_ context.Context, job *redeq.Job, _ *redeq.Channel) error {
			select {
			case failed <- struct{}{}:
			default:
			}
			return errors.New("first try failed")
		})
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: "r", Body: []byte("body"), Headers: map[string]string{"k": "v"},
			MaxRetries: 3, RetryIntervals: []time.Duration{time.Second}}))
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: "b", Body: []byte("bb"), Broadcast: true, Delay: time.Hour}))
		startWith(t, e.c, l)
		select {
		case <-failed:
		case <-time.After(10 * time.Second):
			require.FailNow(t, "no delivery")
		}
		require.NoError(t, e.c.Pause(ctx, topic))
		testutil.Eventually(t, 10*time.Second, "the retry ready", func() bool {
			j, err := e.c.Get(ctx, topic, "r")
			require.NoError(t, err)
			return j.State == redeq.StateReady
		})
		for _, c := range []struct {
			st redeq.State
			id string
		}{{redeq.StateReady, "r"}, {redeq.StateScheduled, "b"}} {
			p, err := e.c.List(ctx, topic, c.st, redeq.ListOptions{})
			require.NoError(t, err)
			require.Len(t, p.Jobs, 1, c.st)
			g, err := e.c.Get(ctx, topic, c.id)
			require.NoError(t, err)
			lj := p.Jobs[0]
			require.Equal(t, g.ID, lj.ID)
			require.Equal(t, g.LastError, lj.LastError, "last error")
			require.Equal(t, g.Attempt, lj.Attempt, "attempt")
			require.Equal(t, g.Broadcast, lj.Broadcast, "broadcast")
			require.Equal(t, g.Body, lj.Body, "body")
			require.Equal(t, g.Headers, lj.Headers, "headers")
			require.Equal(t, g.MaxRetries, lj.MaxRetries, "max retries")
			require.Equal(t, g.RetryIntervals, lj.RetryIntervals, "intervals")
			require.True(t, g.CreatedAt.Equal(lj.CreatedAt), "created")
			require.Equal(t, g.State, lj.State, "state")
		}
		g, err := e.c.Get(ctx, topic, "r")
		require.NoError(t, err)
		require.Equal(t, "first try failed", g.LastError)
	})
}

// TestListPagesTiedParkedJobsOnce: un_acked and dead jobs parked in the
// same millisecond (one batch of outcomes) are each listed once across
// the pages of a List, also when the page's last job leaves between the
// pages, or jobs before it do.
func TestListPagesTiedParkedJobsOnce(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		for _, st := range []redeq.State{redeq.StateUnAck, redeq.StateDead} {
			for _, leave := range []string{"last", "before", "none"} {
				t.Run(string(st)+"/"+leave, func(t *testing.T) {
					topic := "tied-" + string(st) + "-" + leave
					one := e.another(t, func(c *config.Config) { c.Concurrency = 1 })
					var batch []*redeq.Job
					for i := range 200 {
						batch = append(batch, &redeq.Job{Topic: topic, ID: fmt.Sprintf("p%03d", i)})
					}
					require.NoError(t, one.AddBatch(ctx, batch))
					worker := e.another(t, func(c *config.Config) { c.Concurrency = 1; c.Workers = 200 })
					startWith(t, worker, newListener(topic, func(_ context.Context, job *redeq.Job, _ *redeq.Channel) error {
						if st == redeq.StateDead {
							return redeq.SkipRetry(errors.New("bad"))
						}
						return nil
					}))
					testutil.Eventually(t, 20*time.Second, "parked", func() bool {
						s := stats(t, one, topic)
						return s.UnAck+s.Dead == 200
					})
					require.NoError(t, worker.Shutdown(ctx))
					stayed := map[string]bool{}
					for i := range 200 {
						stayed[fmt.Sprintf("p%03d", i)] = true
					}
					page := firstPage(t, one, topic, st, 50)
					lastAt := page.Jobs[49].RunAt
					ties := 0
					for _, j := range listFrom(t, one, topic, st, 1000, "") {
						if j.RunAt.Equal(lastAt) {
							ties++
						}
					}
					t.Logf("%d jobs share the parked time of page 1's last", ties)
					var gone []string
					switch leave {
					case "last":
						gone = []string{page.Jobs[49].ID}
					case "before":
						gone = []string{page.Jobs[49].ID, page.Jobs[10].ID, page.Jobs[48].ID}
					}
					for _, id := range gone {
						_, err := one.Delete(ctx, topic, id)
						require.NoError(t, err)
						delete(stayed, id)
					}
					rest := listFrom(t, one, topic, st, 50, page.Next)
					var ids []string
					for _, j := range rest[:min(5, len(rest))] {
						ids = append(ids, j.ID+"@"+j.RunAt.Format("15:04:05.000"))
					}
					t.Logf("page 1 ends at %s@%s; page 2 starts %s", page.Jobs[49].ID, lastAt.Format("15:04:05.000"), strings.Join(ids, " "))
					listedOnce(t, stayed, append(page.Jobs, rest...))
				})
			}
		}
	})
}

// TestListPagesInFlightOnceWhenAConsumerLeaves: across the pages of a List
// of in-flight jobs, a job that stays in flight with the same consumer is
// listed once, also when the consumer whose set the last page ended in
// shuts down, or one before it does, between the pages.
func TestListPagesInFlightOnceWhenAConsumerLeaves(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		for _, leaving := range []int{0, 1} { // before the cursor's consumer, or that one
			t.Run(fmt.Sprint("leaving", leaving), func(t *testing.T) {
				topic := fmt.Sprint("inflight-leave-", leaving)
				one := e.another(t, func(c *config.Config) { c.Concurrency = 1 })
				clients := map[string]*redeq.Client{}
				for range 3 {
					c := e.another(t, func(c *config.Config) { c.Concurrency = 1; c.ShutdownTimeout = 100 * time.Millisecond })
					l := newListener(topic, func(ctx context.Context, _ *redeq.Job, _ *redeq.Channel) error {
						<-ctx.Done()
						return ctx.Err()
					})
					l.workers = 20
					startWith(t, c, l)
					clients[c.ConsumerID()] = c
				}
				var batch []*redeq.Job
				for i := range 60 {
					batch = append(batch, &redeq.Job{Topic: topic, ID: fmt.Sprintf("f%03d", i)})
				}
				require.NoError(t, one.AddBatch(ctx, batch))
				testutil.Eventually(t, 20*time.Second, "60 in flight", func() bool { return stats(t, one, topic).InFlight == 60 })
				holdersAt := func() map[string]string {
					out := map[string]string{}
					for _, j := range listFrom(t, one, topic, redeq.StateInFlight, 1000, "") {
						out[j.ID] = j.Consumer
					}
					return out
				}
				before := holdersAt()
				page := firstPage(t, one, topic, redeq.StateInFlight, 30)
				var order []string
				for _, j := range page.Jobs {
					if len(order) == 0 || order[len(order)-1] != j.Consumer {
						order = append(order, j.Consumer)
					}
				}
				require.Len(t, order, 2, "page 1 ends in the second consumer's set")
				gone := order[leaving]
				sctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
				_ = clients[gone].Shutdown(sctx)
				cancel()
				rest := listFrom(t, one, topic, redeq.StateInFlight, 30, page.Next)
				after := holdersAt()
				stayed := map[string]bool{}
				for id, holder := range before {
					if holder != gone && after[id] == holder {
						stayed[id] = true
					}
				}
				require.NotEmpty(t, stayed)
				t.Logf("%d jobs stayed; consumer %d of the page left", len(stayed), leaving)
				listedOnce(t, stayed, append(page.Jobs, rest...))
			})
		}
	})
}

// TestListNoBodyLeavesBodiesInRedis: a page with NoBody gives each job
// every field a full page gives but its Body (empty) and Headers (none),
// in every state, in due order too; Select, which filters on those
// fields, finds the same jobs as with bodies.
func TestListNoBodyLeavesBodiesInRedis(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		big := bytes.Repeat([]byte("x"), 64<<10)
		for i := range 5 {
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprintf("j%d", i), Body: big, Delay: time.Duration(i+1) * time.Hour,
				Headers: map[string]string{"tenant": "7"}, MaxRetries: 4, RetryIntervals: []time.Duration{time.Minute}}))
		}
		for _, due := range []bool{false, true} {
			full, err := e.c.List(ctx, "t", redeq.StateScheduled, redeq.ListOptions{DueOrder: due})
			require.NoError(t, err)
			heads, err := e.c.List(ctx, "t", redeq.StateScheduled, redeq.ListOptions{DueOrder: due, NoBody: true})
			require.NoError(t, err)
			require.Len(t, full.Jobs, 5)
			require.Len(t, heads.Jobs, 5)
			for i, j := range full.Jobs {
				h := heads.Jobs[i]
				require.Equal(t, big, j.Body)
				require.Empty(t, h.Body)
				require.Nil(t, h.Headers)
				want := *j
				want.Body, want.Headers = h.Body, nil
				require.Equal(t, want, *h)
			}
		}
		ids, err := e.c.Select(ctx, "t", redeq.StateScheduled, redeq.Filter{DueBefore: time.Now().Add(150 * time.Minute)}, 0)
		require.NoError(t, err)
		require.ElementsMatch(t, []string{"j0", "j1"}, ids)
	})
}

package redeq_test

import (
	"context"
	"errors"
	"fmt"
	rand "math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/bucket"
	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// badJobs are jobs Add must refuse, each with a word its error must name.
func badJobs() []struct {
	name string
	job  *redeq.Job
	want string
} {
	many := map[string]string{}
	for i := range config.MaxHeaders + 1 {
		many[fmt.Sprint("k", i)] = "v"
	}
	long := []time.Duration{}
	for range config.MaxIntervals + 1 {
		long = append(long, time.Second)
	}
	return []struct {
		name string
		job  *redeq.Job
		want string
	}{
		{"nil job", nil, "nil job"},
		{"empty topic", &redeq.Job{ID: "x"}, "topic is empty"},
		{"topic with a brace", &redeq.Job{Topic: "a{b}", ID: "x"}, "topic"},
		{"topic with a space", &redeq.Job{Topic: "a b", ID: "x"}, "topic"},
		{"topic not UTF-8", &redeq.Job{Topic: "a\xff", ID: "x"}, "topic"},
		{"id with a newline", &redeq.Job{Topic: "t", ID: "a\nb"}, "id"},
		{"id with the broadcast mark", &redeq.Job{Topic: "t", ID: "\x01x"}, "id"},
		{"id too long", &redeq.Job{Topic: "t", ID: strings.Repeat("i", config.MaxName+1)}, "id"},
		{"negative delay", &redeq.Job{Topic: "t", ID: "x", Delay: -time.Millisecond}, "Delay"},
		{"RunAt past the year 9999", &redeq.Job{Topic: "t", ID: "x", RunAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}, "RunAt"},
		{"body too large", &redeq.Job{Topic: "t", ID: "x", Body: make([]byte, 17)}, "MaxBodyBytes"},
		{"too many headers", &redeq.Job{Topic: "t", ID: "x", Headers: many}, "headers"},
		{"headers too large", &redeq.Job{Topic: "t", ID: "x", Headers: map[string]string{"k": strings.Repeat("v", config.MaxHeaderBytes)}}, "headers"},
		{"empty header key", &redeq.Job{Topic: "t", ID: "x", Headers: map[string]string{"": "v"}}, "empty key"},
		{"header key with a newline", &redeq.Job{Topic: "t", ID: "x", Headers: map[string]string{"a\nb": "v"}}, "control"},
		{"MaxRetries below -1", &redeq.Job{Topic: "t", ID: "x", MaxRetries: -2}, "MaxRetries"},
		{"MaxRetries too large", &redeq.Job{Topic: "t", ID: "x", MaxRetries: config.MaxRetriesLimit + 1}, "MaxRetries"},
		{"empty RetryIntervals", &redeq.Job{Topic: "t", ID: "x", RetryIntervals: []time.Duration{}}, "RetryIntervals"},
		{"zero interval", &redeq.Job{Topic: "t", ID: "x", RetryIntervals: []time.Duration{0}}, "RetryIntervals"},
		{"interval over a year", &redeq.Job{Topic: "t", ID: "x", RetryIntervals: []time.Duration{config.MaxRetryInterval + time.Millisecond}}, "RetryIntervals"},
		{"too many intervals", &redeq.Job{Topic: "t", ID: "x", RetryIntervals: long}, "RetryIntervals"},
	}
}

// TestAddRejectsBadInputWritingNothing: Add, Put and AddBatch refuse bad
// jobs with ErrInvalidJob and an error naming what is wrong, and write
// nothing for them (no job, no topic); AddBatch stores the valid jobs
// and reports the invalid ones, each at its place.
func TestAddRejectsBadInputWritingNothing(t *testing.T) {
	t.Parallel()
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			cfg := testutil.Config(t)
			cfg.MaxBodyBytes = 16
			e := setup(t, be, cfg)
			ctx := context.Background()
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "there", Delay: time.Hour}))
			before := testutil.Dump(t, e.rdb, cfg.Prefix)
			for _, tc := range badJobs() {
				err := e.c.Add(ctx, tc.job)
				require.ErrorIs(t, err, redeq.ErrInvalidJob, tc.name)
				require.Contains(t, err.Error(), tc.want, tc.name)
				err = e.c.Put(ctx, tc.job)
				require.ErrorIs(t, err, redeq.ErrInvalidJob, tc.name)
				require.Contains(t, err.Error(), tc.want, tc.name)
				require.Equal(t, before, testutil.Dump(t, e.rdb, cfg.Prefix), "%s: a refused job wrote something", tc.name)
			}

			// One batch: valid jobs between the bad ones, of another topic too.
			var batch []*redeq.Job
			var bad []int
			for i, tc := range badJobs() {
				batch = append(batch, &redeq.Job{Topic: "t", ID: fmt.Sprint("ok", i), Body: []byte("b"), Delay: time.Hour})
				j := tc.job
				if j != nil && j.Topic == "t" {
					c := *j
					c.Topic = "other" // a topic that only bad jobs name
					j = &c
				}
				bad = append(bad, len(batch))
				batch = append(batch, j)
			}
			err := e.c.AddBatch(ctx, batch)
			var be *redeq.BatchError
			require.ErrorAs(t, err, &be)
			require.Len(t, be.Errs, len(batch))
			tcs := badJobs()
			for k, i := range bad {
				require.ErrorIs(t, be.Errs[i], redeq.ErrInvalidJob, tcs[k].name)
				require.Contains(t, be.Errs[i].Error(), tcs[k].want, tcs[k].name)
			}
			for i, j := range batch {
				if i%2 == 1 {
					continue
				}
				require.NoError(t, be.Errs[i], j.ID)
				got, err := e.c.Get(ctx, "t", j.ID)
				require.NoError(t, err, j.ID)
				require.Equal(t, "b", string(got.Body))
			}
			topics, err := e.c.Topics(ctx)
			require.NoError(t, err)
			for _, ti := range topics {
				require.NotEqual(t, "other", ti.Name, "a topic named only by refused jobs was recorded")
			}
		})
	}
}

// TestAddBatchAcrossBuckets: an AddBatch over 16 buckets (on a cluster,
// over every master), with ids repeated in the batch, ids stored before,
// and buckets that fill up: each job's answer is that of adding the jobs
// one by one, and each job added is stored with its own body.
func TestAddBatchAcrossBuckets(t *testing.T) {
	t.Parallel()
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			cfg := testutil.Config(t)
			cfg.Concurrency = 16
			cfg.MaxPool = 16 * 6 // 6 per bucket
			e := setup(t, be, cfg)
			ctx := context.Background()
			limit := e.cfg.BucketLimit()
			require.Equal(t, 6, limit)
			rng := rand.New(rand.NewPCG(1, 2))
			count := map[int]int{}
			have := map[string]string{}
			add := func(j *redeq.Job) error { // the model
				b := bucket.Of(j.ID, 16)
				switch {
				case have[j.ID] != "":
					return redeq.ErrJobExists
				case count[b] >= limit:
					return redeq.ErrPoolFull
				}
				count[b]++
				have[j.ID] = string(j.Body)
				return nil
			}
			seq := 0
			mk := func() *redeq.Job {
				seq++
				return &redeq.Job{Topic: "t", ID: fmt.Sprint("id", rng.IntN(150)), Body: []byte(fmt.Sprint("body", seq)),
					Delay: time.Hour, Broadcast: rng.IntN(4) == 0}
			}
			for range 20 {
				j := mk()
				want := add(j)
				err := e.c.Add(ctx, j)
				if want == nil {
					require.NoError(t, err, j.ID)
				} else {
					require.ErrorIs(t, err, want, j.ID)
				}
			}
			for round := range 3 {
				var batch []*redeq.Job
				var want []error
				for range 200 {
					j := mk()
					batch = append(batch, j)
					want = append(want, add(j))
				}
				err := e.c.AddBatch(ctx, batch)
				var be *redeq.BatchError
				require.ErrorAs(t, err, &be)
				for i, j := range batch {
					if want[i] == nil {
						require.NoError(t, be.Errs[i], "round %d: job %d (%s, bucket %d)", round, i, j.ID, bucket.Of(j.ID, 16))
						continue
					}
					require.ErrorIs(t, be.Errs[i], want[i], "round %d: job %d (%s, bucket %d)", round, i, j.ID, bucket.Of(j.ID, 16))
				}
			}
			st := stats(t, e.c, "t")
			require.EqualValues(t, len(have), st.Pool)
			for id, body := range have {
				got, err := e.c.Get(ctx, "t", id)
				require.NoError(t, err, id)
				require.Equal(t, body, string(got.Body), id)
			}
		})
	}
}

// TestAddWakesTheMover: with a scan only every 30 minutes, a job due soon that
// becomes its bucket's earliest (added alone, in a batch behind later
// jobs, as a broadcast, or by Put) still runs: the Add woke the mover,
// which slept until a job due in an hour.
func TestAddWakesTheMover(t *testing.T) {
	t.Parallel()
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			cfg := testutil.Config(t)
			cfg.ScanInterval, cfg.LockExpiry = 30*time.Minute, time.Hour
			cfg.AutoAck = true
			e := setup(t, be, cfg)
			ctx := context.Background()
			ran := make(chan string, 100)
			l := redeq.ListenerFunc("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
				ran <- job.ID
				return nil
			})
			require.NoError(t, e.c.Register(l))
			require.NoError(t, e.c.Start(ctx))
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "late", Delay: time.Hour}))
			wait := func(id string) {
				t.Helper()
				select {
				case got := <-ran:
					require.Equal(t, id, got)
				case <-time.After(20 * time.Second):
					t.Fatalf("%s stranded: the mover was not woken", id)
				}
			}
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "soon", Delay: 50 * time.Millisecond}))
			wait("soon")
			require.NoError(t, e.c.AddBatch(ctx, []*redeq.Job{
				{Topic: "t", ID: "b1", Delay: 2 * time.Hour}, {Topic: "t", ID: "b2", Delay: 50 * time.Millisecond},
				{Topic: "t", ID: "b3", Delay: 3 * time.Hour},
			}))
			wait("b2")
			require.NoError(t, e.c.Put(ctx, &redeq.Job{Topic: "t", ID: "p", Delay: 50 * time.Millisecond}))
			wait("p")
			// A job due in the past, by RunAt.
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "past", RunAt: time.Now().Add(-time.Hour)}))
			wait("past")
		})
	}
}

// TestAddKeepsJobAsGiven: a job added (alone, in a batch, or by Put) reads
// back as given: body, headers, retry settings and broadcast flag, with
// bytes the envelope uses itself ("|", newlines, digits and colons).
func TestAddKeepsJobAsGiven(t *testing.T) {
	t.Parallel()
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			e := setup(t, be, testutil.Config(t))
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(5, 6))
			piece := func() string {
				parts := []string{"|", "\n", "1|0|0|0|||\n", "3:", "12:ab", ":", "\x00", "é", "\xff", "x", ""}
				var b strings.Builder
				for range rng.IntN(6) {
					b.WriteString(parts[rng.IntN(len(parts))])
				}
				return b.String()
			}
			mk := func(i int) *redeq.Job {
				j := &redeq.Job{Topic: "t", ID: fmt.Sprint("j", i), Body: []byte(piece()), Delay: time.Hour, Broadcast: rng.IntN(3) == 0}
				if rng.IntN(2) == 0 {
					j.Headers = map[string]string{}
					for range 1 + rng.IntN(5) {
						k := piece()
						if k == "" || strings.ContainsAny(k, "\n\x00") {
							k = "k" + fmt.Sprint(rng.IntN(100))
						}
						j.Headers[k] = piece()
					}
				}
				if rng.IntN(2) == 0 {
					j.MaxRetries = rng.IntN(5) - 1
					j.RetryIntervals = []time.Duration{time.Millisecond, 1500 * time.Microsecond, config.MaxRetryInterval}
				}
				return j
			}
			var all []*redeq.Job
			for i := range 20 {
				j := mk(i)
				all = append(all, j)
				require.NoError(t, e.c.Add(ctx, j), j.ID)
			}
			var batch []*redeq.Job
			for i := 20; i < 120; i++ {
				batch = append(batch, mk(i))
			}
			require.NoError(t, e.c.AddBatch(ctx, batch))
			all = append(all, batch...)
			for i := 120; i < 130; i++ {
				j := mk(i)
				all = append(all, j)
				require.NoError(t, e.c.Put(ctx, j), j.ID)
			}
			for _, j := range all {
				got, err := e.c.Get(ctx, "t", j.ID)
				require.NoError(t, err, j.ID)
				require.Equal(t, string(j.Body), string(got.Body), j.ID)
				if len(j.Headers) == 0 {
					require.Empty(t, got.Headers, j.ID)
				} else {
					require.Equal(t, j.Headers, got.Headers, j.ID)
				}
				require.Equal(t, j.Broadcast, got.Broadcast, j.ID)
				require.Equal(t, j.MaxRetries, got.MaxRetries, j.ID)
				if j.RetryIntervals != nil {
					require.Equal(t, []time.Duration{time.Millisecond, 2 * time.Millisecond, config.MaxRetryInterval}, got.RetryIntervals, j.ID)
				}
			}
		})
	}
}

// TestReaddedReadyJobNotEarly: a job that was due and waits in the ready
// list, deleted and added again (or replaced by Put) with a later due
// time, does not run early through the ready list's stale entry.
func TestReaddedReadyJobNotEarly(t *testing.T) {
	t.Parallel()
	for _, be := range testutil.Backends(t) {
		t.Run(be.Name, func(t *testing.T) {
			e := setup(t, be, testutil.Config(t))
			ctx := context.Background()
			require.NoError(t, e.c.Start(ctx)) // moves, but listens to nothing
			for _, id := range []string{"a", "p", "now"} {
				require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: id}))
			}
			testutil.Eventually(t, 10*time.Second, "ready", func() bool { return stats(t, e.c, "t").Ready == 3 })
			_, err := e.c.Delete(ctx, "t", "a")
			require.NoError(t, err)
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "a", Delay: time.Hour}))
			require.NoError(t, e.c.Put(ctx, &redeq.Job{Topic: "t", ID: "p", Delay: time.Hour}))
			ran := make(chan string, 10)
			consumer := e.another(t, nil)
			require.NoError(t, consumer.Register(redeq.ListenerFunc("t", func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
				ran <- job.ID
				ch.Ack()
				return nil
			})))
			require.NoError(t, consumer.Start(ctx))
			select {
			case id := <-ran:
				require.Equal(t, "now", id)
			case <-time.After(20 * time.Second):
				t.Fatal("the job due now did not run")
			}
			settle(t, e, "t")
			select {
			case id := <-ran:
				t.Fatalf("%s ran early, through its stale ready entry", id)
			default:
			}
			for _, id := range []string{"a", "p"} {
				require.Equal(t, redeq.StateScheduled, state(t, e.c, "t", id), id)
			}
		})
	}
}

// TestAddAnswersFullPoolAndExistsWhileWritesRefused: a server refusing
// writes (maxmemory under noeviction, min-replicas-to-write) still answers
// a full pool with ErrPoolFull and AddBatch a stored id with ErrJobExists,
// writing nothing, as docs/operations.md promises, also from a producer
// that has not recorded the topic yet (its first Add to it, or one past
// RecordEvery): recording the topic, a write, does not turn those answers
// into Redis's OOM / NOREPLICAS.
func TestAddAnswersFullPoolAndExistsWhileWritesRefused(t *testing.T) {
	for _, tc := range []struct{ param, value, refusal string }{
		{"maxmemory", "1", "OOM"},
		{"min-replicas-to-write", "1", "NOREPLICAS"},
	} {
		t.Run(tc.param, func(t *testing.T) {
			srv := testutil.StartServer(t, "--maxmemory-policy", "noeviction")
			rc := srv.Client(nil)
			ctx := context.Background()
			cfg := testutil.Config(t)
			cfg.Concurrency, cfg.MaxPool = 1, 1
			first, err := redeq.New(rc, cfg)
			require.NoError(t, err)
			require.NoError(t, first.Add(ctx, &redeq.Job{Topic: "orders", ID: "a", Delay: time.Hour}))
			require.NoError(t, rc.ConfigSet(ctx, tc.param, tc.value).Err()) // writes refused, reads not
			before := testutil.Dump(t, rc, cfg.Prefix)

			// Another producer (a new process, or one whose 2 minutes ran
			// out) with the same settings.
			fresh, err := redeq.New(rc, cfg)
			require.NoError(t, err)
			err = fresh.Add(ctx, &redeq.Job{Topic: "orders", ID: "b", Delay: time.Hour})
			t.Logf("Add to the full pool: %v", err)
			assert.ErrorIs(t, err, redeq.ErrPoolFull, "a full pool is answered ErrPoolFull while writes are refused")

			other, err := redeq.New(rc, cfg)
			require.NoError(t, err)
			err = other.AddBatch(ctx, []*redeq.Job{
				{Topic: "orders", ID: "a", Delay: time.Hour},
				{Topic: "orders", ID: "c", Delay: time.Hour},
			})
			t.Logf("AddBatch of a stored id and one more: %v", err)
			var be *redeq.BatchError
			if assert.True(t, errors.As(err, &be), "AddBatch answers each job, not %v", err) {
				assert.ErrorIs(t, be.Errs[0], redeq.ErrJobExists)
				assert.ErrorIs(t, be.Errs[1], redeq.ErrPoolFull)
			}
			assert.Equal(t, before, testutil.Dump(t, rc, cfg.Prefix), "a refused Add wrote")
		})
	}
}

// TestHugeClientTimeoutsKeepWritesWorking: a client whose DialTimeout or
// ReadTimeout is a day (a "never give up dialing" setting, which go-redis
// accepts) can still Add, AddBatch, Reschedule and Delete: the op TTL the
// scripts get (the window plus ReadTimeout plus DialTimeout plus 5 s) stays
// within the day they accept.
func TestHugeClientTimeoutsKeepWritesWorking(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opt  func(o *redis.Options)
	}{
		{"DialTimeout 24h", func(o *redis.Options) { o.DialTimeout = 24 * time.Hour }},
		{"ReadTimeout 24h", func(o *redis.Options) { o.ReadTimeout = 24 * time.Hour }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, be := range testutil.RealBackends(t) {
				if be.Name != "redis" {
					continue
				}
				o := &redis.Options{Addr: be.Addrs[0]}
				tc.opt(o)
				rc := redis.NewClient(o)
				t.Cleanup(func() { rc.Close() })
				ctx := context.Background()
				c, err := redeq.New(rc, testutil.Config(t))
				if err != nil {
					t.Logf("New refused the client: %v", err)
					return
				}
				err = c.Add(ctx, &redeq.Job{Topic: "t", ID: "1", Body: []byte("b"), Delay: time.Hour})
				assert.NoError(t, err, "Add")
				err = c.AddBatch(ctx, []*redeq.Job{{Topic: "t", ID: "2", Delay: time.Hour}})
				assert.NoError(t, err, "AddBatch")
				err = c.Reschedule(ctx, "t", "1", time.Now().Add(2*time.Hour))
				assert.NoError(t, err, "Reschedule")
				_, err = c.Delete(ctx, "t", "1")
				assert.NoError(t, err, "Delete")
			}
		})
	}
}

package redeq_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestRollingUpgradeLosesNoJob: a fleet of clients of this version and of
// the one before (which drops a ready entry of the current format as
// stale) runs every job once while the namespace keeps the older format;
// UpgradeFormat refuses, naming it, while the older client is alive, and
// switches once it stopped; jobs that waited in the older format run
// after the switch, the clients then write the current one, and every job
// added after it runs once. An older client started after the switch is
// logged as an error by the current clients.
func TestRollingUpgradeLosesNoJob(t *testing.T) {
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		const topic = "roll"
		// The topic exists before any client starts: not a fresh namespace.
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: "first"}))
		runs := newFormatRuns()
		var logs syncBuffer
		newer := e.another(t, func(c *config.Config) {
			c.ClientName = "newer"
			c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelError}))
		})
		older := e.another(t, func(c *config.Config) { c.ClientName = "older" })
		redeq.SetOlderFormat(older)
		startWith(t, newer, runs.listener(topic, "newer"))
		startWith(t, older, runs.listener(topic, "older"))

		add := func(from, n int) {
			for i := from; i < from+n; i++ {
				require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: fmt.Sprint(i), Delay: time.Duration(i%20) * time.Millisecond}))
			}
		}
		ranOnce := func(ids ...string) {
			testutil.Eventually(t, 15*time.Second, "every job ran", func() bool { return runs.ran(ids) })
			for _, id := range ids {
				require.Equal(t, 1, runs.count(id), "job %s", id)
			}
		}
		// Before the switch: both versions fetch from one ready list.
		add(0, 200)
		ranOnce(append(idRange(0, 200), "first")...)
		require.Greater(t, runs.by("older"), 0, "the older client took part")
		require.Greater(t, runs.by("newer"), 0, "the newer client took part")

		err := e.c.UpgradeFormat(ctx)
		require.ErrorIs(t, err, redeq.ErrFormatRefused)
		require.Contains(t, err.Error(), older.ConsumerID())
		require.Zero(t, e.rdb.Exists(ctx, keys.MoversFormat(e.cfg.Prefix)).Val(), "a refusal writes nothing")

		// Jobs that wait in the older format across the switch.
		require.NoError(t, e.c.Pause(ctx, topic))
		add(1000, 20)
		k := keys.ForBucket(e.cfg.Prefix, topic, 0)
		testutil.Eventually(t, 10*time.Second, "moved while paused", func() bool {
			return e.rdb.LLen(ctx, k.Ready()).Val() == 20
		})
		for id, st := range e.rdb.HGetAll(ctx, k.State()).Val() {
			if strings.HasPrefix(id, "\x00") {
				continue // the topic's own fields (pause, trimmed count)
			}
			require.Equal(t, "r", st, "job %s waits in the older format", id)
		}

		require.NoError(t, older.Shutdown(ctx))
		require.NoError(t, e.c.UpgradeFormat(ctx))
		require.NoError(t, e.c.UpgradeFormat(ctx), "a rerun finds the switch made")

		// The newer client writes the current format from its next
		// announcement on.
		probe := 0
		testutil.Eventually(t, 10*time.Second, "the current format written", func() bool {
			probe++
			id := fmt.Sprintf("probe%d", probe)
			require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: topic, ID: id}))
			var st string
			testutil.Eventually(t, 10*time.Second, "probe moved", func() bool {
				st = e.rdb.HGet(ctx, k.State(), id).Val()
				return st != ""
			})
			return strings.HasPrefix(st, "r1")
		})
		require.NoError(t, e.c.Resume(ctx, topic))
		ids := idRange(1000, 20)
		for i := 1; i <= probe; i++ {
			ids = append(ids, fmt.Sprintf("probe%d", i))
		}
		ranOnce(ids...)
		add(2000, 200)
		ranOnce(idRange(2000, 200)...)
		require.Zero(t, e.rdb.Exists(ctx, k.Due()).Val(), "no due time left behind")

		// An older client started after the switch is named in an error.
		late := e.another(t, func(c *config.Config) { c.ClientName = "late" })
		redeq.SetOlderFormat(late)
		require.NoError(t, late.Start(ctx))
		testutil.Eventually(t, 10*time.Second, "the outdated client logged", func() bool {
			return strings.Contains(logs.String(), late.ConsumerID())
		})
		require.Contains(t, logs.String(), "never roll back past UpgradeFormat")
	})
}

// A fresh namespace (no topic, no other client) is switched to the
// current format at the first client's Start, with no call needed.
func TestFreshNamespaceStartsInTheCurrentFormat(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		require.NoError(t, e.c.Start(ctx))
		require.Equal(t, keys.FormatCurrent, e.rdb.Get(ctx, keys.MoversFormat(e.cfg.Prefix)).Val())
		cons, err := e.c.Consumers(ctx)
		require.NoError(t, err)
		for _, ci := range cons {
			require.Equal(t, keys.FormatCurrent, ci.Format)
		}
		require.NoError(t, e.c.UpgradeFormat(ctx))
	})
}

func idRange(from, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprint(from + i)
	}
	return out
}

// formatRuns counts the runs of each job, and the runs of each client.
type formatRuns struct {
	mu     sync.Mutex
	runs   map[string]int
	byName map[string]int
}

func newFormatRuns() *formatRuns {
	return &formatRuns{runs: map[string]int{}, byName: map[string]int{}}
}

// listener is the listener of topic of the client named name: it counts
// each run and acks.
func (r *formatRuns) listener(topic, name string) redeq.Listener {
	return newListener(topic, func(_ context.Context, job *redeq.Job, ch *redeq.Channel) error {
		r.mu.Lock()
		r.runs[job.ID]++
		r.byName[name]++
		r.mu.Unlock()
		ch.Ack()
		return nil
	})
}

func (r *formatRuns) ran(ids []string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range ids {
		if r.runs[id] == 0 {
			return false
		}
	}
	return true
}

func (r *formatRuns) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runs[id]
}

func (r *formatRuns) by(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byName[name]
}

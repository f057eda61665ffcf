package redeq_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/bucket"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestReview13FleetKillReapersAndHoldersAtOnce attacks promises 1 and 2:
// ten consumer processes hold 40 jobs; the two that look for silent
// consumers (ranked first for {reaper}) and three others are SIGKILLed at
// once; a client joins late. Every job the five held must run again on
// the late client, unspent and counted once, within about ConsumerTimeout
// plus a few seconds; no job of the five live processes may be handed out.
func TestReview13FleetKillReapersAndHoldersAtOnce(t *testing.T) {
	t.Parallel() // its own Redis and processes: it runs beside the other fault tests
	_, be := privateServer(t)
	ctx := context.Background()
	cfg := testutil.Config(t)
	e := setup(t, be, cfg)

	const procs, workers = 10, 4
	children := make([]*faultChild, procs)
	ids := make([]string, procs)
	var wg sync.WaitGroup
	for i := range procs {
		children[i] = startFaultChild(t, "slow", be, cfg.Prefix, "t", childHoldForever)
	}
	for i := range procs {
		ids[i] = strings.TrimSpace(children[i].expect(t, "id ", 30*time.Second))
	}
	for i := range procs * workers {
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint("j", i)}))
	}
	holds := make([][]string, procs)
	var mu sync.Mutex
	for i := range procs {
		wg.Go(func() {
			for range workers {
				id := strings.TrimSpace(children[i].expect(t, "start ", 20*time.Second))
				mu.Lock()
				holds[i] = append(holds[i], id)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	time.Sleep(2 * cfg.ConsumerTimeout)

	var kill []int
	for i := range procs {
		if bucket.Ranks(ids, ids[i], bucket.ReaperAddress, 2) {
			kill = append(kill, i)
		}
	}
	require.Len(t, kill, 2)
	for i := 0; len(kill) < 5; i++ {
		if !bucket.Ranks(ids, ids[i], bucket.ReaperAddress, 2) {
			kill = append(kill, i)
		}
	}
	lost := map[string]bool{}
	for _, i := range kill {
		for _, id := range holds[i] {
			lost[id] = true
		}
	}
	for _, i := range kill {
		wg.Go(func() { children[i].kill() })
	}
	wg.Wait()
	killed := time.Now()

	l := newListener("t", nil)
	startWith(t, e.c, l) // joins late
	waitFor(t, 20*time.Second, "every lost job ran again", func() bool {
		got := l.byID()
		for id := range lost {
			if got[id] == 0 {
				return false
			}
		}
		return true
	})
	took := time.Since(killed)
	t.Logf("%d jobs of %d killed processes (both reapers among them) ran again %v after the kill", len(lost), len(kill), took)
	time.Sleep(time.Second)
	for _, d := range l.deliveries() {
		require.Truef(t, lost[d.job.ID], "job %s of a live process was handed to the late client", d.job.ID)
		require.Zero(t, d.job.Attempt, d.job.ID)
		require.Equal(t, 1, d.job.Recoveries, d.job.ID)
	}
	require.Equal(t, len(lost), l.count(), "each lost job ran once")
	require.LessOrEqual(t, took, cfg.ConsumerTimeout+3*time.Second)
}

package redeq_test

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/bucket"
	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestReapersWaitForConsumersOwnTimeout: in a fleet whose clients do not
// share one config, no reaper takes the job of a consumer that is neither
// stalled nor silent by its own settings. The consumer service raised
// ConsumerTimeout (6 s) and HeartbeatInterval (2 s), as operations.md
// advises ("Raise ConsumerTimeout if your processes stall that long"); a
// producer service that calls Start (to help move and reap) keeps a
// shorter ConsumerTimeout (600 ms). The consumer's running job is not
// recovered by the producer's reaper and runs once.
func TestReapersWaitForConsumersOwnTimeout(t *testing.T) {
	t.Parallel() // its own Redis and processes: it runs beside the other fault tests
	_, be := privateServer(t)
	ctx := context.Background()
	pcfg := testutil.Config(t) // the producer service: ConsumerTimeout 600 ms
	ccfg := pcfg
	ccfg.ConsumerTimeout = 6 * time.Second
	ccfg.HeartbeatInterval = 2 * time.Second
	require.NoError(t, ccfg.Validate())
	e := setup(t, be, ccfg) // the consumer service's producer handle

	runs := &jobRuns{}
	var consumers []*redeq.Client
	var ids []string
	for range 2 {
		c := e.another(t, func(c *config.Config) { *c = ccfg })
		consumers = append(consumers, c)
		ids = append(ids, c.ConsumerID())
	}
	// The producer service's client, ranked among the two reapers.
	var producer *redeq.Client
	for producer == nil {
		p := e.another(t, func(c *config.Config) { *c = pcfg })
		if bucket.Ranks(append(append([]string(nil), ids...), p.ConsumerID()), p.ConsumerID(), bucket.ReaperAddress, 2) {
			producer = p
		}
	}
	for _, c := range consumers {
		l := newListener("t", runs.handler(4*time.Second))
		startWith(t, c, l)
	}
	require.NoError(t, producer.Start(ctx))
	time.Sleep(2 * time.Second) // every reaper has looked for long

	require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
	time.Sleep(6 * time.Second)
	got := runs.ByID()["j"]
	var recs []int
	for _, j := range got {
		recs = append(recs, j.Recoveries)
	}
	t.Logf("runs of j: %d, recoveries seen %v", len(got), recs)
	time.Sleep(4 * time.Second)
	if job, err := e.c.Get(ctx, "t", "j"); err == nil {
		t.Logf("j 10 s after its Add: state %s, recoveries %d, reason %q", job.State, job.Recoveries, job.Reason)
	} else {
		t.Logf("j 10 s after its Add: %v", err)
	}
	require.Lenf(t, got, 1, "a consumer heartbeating every %v (ConsumerTimeout %v) had its running job recovered by another client's reaper (ConsumerTimeout %v) and run again",
		ccfg.HeartbeatInterval, ccfg.ConsumerTimeout, pcfg.ConsumerTimeout)
}

// TestMixedConfigFleetSparesStalledAndRecoversKilled: on a fleet whose
// clients differ (a consumer process with ConsumerTimeout 3 s and
// HeartbeatInterval 1 s, Workers 4; a live consumer of the same topic, and
// of another topic it alone listens to, and a producer that also reaps,
// both with ConsumerTimeout 600 ms), a stall of the consumer process
// (SIGSTOP, 1.8 s, under its ConsumerTimeout - HeartbeatInterval) costs it
// no job; once it is SIGKILLed its jobs run again unspent within about its
// own ConsumerTimeout plus a few seconds, not before it was silent for its
// own timeout.
func TestMixedConfigFleetSparesStalledAndRecoversKilled(t *testing.T) {
	t.Parallel() // its own Redis and processes: it runs beside the other fault tests
	_, be := privateServer(t)
	ctx := context.Background()
	cfg := testutil.Config(t) // ConsumerTimeout 600 ms
	e := setup(t, be, cfg)
	require.NoError(t, e.c.Start(ctx)) // producer that moves and reaps

	ch := startFaultChild(t, "slow", be, cfg.Prefix, "t",
		childConsumerTimeoutEnv+"=3000", childHeartbeatEnv+"=1000", childHoldEnv+"=20000")
	cid := strings.TrimSpace(ch.expect(t, "id ", 15*time.Second))
	for i := range 4 {
		require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: fmt.Sprint("j", i)}))
	}
	for range 4 {
		ch.expect(t, "start ", 10*time.Second)
	}
	other := newListener("other", nil)
	live := newListener("t", nil)
	startWith(t, e.another(t, nil), live, other)
	time.Sleep(2 * cfg.ConsumerTimeout)
	require.Zero(t, live.count(), "the child took all four")

	// A stall within the child's tolerance.
	alive := keys.Alive(cfg.Prefix)
	last := e.rdb.ZScore(ctx, alive, cid).Val()
	testutil.Eventually(t, 3*time.Second, "a fresh heartbeat", func() bool { return e.rdb.ZScore(ctx, alive, cid).Val() != last })
	time.Sleep(900 * time.Millisecond)
	require.NoError(t, ch.cmd.Process.Signal(syscall.SIGSTOP))
	time.Sleep(1800 * time.Millisecond)
	require.NoError(t, ch.cmd.Process.Signal(syscall.SIGCONT))
	time.Sleep(time.Second)
	require.Zerof(t, live.count(), "a consumer stalled within its own ConsumerTimeout lost %d jobs to another", live.count())

	// Now it dies.
	testutil.Eventually(t, 3*time.Second, "a fresh heartbeat", func() bool { return e.rdb.ZScore(ctx, alive, cid).Val() != last })
	beat := e.rdb.ZScore(ctx, alive, cid).Val()
	require.NoError(t, ch.cmd.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	testutil.Eventually(t, 12*time.Second, "the four jobs ran again", func() bool { return len(live.byID()) == 4 })
	took := time.Since(killed)
	first := live.deliveries()[0].at
	silent := time.Duration(first.UnixMilli()-int64(beat)) * time.Millisecond
	t.Logf("killed consumer's jobs ran again %v after the kill, %v after its last heartbeat", took, silent)
	for _, d := range live.deliveries() {
		require.Zero(t, d.job.Attempt)
	}
	require.GreaterOrEqual(t, silent, 3*time.Second, "handed over before the consumer was silent for its own ConsumerTimeout")
	require.LessOrEqual(t, took, 3*time.Second+4*time.Second)
}

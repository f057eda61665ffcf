package redeq_test

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestReview14MixedConfigKillAndStall checks promise 1 (held; a
// regression test) on a fleet whose clients differ: a consumer process
// with ConsumerTimeout 3 s and HeartbeatInterval 1 s, Workers 4; a live
// consumer of the same topic (and of another topic it alone listens to)
// and a producer that also reaps, both with ConsumerTimeout 600 ms. First
// the consumer process stalls (SIGSTOP) for 1.8 s (< its ConsumerTimeout
// - HeartbeatInterval): nobody may take its jobs. Then it is SIGKILLed: its
// jobs must run again unspent within about its own ConsumerTimeout plus a
// few seconds, not before it was silent for its own timeout.
func TestReview14MixedConfigKillAndStall(t *testing.T) {
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
	waitFor(t, 3*time.Second, "a fresh heartbeat", func() bool { return e.rdb.ZScore(ctx, alive, cid).Val() != last })
	time.Sleep(900 * time.Millisecond)
	require.NoError(t, ch.cmd.Process.Signal(syscall.SIGSTOP))
	time.Sleep(1800 * time.Millisecond)
	require.NoError(t, ch.cmd.Process.Signal(syscall.SIGCONT))
	time.Sleep(time.Second)
	require.Zerof(t, live.count(), "a consumer stalled within its own ConsumerTimeout lost %d jobs to another", live.count())

	// Now it dies.
	waitFor(t, 3*time.Second, "a fresh heartbeat", func() bool { return e.rdb.ZScore(ctx, alive, cid).Val() != last })
	beat := e.rdb.ZScore(ctx, alive, cid).Val()
	require.NoError(t, ch.cmd.Process.Signal(syscall.SIGKILL))
	killed := time.Now()
	waitFor(t, 12*time.Second, "the four jobs ran again", func() bool { return len(live.byID()) == 4 })
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

package redeq_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestReview13StallWithinToleranceKeepsJob: a live consumer stalled (a
// SIGSTOP standing for a GC pause, swap, a VM migration) for less than
// ConsumerTimeout - HeartbeatInterval keeps its job, even when the stall
// begins just before its next heartbeat. Silence is counted from the last
// heartbeat, as docs/operations.md says: a stall of ConsumerTimeout itself
// can outlast it by up to HeartbeatInterval, and is not covered. Review 13
// first asserted the whole ConsumerTimeout, which the docs promised then.
func TestReview13StallWithinToleranceKeepsJob(t *testing.T) {
	t.Parallel() // its own Redis and processes: it runs beside the other fault tests
	_, be := privateServer(t)
	ctx := context.Background()
	cfg := testutil.Config(t)
	cfg.ConsumerTimeout = 1500 * time.Millisecond
	cfg.HeartbeatInterval = 500 * time.Millisecond // the most allowed: ConsumerTimeout/3
	e := setup(t, be, cfg)
	require.NoError(t, e.c.Start(ctx)) // moves and reaps, consumes nothing

	ch := startFaultChild(t, "slow", be, cfg.Prefix, "t",
		childConsumerTimeoutEnv+"=1500", childHeartbeatEnv+"=500", childHoldEnv+"=12000")
	cid := strings.TrimSpace(ch.expect(t, "id ", 15*time.Second))
	require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "t", ID: "j"}))
	require.Equal(t, "j", ch.expect(t, "start ", 10*time.Second))

	// A second live consumer that would get the job if it were recovered.
	l := newListener("t", nil)
	startWith(t, e.another(t, nil), l)
	time.Sleep(2 * cfg.ConsumerTimeout) // every reaper has looked for a full ConsumerTimeout

	// Stop the child just before its next heartbeat.
	alive := keys.Alive(cfg.Prefix)
	last := e.rdb.ZScore(ctx, alive, cid).Val()
	require.NotZero(t, last, "child heartbeats")
	waitFor(t, 3*time.Second, "a fresh heartbeat", func() bool { return e.rdb.ZScore(ctx, alive, cid).Val() != last })
	time.Sleep(cfg.HeartbeatInterval - 50*time.Millisecond)
	stall := (cfg.ConsumerTimeout - cfg.HeartbeatInterval) * 95 / 100
	require.NoError(t, ch.cmd.Process.Signal(syscall.SIGSTOP))
	stopped := time.Now()
	time.Sleep(stall)
	require.NoError(t, ch.cmd.Process.Signal(syscall.SIGCONT))
	t.Logf("child stalled %v (ConsumerTimeout %v, HeartbeatInterval %v)", time.Since(stopped), cfg.ConsumerTimeout, cfg.HeartbeatInterval)

	// The child is alive again and finishes the job.
	require.Equal(t, "j", ch.expect(t, "done ", 15*time.Second))
	time.Sleep(500 * time.Millisecond)
	job, err := e.c.Get(ctx, "t", "j")
	if err == nil {
		t.Logf("job after the stall: state %s recoveries %d", job.State, job.Recoveries)
	}
	require.Zerof(t, l.count(), "a consumer stalled %v < ConsumerTimeout %v - HeartbeatInterval %v had its job handed to another live consumer (%d deliveries there, recoveries %v) while it still ran it",
		stall, cfg.ConsumerTimeout, cfg.HeartbeatInterval, l.count(), recoveriesOf(l))
	_ = redis.Nil
}

package redeq_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestPoisonSparesBystandersBeyondItsListener: a healthy job that ran
// beside a poison job through crashes is counted at most twice and never
// ends in the dead set because of it, whether it belongs to another topic
// of the process, to another client of the process, runs while the
// process shuts down gracefully, or MaxRecoveries is the lowest accepted.
func TestPoisonSparesBystandersBeyondItsListener(t *testing.T) {
	t.Parallel()
	t.Run("another_topic", testPoisonSparesBystanderOfAnotherTopic)
	t.Run("another_client", testPoisonSparesBystanderOfAnotherClient)
	t.Run("graceful_shutdown", testPoisonSparesBystanderDuringGracefulShutdown)
	t.Run("lowest_max_recoveries", testPoisonSparesBystanderAtLowestMaxRecoveries)
}

// testPoisonSparesBystanderOfAnotherTopic: one service listens to two
// topics, "a" and "b", in one process. The job "poison" of "a" kills the
// process every time it runs. A healthy, slow job "b1" of "b" happens to
// run in the same process. Quarantine covers the whole process, not one
// listener: the jobs that ran beside the poison once or twice are counted
// at most twice and then run normally, and b1 never goes to the dead set.
func testPoisonSparesBystanderOfAnotherTopic(t *testing.T) {
	t.Parallel() // its own Redis and processes: it runs beside the other fault tests
	e := poisonBesideB1(t, "twotopics", 3)
	b1, err := e.c.Get(context.Background(), "b", "b1")
	if errors.Is(err, redeq.ErrJobNotFound) {
		return // b1 ran to the end alone, and was acked
	}
	require.NoError(t, err)
	t.Logf("b1: state %s, recoveries %d, reason %q", b1.State, b1.Recoveries, b1.Reason)
	require.NotEqualf(t, redeq.StateDead, b1.State,
		"a healthy job of another topic, run beside the poison job, went dead as poison after %d recoveries: %q", b1.Recoveries, b1.Reason)
	require.LessOrEqual(t, b1.Recoveries, 2, "a bystander is counted at most twice")
}

const shutdownOrderKind = "shutdownorder"

// runShutdownOrderChild is a service process (child kind shutdownOrderKind)
// that embeds client X (topic "a") and client Y (topic "b") and, on
// SIGTERM, shuts them down one by one (X first), gracefully. The job
// "poison" kills the process 2 s after it starts; other jobs run 3 s.
func runShutdownOrderChild() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	var clients []*redeq.Client
	for _, topic := range []string{"a", "b"} {
		c := childClient(faultChildConfig)
		l := newListener(topic, func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
			fmt.Println("start", job.Topic, job.ID, job.Recoveries)
			if job.ID == "poison" {
				time.Sleep(2 * time.Second)
				os.Exit(3)
			}
			time.Sleep(3 * time.Second)
			fmt.Println("finished", job.Topic, job.ID)
			ch.Ack()
			return nil
		})
		l.workers = 4
		childMust(c.Register(l))
		clients = append(clients, c)
	}
	for _, c := range clients {
		childMust(c.Start(context.Background()))
	}
	<-sig
	fmt.Println("stopping")
	for _, c := range clients {
		_ = c.Shutdown(context.Background())
	}
	os.Exit(0)
}

// testPoisonSparesBystanderDuringGracefulShutdown: the poison job of topic
// a (client X) and the healthy job b1 of topic b (client Y) have both been
// recovered twice (they ran together through two crashes). The service
// restarts; X runs the poison alone, b1 waits. The operator now stops the
// service (SIGTERM): it shuts down X first and waits for X's running
// handler. The process's quarantine stays X's until the poison's handler
// ends, so Y does not fetch b1 beside it, and when the poison kills the
// process b1 is not counted a third time: it never ends dead as poison.
func testPoisonSparesBystanderDuringGracefulShutdown(t *testing.T) {
	_, be := privateServer(t)
	ctx := context.Background()
	cfg := testutil.Config(t)
	cfg.MaxRecoveries = 2 // a bystander counted twice (the promised bound) is still alive
	e := setup(t, be, cfg)
	require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "a", ID: "poison"}))
	quarantine(t, e.rdb, e.cfg, "a", "poison", 2)
	require.NoError(t, e.c.Add(ctx, &redeq.Job{Topic: "b", ID: "b1", Delay: 500 * time.Millisecond}))
	quarantine(t, e.rdb, e.cfg, "b", "b1", 2)
	require.NoError(t, e.c.Start(ctx)) // moves and reaps, consumes nothing

	c := startFaultChild(t, shutdownOrderKind, be, cfg.Prefix, "", childMaxRecoveriesEnv+"=2")
	require.Equal(t, "a poison 2", strings.TrimSpace(c.expect(t, "start ", 10*time.Second)))
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGTERM))
	var lines []string
	for l := range c.lines {
		lines = append(lines, l)
	}
	c.kill()
	t.Logf("child printed after the poison started: %q; exit %v", lines, c.cmd.ProcessState)
	testutil.Eventually(t, 20*time.Second, "poison recovered", func() bool { return state(t, e.c, "a", "poison") != redeq.StateInFlight })
	testutil.Eventually(t, 20*time.Second, "b1 settled or recovered", func() bool { return state(t, e.c, "b", "b1") != redeq.StateInFlight })
	p, err := e.c.Get(ctx, "a", "poison")
	require.NoError(t, err)
	b1, err := e.c.Get(ctx, "b", "b1")
	require.NoError(t, err)
	t.Logf("poison: %s rec %d; b1: %s rec %d %q", p.State, p.Recoveries, b1.State, b1.Recoveries, b1.Reason)
	require.NotEqualf(t, redeq.StateDead, b1.State,
		"a healthy job of another client of the process went dead as poison (recoveries %d): it was fetched beside the quarantined poison during the graceful shutdown of the poison's client", b1.Recoveries)
	require.LessOrEqual(t, b1.Recoveries, 2, "a bystander is counted at most twice")
}

// testPoisonSparesBystanderAtLowestMaxRecoveries: a MaxRecoveries below
// the quarantine threshold (ready.Quarantine = 2) is refused, since the
// recovery script sends a job recovered more than MaxRecoveries times to
// the dead set before it could ever run alone; at the lowest accepted
// value, the healthy job b1 that ran beside the poison job through two
// crashes survives.
func testPoisonSparesBystanderAtLowestMaxRecoveries(t *testing.T) {
	t.Parallel()
	_, be := privateServer(t)
	cfg := testutil.Config(t)
	cfg.MaxRecoveries = 1
	_, err := redeq.New(be.New(t), cfg)
	require.ErrorContains(t, err, "MaxRecoveries", "MaxRecoveries 1 is refused")
	e := poisonBesideB1(t, "twotopics", config.MinMaxRecoveries)
	st := state(t, e.c, "b", "b1")
	t.Logf("b1 is %q", st)
	require.NotEqual(t, redeq.StateDead, st, "the healthy job b1 went dead with the poison job (MaxRecoveries %d)", config.MinMaxRecoveries)
}

// testPoisonSparesBystanderOfAnotherClient: a process embeds two redeq
// clients (two modules of one binary, each with its own settings): client
// X listens to "a", client Y to "b". The job "poison" of "a" kills the
// process; the healthy, slow job "b1" of "b" runs beside it. Quarantine
// covers the process, not one client: once both are quarantined they run
// one at a time, b1 is counted at most twice and never ends in the dead
// set.
func testPoisonSparesBystanderOfAnotherClient(t *testing.T) {
	t.Parallel() // its own Redis and processes: it runs beside the other fault tests
	e := poisonBesideB1(t, "twoclients", 3)
	b1, err := e.c.Get(context.Background(), "b", "b1")
	require.NoError(t, err)
	t.Logf("b1: state %s, recoveries %d, reason %q", b1.State, b1.Recoveries, b1.Reason)
	require.NotEqualf(t, redeq.StateDead, b1.State,
		"a healthy job of another client of the same process, run beside the poison job, went dead as poison after %d recoveries: %q", b1.Recoveries, b1.Reason)
	require.LessOrEqual(t, b1.Recoveries, 2, "a bystander is counted at most twice")
}

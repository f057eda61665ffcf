package redeq_test

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

const review15ShutKind = "review15shut"

// runReview15ShutChild is a service process (child kind review15ShutKind)
// that embeds client X (topic "a") and client Y (topic "b") and, on
// SIGTERM, shuts them down one by one (X first), gracefully. The job
// "poison" kills the process 2 s after it starts; other jobs run 3 s.
func runReview15ShutChild() {
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

// TestReview15PoisonDuringGracefulShutdownKillsBystander attacks promise
// 1 end to end. The poison job of topic a (client X) and the healthy job
// b1 of topic b (client Y) have both been recovered twice (they ran
// together through two crashes). The service restarts; X runs the poison
// alone, b1 waits, as designed. The operator now stops the service
// (SIGTERM): it shuts down X first and waits for X's running handler. X's
// dispatcher exits and releases the process's quarantine at once
// (consumer/runner.go dispatch: defer releaseSolo), so Y fetches b1 beside
// the still running poison, the poison kills the process, and b1 is
// counted a third time: dead as poison.
func TestReview15PoisonDuringGracefulShutdownKillsBystander(t *testing.T) {
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

	c := startFaultChild(t, review15ShutKind, be, cfg.Prefix, "", childMaxRecoveriesEnv+"=2")
	require.Equal(t, "a poison 2", strings.TrimSpace(c.expect(t, "start ", 10*time.Second)))
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGTERM))
	var lines []string
	for l := range c.lines {
		lines = append(lines, l)
	}
	c.kill()
	t.Logf("child printed after the poison started: %q; exit %v", lines, c.cmd.ProcessState)
	waitFor(t, 20*time.Second, "poison recovered", func() bool { return state(t, e.c, "a", "poison") != redeq.StateInFlight })
	waitFor(t, 20*time.Second, "b1 settled or recovered", func() bool { return state(t, e.c, "b", "b1") != redeq.StateInFlight })
	p, err := e.c.Get(ctx, "a", "poison")
	require.NoError(t, err)
	b1, err := e.c.Get(ctx, "b", "b1")
	require.NoError(t, err)
	t.Logf("poison: %s rec %d; b1: %s rec %d %q", p.State, p.Recoveries, b1.State, b1.Recoveries, b1.Reason)
	require.NotEqualf(t, redeq.StateDead, b1.State,
		"a healthy job of another client of the process went dead as poison (recoveries %d): it was fetched beside the quarantined poison during the graceful shutdown of the poison's client", b1.Recoveries)
	require.LessOrEqual(t, b1.Recoveries, 2, "a bystander is counted at most twice")
}

package redeq_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/redeq"
)

// TestReview13PoisonKillsBystanderOfAnotherTopic attacks promise 5 (and
// the design's "the jobs that ran beside it once or twice are counted at
// most twice and then run normally"): one service listens to two topics,
// "a" and "b", in one process. The job "poison" of "a" kills the process
// every time it runs. A healthy, slow job "b1" of "b" happens to run in
// the same process. Quarantine keeps a job alone only within its own
// listener (runner.idle), so the quarantined b1 keeps being fetched
// beside the quarantined poison of the other topic, is counted at every
// crash, and goes to the dead set as poison although it never failed.
func TestReview13PoisonKillsBystanderOfAnotherTopic(t *testing.T) {
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

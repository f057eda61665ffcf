package redeq_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestReview17LowMaxRecoveriesKillsBystander: review 17 attacked promise
// 1 ("a healthy job that was in flight beside a poison job through
// crashes is not sent to dead because of the poison job") with
// MaxRecoveries 1, which config.Validate then accepted. Quarantine starts
// at the second recovery (ready.Quarantine = 2), but the recovery script
// sends a job recovered more than MaxRecoveries times to the dead set:
// with 1, the healthy job b1 that ran beside the poison job through two
// crashes (not yet quarantined at the second) went dead with it. A
// MaxRecoveries below Quarantine is now refused; at the least one
// accepted, b1 survives.
func TestReview17LowMaxRecoveriesKillsBystander(t *testing.T) {
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

package redeq_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/bucket"
	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/testutil"
	"github.com/redeq-go/redeq/redeq"
)

// TestReview13RaisedConsumerTimeoutIgnoredByOtherReapers attacks promise
// 4 with a fleet whose clients do not share one config: the consumer
// service raised ConsumerTimeout (6 s) and HeartbeatInterval (2 s), as
// operations.md advises ("Raise ConsumerTimeout if your processes stall
// that long"); a producer service that calls Start (to help move and reap,
// as operations.md suggests) keeps a shorter ConsumerTimeout (600 ms). The
// reaper judges silence by its OWN ConsumerTimeout (consumer/reaper.go
// reap -> silent.lua ARGV[1]); the heartbeat does not carry the
// consumer's. So the producer's reaper takes the job of a consumer that is
// neither stalled nor silent by its own settings (it heartbeats every 2 s)
// and hands it to the other consumer while the first still runs it.
func TestReview13RaisedConsumerTimeoutIgnoredByOtherReapers(t *testing.T) {
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
	got := runs.snapshot()["j"]
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

package redeq_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/keys"
	"github.com/redeq-go/redeq/redeq"
)

// TestReview11LostTopicSetStrandsJobs attacks promise 4 ("a failover
// losing the topic set: each job is still delivered") and docs/design.md
// ("producers record their topics again every RecordEvery ... which also
// restores a topic lost in a failover").
//
// A producer adds a job due in 2 s; a running client listens to the
// topic. Then the topic's entry in the topic set is lost, as an
// asynchronous-replication failover of the set's master loses the last
// SADD (on a cluster the set and the job's bucket live on different
// masters, so the job survives while the record does not). Nobody adds
// to the topic again. The job must still be delivered; we wait 15 s
// (150 ScanIntervals, well past every background period of the Fast
// config). The only ways back are Add-driven (a wake-up naming an
// unknown topic, or a producer re-recording on an Add after 2 minutes),
// so without another Add the job stays in its bucket for good.
func TestReview11LostTopicSetStrandsJobs(t *testing.T) {
	eachReal(t, func(t *testing.T, e *env) {
		ctx := context.Background()
		const topic = "orders"
		l := newListener(topic, nil)
		startWith(t, e.c, l)
		producer := e.another(t, nil) // never started: writes only
		require.NoError(t, producer.Add(ctx, &redeq.Job{Topic: topic, ID: "first"}))
		waitFor(t, 10*time.Second, "setup: the first job ran", func() bool { return l.byID()["first"] == 1 })

		require.NoError(t, producer.Add(ctx, &redeq.Job{Topic: topic, ID: "late", Delay: 2 * time.Second}))
		// The failover loses the topic's record (its SADD was the set's
		// last write); the job's bucket, on another master, keeps the job.
		require.NoError(t, e.rdb.SRem(ctx, keys.Topics(e.cfg.Prefix), topic).Err())

		deadline := time.Now().Add(15 * time.Second)
		for time.Now().Before(deadline) && l.byID()["late"] == 0 {
			time.Sleep(50 * time.Millisecond)
		}
		st := stats(t, e.c, topic)
		require.Equalf(t, 1, l.byID()["late"],
			"a job whose topic record a failover lost was not delivered 13 s after its due time (scheduled=%d ready=%d, topic in set: %v)",
			st.Scheduled, st.Ready, e.rdb.SIsMember(ctx, keys.Topics(e.cfg.Prefix), topic).Val())

		// The failover loses the topic's bucket count as well.
		require.NoError(t, producer.Add(ctx, &redeq.Job{Topic: topic, ID: "later", Delay: time.Second}))
		require.NoError(t, e.rdb.SRem(ctx, keys.Topics(e.cfg.Prefix), topic).Err())
		require.NoError(t, e.rdb.Del(ctx, keys.ForTopic(e.cfg.Prefix, topic).Meta()).Err())
		waitFor(t, 15*time.Second, "the job whose topic lost its record and bucket count ran", func() bool { return l.byID()["later"] == 1 })
		require.Equal(t, fmt.Sprint(e.cfg.Concurrency), e.rdb.HGet(ctx, keys.ForTopic(e.cfg.Prefix, topic).Meta(), "buckets").Val())
	})
}

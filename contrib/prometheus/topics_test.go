package redeqprom

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/redeq-go/redeq/internal/topiccache"
	"github.com/redeq-go/redeq/redeq"
)

// A topic's counters exist from its first sight, at zero for every
// outcome and reason, so that increase() sees the first of each; its
// histograms appear once something was recorded into them.
func TestCountersExistFromATopicsFirstSight(t *testing.T) {
	col := New(nil, Options{AsynqNames: true})
	job := &redeq.Job{Topic: "t", ID: "1"}
	col.JobDelivered(job, time.Millisecond)
	col.JobDone(job, redeq.OutcomeAck, time.Millisecond, nil)
	require.Equal(t, 1, testutil.CollectAndCount(col.lateness))
	require.Equal(t, 1, testutil.CollectAndCount(col.duration))
	require.Equal(t, len(outcomes), testutil.CollectAndCount(col.processed))
	require.Equal(t, 1.0, testutil.ToFloat64(col.processed.WithLabelValues("t", "ack")))
	require.Zero(t, testutil.ToFloat64(col.processed.WithLabelValues("t", "dead")))
	require.Equal(t, 2, testutil.CollectAndCount(col.returned))
	require.Zero(t, testutil.ToFloat64(col.returned.WithLabelValues("t", "recovered")))
	require.Equal(t, 1, testutil.CollectAndCount(col.added))
	require.Equal(t, 1, testutil.CollectAndCount(col.asynq.processed))
	require.Equal(t, 1, testutil.CollectAndCount(col.asynq.failed))
}

// A service that uses ever new topics does not grow the cache of series
// past topiccache.Max, and the topics beyond it are counted all the same.
func TestSeriesCacheIsBounded(t *testing.T) {
	col := New(nil, Options{})
	for i := range topiccache.Max + 10 {
		job := &redeq.Job{Topic: fmt.Sprint("topic", i), ID: "1"}
		for range 2 {
			col.JobDelivered(job, time.Millisecond)
			col.JobDone(job, redeq.OutcomeRetry, time.Millisecond, nil)
		}
		col.JobsReturned(job.Topic, 3, true)
	}
	require.EqualValues(t, topiccache.Max, col.topics.Len())
	last := fmt.Sprint("topic", topiccache.Max+9)
	require.Equal(t, 2.0, testutil.ToFloat64(col.processed.WithLabelValues(last, "retry")))
	require.Equal(t, 3.0, testutil.ToFloat64(col.returned.WithLabelValues(last, "recovered")))
	require.Equal(t, topiccache.Max+10, testutil.CollectAndCount(col.duration))
}

package redeqprom

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redeq-go/redeq/redeq"
)

// asynqMetrics are the names of asynq's x/metrics collector, fed from
// redeq's: queue is the topic. Names asynq has and redeq cannot fill
// (asynq_queue_memory_usage_approx_bytes; the states retry and completed,
// which redeq does not keep apart or at all) are not exported, so a panel
// built on them shows "no data" rather than a wrong zero.
type asynqMetrics struct {
	processed, failed *prometheus.CounterVec
	// Under ModeExporter: the same names, read from Redis.
	processedDesc, failedDesc *prometheus.Desc

	enqueuedDesc, sizeDesc, latencyDesc, pausedDesc *prometheus.Desc
}

// The asynq names this collector exports.
const (
	AsynqTasksEnqueued  = "asynq_tasks_enqueued_total"
	AsynqQueueSize      = "asynq_queue_size"
	AsynqQueueLatency   = "asynq_queue_latency_seconds"
	AsynqQueuePaused    = "asynq_queue_paused_total"
	AsynqTasksProcessed = "asynq_tasks_processed_total"
	AsynqTasksFailed    = "asynq_tasks_failed_total"
)

func newAsynqMetrics(cl prometheus.Labels) *asynqMetrics {
	return &asynqMetrics{
		processed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: AsynqTasksProcessed, Help: "Handler runs that ended (succeeded or failed), by this client; asynq's name for redeq_jobs_processed_total without interrupted runs.", ConstLabels: cl,
		}, []string{"queue"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: AsynqTasksFailed, Help: "Handler runs that failed (retry, dead, or a broadcast that failed), by this client; asynq's name.", ConstLabels: cl,
		}, []string{"queue"}),
		processedDesc: prometheus.NewDesc(AsynqTasksProcessed,
			"Deliveries whose outcome was applied, by every consumer, read from Redis (redeq_topic_processed_total); asynq's name.", []string{"queue"}, cl),
		failedDesc: prometheus.NewDesc(AsynqTasksFailed,
			"Processed deliveries that failed, by every consumer, read from Redis (redeq_topic_failed_total); asynq's name.", []string{"queue"}, cl),
		enqueuedDesc: prometheus.NewDesc(AsynqTasksEnqueued,
			"Jobs of a topic by asynq state: active = inflight, pending = ready, scheduled = scheduled (retries included), archived = dead. A gauge, as in asynq.",
			[]string{"queue", "state"}, cl),
		sizeDesc:    prometheus.NewDesc(AsynqQueueSize, "Every job the topic holds (redeq Stats.Pool).", []string{"queue"}, cl),
		latencyDesc: prometheus.NewDesc(AsynqQueueLatency, "redeq_oldest_overdue_seconds under asynq's name.", []string{"queue"}, cl),
		pausedDesc:  prometheus.NewDesc(AsynqQueuePaused, "1 while the topic is paused, else 0.", []string{"queue"}, cl),
	}
}

func (a *asynqMetrics) done(ts *topicSeries, topic string, o redeq.Outcome, err error) {
	switch {
	case o == redeq.OutcomeInterrupted: // canceled by Shutdown: asynq does not count it either
		return
	case o == redeq.OutcomeRetry, o == redeq.OutcomeDead, o == redeq.OutcomeBroadcast && err != nil:
		ts.asynqFailed.get(func() prometheus.Counter { return a.failed.WithLabelValues(topic) }).Inc()
	}
	ts.asynqProcessed.get(func() prometheus.Counter { return a.processed.WithLabelValues(topic) }).Inc()
}

// describe describes the observed counters when observed, else the ones
// read from Redis, and the gauges when reads.
func (a *asynqMetrics) describe(ch chan<- *prometheus.Desc, observed, reads bool) {
	if observed {
		a.processed.Describe(ch)
		a.failed.Describe(ch)
	} else {
		ch <- a.processedDesc
		ch <- a.failedDesc
	}
	if reads {
		ch <- a.enqueuedDesc
		ch <- a.sizeDesc
		ch <- a.latencyDesc
		ch <- a.pausedDesc
	}
}

func (a *asynqMetrics) collectObserved(ch chan<- prometheus.Metric) {
	a.processed.Collect(ch)
	a.failed.Collect(ch)
}

func (a *asynqMetrics) collectTotals(ch chan<- prometheus.Metric, topic string, processed, failed float64) {
	ch <- prometheus.MustNewConstMetric(a.processedDesc, prometheus.CounterValue, processed, topic)
	ch <- prometheus.MustNewConstMetric(a.failedDesc, prometheus.CounterValue, failed, topic)
}

// collect exports the gauges.
func (a *asynqMetrics) collect(ch chan<- prometheus.Metric, stats map[string]redeq.Stats, overdue map[string]time.Duration) {
	for topic, st := range stats {
		for _, s := range []struct {
			state string
			n     int64
		}{
			{"active", st.InFlight}, {"pending", st.Ready}, {"scheduled", st.Scheduled}, {"archived", st.Dead},
		} {
			ch <- prometheus.MustNewConstMetric(a.enqueuedDesc, prometheus.GaugeValue, float64(s.n), topic, s.state)
		}
		ch <- prometheus.MustNewConstMetric(a.sizeDesc, prometheus.GaugeValue, float64(st.Pool), topic)
		paused := 0.0
		if st.Paused {
			paused = 1
		}
		ch <- prometheus.MustNewConstMetric(a.pausedDesc, prometheus.GaugeValue, paused, topic)
	}
	for topic, d := range overdue {
		ch <- prometheus.MustNewConstMetric(a.latencyDesc, prometheus.GaugeValue, d.Seconds(), topic)
	}
}

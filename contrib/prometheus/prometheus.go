// Package redeqprom exports redeq's metrics to Prometheus: counters and
// histograms fed by a redeq.Observer, and per-topic job counts read from
// Redis at scrape time, cached.
//
//	col, err := redeqprom.Register(c, prometheus.DefaultRegisterer, redeqprom.Options{})
//
// Metrics (see docs/observability.md for what to alert on):
//
//	redeq_jobs_added_total{topic}                      counter
//	redeq_jobs_processed_total{topic,outcome}          counter
//	redeq_jobs_returned_total{topic,reason}            counter: recovered | rollback
//	redeq_job_lateness_seconds{topic,first_attempt}    histogram: handler start - due time
//	redeq_job_duration_seconds{topic}                  histogram: handler run time
//	redeq_jobs{topic,state}                            gauge, from Client.Stats at scrape
//	redeq_consumers{topic}                             gauge, from Client.Stats at scrape
//	redeq_oldest_overdue_seconds{topic}                gauge, from Client.OldestOverdue at scrape
//	redeq_stats_errors_total                           counter: failed scrape-time reads
//	redeq_schedule_ticks_total{schedule,outcome}       counter: run | skipped, ticks this client handled
//	redeq_schedule_lag_seconds{schedule}               gauge, from Client.Schedules at scrape
//	redeq_schedule_last_tick_timestamp_seconds{schedule} gauge, from Client.Schedules at scrape
//
// With Options.AsynqNames it also exports the names of asynq's
// x/metrics collector, so that dashboards built for asynq work (see
// docs/observability.md for what maps and what does not).
package redeqprom

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redeq-go/redeq/internal/topiccache"
	"github.com/redeq-go/redeq/redeq"
)

// LatenessBuckets are the lateness histogram's upper bounds, seconds: from
// a millisecond (a healthy mover) to ten minutes (a stalled fleet).
var LatenessBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// DurationBuckets are the handler duration histogram's upper bounds, seconds.
var DurationBuckets = []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// Options tunes a Collector. Zero values take the defaults.
type Options struct {
	// Topics are the topics whose job counts a scrape reads. Defaults to
	// every topic (Client.Topics), at most MaxTopics of them.
	Topics []string
	// MaxTopics bounds the topics a scrape reads, so that a scrape's cost
	// does not grow with the topics ever used. Defaults to 100.
	MaxTopics int
	// CacheFor is how long job counts read at a scrape are reused.
	// Defaults to 10s.
	CacheFor time.Duration
	// Timeout bounds the reads of one scrape. Defaults to 2s.
	Timeout time.Duration
	// AsynqNames adds, beside redeq's own metrics, those of asynq's
	// x/metrics collector that have a meaning here, labelled by queue =
	// the topic. Defaults to false.
	AsynqNames bool
}

// Collector is a prometheus.Collector, a redeq.ReturnObserver and a
// redeq.ScheduleObserver.
type Collector struct {
	c    *redeq.Client
	opts Options

	added     *prometheus.CounterVec
	processed *prometheus.CounterVec
	returned  *prometheus.CounterVec
	lateness  *prometheus.HistogramVec
	duration  *prometheus.HistogramVec
	statsErrs prometheus.Counter
	ticks     *prometheus.CounterVec

	jobsDesc, consumersDesc, overdueDesc *prometheus.Desc
	lagDesc, lastTickDesc                *prometheus.Desc

	asynq *asynqMetrics // nil unless Options.AsynqNames

	topics topiccache.Cache[*topicSeries]

	mu      sync.Mutex // serializes scrape-time reads
	readAt  time.Time
	stats   map[string]redeq.Stats
	overdue map[string]time.Duration
	sched   []redeq.ScheduleInfo
	now     func() time.Time
}

// New returns a Collector of c's metrics. It observes nothing until it is
// c's Observer (see Register, or redeq.Observers to combine it).
func New(c *redeq.Client, opts Options) *Collector {
	if opts.MaxTopics <= 0 {
		opts.MaxTopics = 100
	}
	if opts.CacheFor <= 0 {
		opts.CacheFor = 10 * time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 2 * time.Second
	}
	x := &Collector{
		c: c, opts: opts, now: time.Now,
		added: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redeq_jobs_added_total", Help: "Jobs stored by Add, AddBatch, AddTyped or a Put that added.",
		}, []string{"topic"}),
		processed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redeq_jobs_processed_total", Help: "Deliveries by outcome: ack, rejoin, retry, dead, unack, interrupted, broadcast.",
		}, []string{"topic", "outcome"}),
		returned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redeq_jobs_returned_total", Help: "In-flight jobs returned unspent: recovered from a silent consumer, or rolled back at shutdown.",
		}, []string{"topic", "reason"}),
		lateness: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "redeq_job_lateness_seconds", Help: "Handler start minus the job's due time.", Buckets: LatenessBuckets,
		}, []string{"topic", "first_attempt"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "redeq_job_duration_seconds", Help: "How long handlers ran.", Buckets: DurationBuckets,
		}, []string{"topic"}),
		statsErrs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "redeq_stats_errors_total", Help: "Scrape-time reads of job counts that failed; the last counts read are reported.",
		}),
		ticks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redeq_schedule_ticks_total",
			Help: "Ticks of a periodic schedule this client handled: run (its job added) or skipped (missed while no client ran, dropped by the catch-up policy). Summed over the fleet, each tick counts once.",
		}, []string{"schedule", "outcome"}),
		lagDesc: prometheus.NewDesc("redeq_schedule_lag_seconds",
			"How long ago the first tick of a schedule whose job was not added yet fell due (the server's clock); 0 while each tick waits ahead and while paused. Read at scrape (cached).", []string{"schedule"}, nil),
		lastTickDesc: prometheus.NewDesc("redeq_schedule_last_tick_timestamp_seconds",
			"Unix time of the latest tick of a schedule, at or before now, whose job was added; 0 when none was. Read at scrape (cached).", []string{"schedule"}, nil),
		jobsDesc:      prometheus.NewDesc("redeq_jobs", "Jobs of a topic by state, read from Redis at scrape (cached).", []string{"topic", "state"}, nil),
		consumersDesc: prometheus.NewDesc("redeq_consumers", "Consumers that heartbeat for a topic, read at scrape (cached).", []string{"topic"}, nil),
		overdueDesc: prometheus.NewDesc("redeq_oldest_overdue_seconds",
			"How long ago the oldest job that is due and not started fell due; 0 when none waits. Read at scrape (cached).", []string{"topic"}, nil),
	}
	if opts.AsynqNames {
		x.asynq = newAsynqMetrics()
	}
	return x
}

// Register makes a Collector c's Observer and registers it with reg. When
// either refuses it, it is neither: c can take another Observer.
func Register(c *redeq.Client, reg prometheus.Registerer, opts Options) (*Collector, error) {
	col := New(c, opts)
	if err := reg.Register(col); err != nil {
		return nil, err
	}
	if err := c.Observe(col); err != nil {
		reg.Unregister(col)
		return nil, err
	}
	return col, nil
}

// JobAdded implements redeq.Observer.
func (x *Collector) JobAdded(topic string) {
	x.topics.Get(topic, newTopicSeries).added.get(func() prometheus.Counter { return x.added.WithLabelValues(topic) }).Inc()
}

// JobDelivered implements redeq.Observer; an unknown lateness is no sample.
func (x *Collector) JobDelivered(job *redeq.Job, lateness time.Duration) {
	if lateness < 0 {
		return
	}
	first := 0
	if job.Attempt == 0 {
		first = 1
	}
	x.topics.Get(job.Topic, newTopicSeries).lateness[first].get(func() prometheus.Observer {
		return x.lateness.WithLabelValues(job.Topic, strconv.FormatBool(first == 1))
	}).Observe(lateness.Seconds())
}

// JobDone implements redeq.Observer.
func (x *Collector) JobDone(job *redeq.Job, o redeq.Outcome, took time.Duration, err error) {
	ts := x.topics.Get(job.Topic, newTopicSeries)
	processed := func() prometheus.Counter { return x.processed.WithLabelValues(job.Topic, string(o)) }
	if i := outcomeIndex(o); i >= 0 {
		ts.processed[i].get(processed).Inc()
	} else {
		processed().Inc()
	}
	ts.duration.get(func() prometheus.Observer { return x.duration.WithLabelValues(job.Topic) }).Observe(took.Seconds())
	if x.asynq != nil {
		x.asynq.done(ts, job.Topic, o, err)
	}
}

// JobsReturned implements redeq.ReturnObserver.
func (x *Collector) JobsReturned(topic string, n int, recovered bool) {
	i, reason := 0, "rollback"
	if recovered {
		i, reason = 1, "recovered"
	}
	x.topics.Get(topic, newTopicSeries).returned[i].get(func() prometheus.Counter {
		return x.returned.WithLabelValues(topic, reason)
	}).Add(float64(n))
}

// TicksAdded implements redeq.ScheduleObserver.
func (x *Collector) TicksAdded(schedule, _ string, n int) {
	x.ticks.WithLabelValues(schedule, "run").Add(float64(n))
}

// TicksSkipped implements redeq.ScheduleObserver.
func (x *Collector) TicksSkipped(schedule, _ string, n int64) {
	x.ticks.WithLabelValues(schedule, "skipped").Add(float64(n))
}

// Describe implements prometheus.Collector.
func (x *Collector) Describe(ch chan<- *prometheus.Desc) {
	x.added.Describe(ch)
	x.processed.Describe(ch)
	x.returned.Describe(ch)
	x.lateness.Describe(ch)
	x.duration.Describe(ch)
	x.statsErrs.Describe(ch)
	x.ticks.Describe(ch)
	ch <- x.lagDesc
	ch <- x.lastTickDesc
	ch <- x.jobsDesc
	ch <- x.consumersDesc
	ch <- x.overdueDesc
	if x.asynq != nil {
		x.asynq.describe(ch)
	}
}

// Collect implements prometheus.Collector. Job counts and the oldest
// overdue job are read from Redis at most once per CacheFor: one Stats per
// topic, one OldestOverdue for all of them, and Schedules. Each schedule
// read has its two ticks series, at 0 until this client counts a tick.
func (x *Collector) Collect(ch chan<- prometheus.Metric) {
	x.added.Collect(ch)
	x.processed.Collect(ch)
	x.returned.Collect(ch)
	x.lateness.Collect(ch)
	x.duration.Collect(ch)
	stats, overdue, sched := x.read()
	x.statsErrs.Collect(ch)
	for _, in := range sched {
		x.ticks.WithLabelValues(in.Name, "run")
		x.ticks.WithLabelValues(in.Name, "skipped")
		ch <- prometheus.MustNewConstMetric(x.lagDesc, prometheus.GaugeValue, in.Lag.Seconds(), in.Name)
		last := 0.0
		if !in.LastTick.IsZero() {
			last = float64(in.LastTick.UnixMilli()) / 1000
		}
		ch <- prometheus.MustNewConstMetric(x.lastTickDesc, prometheus.GaugeValue, last, in.Name)
	}
	x.ticks.Collect(ch)
	for topic, d := range overdue {
		ch <- prometheus.MustNewConstMetric(x.overdueDesc, prometheus.GaugeValue, d.Seconds(), topic)
	}
	if x.asynq != nil {
		x.asynq.collect(ch, stats, overdue)
	}
	for topic, st := range stats {
		for _, s := range []struct {
			state string
			n     int64
		}{
			{"scheduled", st.Scheduled}, {"ready", st.Ready}, {"in_flight", st.InFlight},
			{"un_ack", st.UnAck}, {"dead", st.Dead},
		} {
			ch <- prometheus.MustNewConstMetric(x.jobsDesc, prometheus.GaugeValue, float64(s.n), topic, s.state)
		}
		ch <- prometheus.MustNewConstMetric(x.consumersDesc, prometheus.GaugeValue, float64(st.Consumers), topic)
	}
}

// read returns the job counts, the oldest overdue times and the
// schedules, read again when older than CacheFor. A failed read keeps the
// last values of that topic, or the last schedules.
func (x *Collector) read() (map[string]redeq.Stats, map[string]time.Duration, []redeq.ScheduleInfo) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.stats != nil && x.now().Sub(x.readAt) < x.opts.CacheFor {
		return x.stats, x.overdue, x.sched
	}
	ctx, cancel := context.WithTimeout(context.Background(), x.opts.Timeout)
	defer cancel()
	if sched, err := x.c.Schedules(ctx); err != nil {
		x.statsErrs.Inc()
	} else {
		x.sched = sched
	}
	topics := x.opts.Topics
	if topics == nil {
		infos, err := x.c.Topics(ctx)
		if err != nil {
			x.statsErrs.Inc()
			return x.stats, x.overdue, x.sched
		}
		for _, ti := range infos {
			topics = append(topics, ti.Name)
		}
	}
	if len(topics) > x.opts.MaxTopics {
		topics = topics[:x.opts.MaxTopics]
	}
	fresh := make(map[string]redeq.Stats, len(topics))
	for _, t := range topics {
		st, err := x.c.Stats(ctx, t)
		if err != nil {
			x.statsErrs.Inc()
			if old, ok := x.stats[t]; ok {
				fresh[t] = old
			}
			continue
		}
		fresh[t] = st
	}
	overdue, err := x.c.OldestOverdue(ctx, topics...)
	if err != nil {
		x.statsErrs.Inc()
		overdue = make(map[string]time.Duration, len(topics))
		for _, t := range topics {
			if d, ok := x.overdue[t]; ok {
				overdue[t] = d
			}
		}
	}
	x.stats, x.overdue, x.readAt = fresh, overdue, x.now()
	return fresh, overdue, x.sched
}

var (
	_ redeq.ReturnObserver   = (*Collector)(nil)
	_ redeq.ScheduleObserver = (*Collector)(nil)
)

// Added is redeq_jobs_added_total, for tests and custom views. The
// Collector keeps counting into the series it has resolved: deleting them
// (Reset, DeleteLabelValues) loses what it counts after.
func (x *Collector) Added() *prometheus.CounterVec { return x.added }

// Processed is redeq_jobs_processed_total; as with Added, deleting its
// series loses what the Collector counts after.
func (x *Collector) Processed() *prometheus.CounterVec { return x.processed }

// Ticks is redeq_schedule_ticks_total; as with Added, deleting its
// series loses what the Collector counts after.
func (x *Collector) Ticks() *prometheus.CounterVec { return x.ticks }

// StatsErrors is redeq_stats_errors_total.
func (x *Collector) StatsErrors() prometheus.Counter { return x.statsErrs }

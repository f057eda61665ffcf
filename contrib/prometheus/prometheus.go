// Package redeqprom exports redeq's metrics to Prometheus: counters and
// histograms fed by a redeq.Observer, and per-topic job counts read from
// Redis at scrape time, cached.
//
//	col, err := redeqprom.Register(c, prometheus.DefaultRegisterer, redeqprom.Options{})
//
// Every series carries a prefix label, the client's key prefix, so that
// two deployments sharing one Prometheus do not merge. Metrics (see
// docs/observability.md for what to alert on, alerts.yml for the rules):
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
//	redeq_topics_dropped                               gauge: topics past MaxTopics at the last read
//	redeq_topic_processed_total{topic}                 counter, ModeExporter: from Redis (History)
//	redeq_topic_failed_total{topic}                    counter, ModeExporter: from Redis (History)
//
// The counters of every topic the collector knows of, and of every
// outcome, are exported from zero before the first event, so that
// increase() sees that event. A fleet runs ModeObserved in every service
// and one ModeExporter collector beside it (see Mode).
//
// With Options.AsynqNames it also exports the names of asynq's
// x/metrics collector, so that dashboards built for asynq work (see
// docs/observability.md for what maps and what does not).
package redeqprom

import (
	"context"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/internal/topiccache"
	"github.com/redeq-go/redeq/redeq"
)

// LatenessBuckets are the lateness histogram's upper bounds, seconds: from
// a millisecond (a healthy mover) to ten minutes (a stalled fleet).
var LatenessBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}

// DurationBuckets are the handler duration histogram's upper bounds, seconds.
var DurationBuckets = []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// Mode picks what a Collector exports.
type Mode int

const (
	// ModeAll exports what this client observes (counters, histograms)
	// and what a scrape reads from Redis (the gauges): one service, or
	// a few. The default.
	ModeAll Mode = iota
	// ModeObserved exports only what this client observes and reads
	// nothing from Redis at a scrape: for each instance of a fleet
	// beside one ModeExporter collector, so that the gauges, the same
	// from every instance, are exported once.
	ModeObserved
	// ModeExporter exports only what a scrape reads from Redis: the
	// gauges, and the processed and failed counts every consumer
	// records in Redis (Client.History), as the counters
	// redeq_topic_processed_total and redeq_topic_failed_total (and
	// asynq's processed and failed names, with AsynqNames). It observes
	// nothing: Register does not make it the client's Observer. For a
	// standalone exporter that serves a fleet.
	ModeExporter
)

// DefaultMaxTopics is Options.MaxTopics's default.
const DefaultMaxTopics = 1000

// Options tunes a Collector. Zero values take the defaults.
type Options struct {
	// Mode picks what the Collector exports. Defaults to ModeAll.
	Mode Mode
	// Topics are the topics whose job counts a scrape reads. Defaults to
	// every topic (Client.Topics), at most MaxTopics of them.
	Topics []string
	// MaxTopics bounds the topics a scrape reads, so that a scrape's cost
	// does not grow with the topics ever used: the first MaxTopics by
	// name are read, and redeq_topics_dropped says how many were not
	// (with a log line when that number changes). Defaults to
	// DefaultMaxTopics (1000).
	MaxTopics int
	// Logger receives a line when topics are dropped. Defaults to the
	// client's (config.Config.Logger), else slog.Default().
	Logger *slog.Logger
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
	dropped   prometheus.Gauge
	prefix    string
	log       *slog.Logger
	ticks     *prometheus.CounterVec

	jobsDesc, consumersDesc, overdueDesc *prometheus.Desc
	// The global limits of the topics that have them (see Stats).
	limitDesc, limitedDesc              *prometheus.Desc
	topicProcessedDesc, topicFailedDesc *prometheus.Desc
	lagDesc, lastTickDesc               *prometheus.Desc

	asynq *asynqMetrics // nil unless Options.AsynqNames

	topics topiccache.Cache[*topicSeries]

	mu       sync.Mutex // serializes scrape-time reads
	readAt   time.Time
	stats    map[string]redeq.Stats
	sched    []redeq.ScheduleInfo
	overdue  map[string]time.Duration
	now      func() time.Time
	zeroed   map[string]bool // topics whose counters were exported from zero at a scrape
	lastDrop int
	totals   *totals // ModeExporter: processed and failed counts read from Redis
}

// New returns a Collector of c's metrics. It observes nothing until it is
// c's Observer (see Register, or redeq.Observers to combine it).
func New(c *redeq.Client, opts Options) *Collector {
	if opts.MaxTopics <= 0 {
		opts.MaxTopics = DefaultMaxTopics
	}
	if opts.CacheFor <= 0 {
		opts.CacheFor = 10 * time.Second
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 2 * time.Second
	}
	prefix := config.Default().Prefix
	log := opts.Logger
	if c != nil {
		prefix = c.Config().Prefix
		if log == nil {
			log = c.Config().Logger
		}
	}
	if log == nil {
		log = slog.Default()
	}
	cl := prometheus.Labels{"prefix": prefix}
	x := &Collector{
		c: c, opts: opts, now: time.Now, prefix: prefix, log: log, zeroed: map[string]bool{},
		added: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redeq_jobs_added_total", Help: "Jobs stored by Add, AddBatch, AddTyped or a Put that added.", ConstLabels: cl,
		}, []string{"topic"}),
		processed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redeq_jobs_processed_total", Help: "Deliveries by outcome: ack, rejoin, retry, dead, unack, interrupted, broadcast.", ConstLabels: cl,
		}, []string{"topic", "outcome"}),
		returned: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "redeq_jobs_returned_total", Help: "In-flight jobs returned unspent: recovered from a silent consumer, or rolled back at shutdown.", ConstLabels: cl,
		}, []string{"topic", "reason"}),
		lateness: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "redeq_job_lateness_seconds", Help: "Handler start minus the job's due time.", Buckets: LatenessBuckets, ConstLabels: cl,
		}, []string{"topic", "first_attempt"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "redeq_job_duration_seconds", Help: "How long handlers ran.", Buckets: DurationBuckets, ConstLabels: cl,
		}, []string{"topic"}),
		statsErrs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "redeq_stats_errors_total", Help: "Scrape-time reads of job counts that failed; the last counts read are reported.", ConstLabels: cl,
		}),
		dropped: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "redeq_topics_dropped", Help: "Topics not read at the last scrape-time read because there were more than MaxTopics; 0 when none.", ConstLabels: cl,
		}),
		jobsDesc:      prometheus.NewDesc("redeq_jobs", "Jobs of a topic by state, read from Redis at scrape (cached).", []string{"topic", "state"}, cl),
		consumersDesc: prometheus.NewDesc("redeq_consumers", "Consumers that heartbeat for a topic, read at scrape (cached).", []string{"topic"}, cl),
		limitDesc: prometheus.NewDesc("redeq_limit", "A topic's global limits, for the topics that have them: max_running, or rate (jobs started per period_seconds), read at scrape (cached).",
			[]string{"topic", "limit", "key"}, cl),
		limitedDesc: prometheus.NewDesc("redeq_limited_jobs", "Jobs of a topic with global limits: running (holding a slot) or waiting (held back by a limit), read at scrape (cached).",
			[]string{"topic", "state"}, cl),
		ticks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name:        "redeq_schedule_ticks_total",
			Help:        "Ticks of a periodic schedule this client handled: run (its job added) or skipped (missed while no client ran and dropped by the catch-up policy, or passed while paused). Summed over the fleet, each tick counts once.",
			ConstLabels: cl,
		}, []string{"schedule", "outcome"}),
		lagDesc: prometheus.NewDesc("redeq_schedule_lag_seconds",
			"How long ago the first tick of a schedule whose job was not added yet fell due (the server's clock); 0 while each tick waits ahead and while paused. Read at scrape (cached).", []string{"schedule"}, cl),
		lastTickDesc: prometheus.NewDesc("redeq_schedule_last_tick_timestamp_seconds",
			"Unix time of the latest tick of a schedule, at or before now, whose job was added; 0 when none was. Read at scrape (cached).", []string{"schedule"}, cl),
		overdueDesc: prometheus.NewDesc("redeq_oldest_overdue_seconds",
			"How long ago the oldest job that is due and not started fell due; 0 when none waits. Read at scrape (cached).", []string{"topic"}, cl),
		topicProcessedDesc: prometheus.NewDesc("redeq_topic_processed_total",
			"Deliveries of a topic whose outcome was applied, by every consumer, as recorded in Redis; counted from this exporter's start.", []string{"topic"}, cl),
		topicFailedDesc: prometheus.NewDesc("redeq_topic_failed_total",
			"Processed deliveries of a topic that failed (retried or dead), by every consumer, as recorded in Redis; counted from this exporter's start.", []string{"topic"}, cl),
	}
	if opts.AsynqNames {
		x.asynq = newAsynqMetrics(cl)
	}
	if opts.Mode == ModeExporter {
		x.totals = newTotals()
	}
	return x
}

// observes reports whether x exports what its client observes.
func (x *Collector) observes() bool { return x.opts.Mode != ModeExporter }

// reads reports whether x reads Redis at a scrape.
func (x *Collector) reads() bool { return x.opts.Mode != ModeObserved }

// zero makes the counters of topic exist at zero, for every outcome and
// reason, so that the first event after a restart is a rise.
func (x *Collector) zero(topic string) {
	x.added.WithLabelValues(topic)
	for _, o := range outcomes {
		x.processed.WithLabelValues(topic, string(o))
	}
	x.returned.WithLabelValues(topic, "rollback")
	x.returned.WithLabelValues(topic, "recovered")
	if x.asynq != nil {
		x.asynq.processed.WithLabelValues(topic)
		x.asynq.failed.WithLabelValues(topic)
	}
}

// series returns topic's cached series; a topic met for the first time
// has its counters exported from zero.
func (x *Collector) series(topic string) *topicSeries {
	return x.topics.Get(topic, func(t string) *topicSeries {
		x.zero(t)
		return new(topicSeries)
	})
}

// Register makes a Collector c's Observer and registers it with reg. When
// either refuses it, it is neither: c can take another Observer. A
// ModeExporter collector is registered only: it observes nothing.
func Register(c *redeq.Client, reg prometheus.Registerer, opts Options) (*Collector, error) {
	col := New(c, opts)
	if err := reg.Register(col); err != nil {
		return nil, err
	}
	if opts.Mode == ModeExporter {
		return col, nil
	}
	if err := c.Observe(col); err != nil {
		reg.Unregister(col)
		return nil, err
	}
	return col, nil
}

// JobAdded implements redeq.Observer.
func (x *Collector) JobAdded(topic string) {
	x.series(topic).added.get(func() prometheus.Counter { return x.added.WithLabelValues(topic) }).Inc()
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
	x.series(job.Topic).lateness[first].get(func() prometheus.Observer {
		return x.lateness.WithLabelValues(job.Topic, strconv.FormatBool(first == 1))
	}).Observe(lateness.Seconds())
}

// JobDone implements redeq.Observer.
func (x *Collector) JobDone(job *redeq.Job, o redeq.Outcome, took time.Duration, err error) {
	ts := x.series(job.Topic)
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
	x.series(topic).returned[i].get(func() prometheus.Counter {
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
	if x.observes() {
		x.added.Describe(ch)
		x.processed.Describe(ch)
		x.returned.Describe(ch)
		x.lateness.Describe(ch)
		x.duration.Describe(ch)
		x.ticks.Describe(ch)
	}
	if x.reads() {
		x.statsErrs.Describe(ch)
		x.dropped.Describe(ch)
		ch <- x.jobsDesc
		ch <- x.consumersDesc
		ch <- x.limitDesc
		ch <- x.limitedDesc
		ch <- x.overdueDesc
		ch <- x.lagDesc
		ch <- x.lastTickDesc
	}
	if x.totals != nil {
		ch <- x.topicProcessedDesc
		ch <- x.topicFailedDesc
	}
	if x.asynq != nil {
		x.asynq.describe(ch, x.observes(), x.reads())
	}
}

// Collect implements prometheus.Collector. Job counts and the oldest
// overdue job are read from Redis at most once per CacheFor: one Stats per
// topic, one OldestOverdue for all of them, and Schedules. Each schedule
// read has its two ticks series, at 0 until this client counts a tick.
func (x *Collector) Collect(ch chan<- prometheus.Metric) {
	if !x.reads() {
		x.collectObserved(ch)
		if x.asynq != nil {
			x.asynq.collectObserved(ch)
		}
		return
	}
	stats, overdue, sched := x.read() // first: it exports the counters of the topics it reads from zero
	for _, in := range sched {
		if x.observes() {
			x.ticks.WithLabelValues(in.Name, "run")
			x.ticks.WithLabelValues(in.Name, "skipped")
		}
		ch <- prometheus.MustNewConstMetric(x.lagDesc, prometheus.GaugeValue, in.Lag.Seconds(), in.Name)
		last := 0.0
		if !in.LastTick.IsZero() {
			last = float64(in.LastTick.UnixMilli()) / 1000
		}
		ch <- prometheus.MustNewConstMetric(x.lastTickDesc, prometheus.GaugeValue, last, in.Name)
	}
	if x.observes() {
		x.collectObserved(ch)
	}
	x.statsErrs.Collect(ch)
	x.dropped.Collect(ch)
	for topic, d := range overdue {
		ch <- prometheus.MustNewConstMetric(x.overdueDesc, prometheus.GaugeValue, d.Seconds(), topic)
	}
	if x.totals != nil {
		for topic, n := range x.totals.snapshot() {
			ch <- prometheus.MustNewConstMetric(x.topicProcessedDesc, prometheus.CounterValue, n.processed, topic)
			ch <- prometheus.MustNewConstMetric(x.topicFailedDesc, prometheus.CounterValue, n.failed, topic)
			if x.asynq != nil {
				x.asynq.collectTotals(ch, topic, n.processed, n.failed)
			}
		}
	}
	if x.asynq != nil {
		if x.observes() {
			x.asynq.collectObserved(ch)
		}
		x.asynq.collect(ch, stats, overdue)
	}
	for topic, st := range stats {
		for _, s := range []struct {
			state string
			n     int64
		}{
			{"scheduled", st.Scheduled}, {"ready", st.Ready}, {"inflight", st.InFlight},
			{"unack", st.UnAck}, {"dead", st.Dead},
		} {
			ch <- prometheus.MustNewConstMetric(x.jobsDesc, prometheus.GaugeValue, float64(s.n), topic, s.state)
		}
		ch <- prometheus.MustNewConstMetric(x.consumersDesc, prometheus.GaugeValue, float64(st.Consumers), topic)
		if l := st.Limits; l.Set() {
			if l.MaxRunning > 0 {
				ch <- prometheus.MustNewConstMetric(x.limitDesc, prometheus.GaugeValue, float64(l.MaxRunning), topic, "max_running", l.Key)
			}
			if l.Rate > 0 {
				ch <- prometheus.MustNewConstMetric(x.limitDesc, prometheus.GaugeValue, float64(l.Rate), topic, "rate", l.Key)
				ch <- prometheus.MustNewConstMetric(x.limitDesc, prometheus.GaugeValue, l.Per.Seconds(), topic, "period_seconds", l.Key)
			}
			ch <- prometheus.MustNewConstMetric(x.limitedDesc, prometheus.GaugeValue, float64(st.Running), topic, "running")
			ch <- prometheus.MustNewConstMetric(x.limitedDesc, prometheus.GaugeValue, float64(st.Waiting), topic, "waiting")
		}
	}
}

func (x *Collector) collectObserved(ch chan<- prometheus.Metric) {
	x.added.Collect(ch)
	x.processed.Collect(ch)
	x.returned.Collect(ch)
	x.lateness.Collect(ch)
	x.duration.Collect(ch)
	x.ticks.Collect(ch)
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
	drop := max(len(topics)-x.opts.MaxTopics, 0)
	if drop > 0 {
		topics = topics[:x.opts.MaxTopics]
	}
	x.dropped.Set(float64(drop))
	if drop != x.lastDrop {
		if drop > 0 {
			x.log.Warn("redeqprom: more topics than MaxTopics; the rest are not exported",
				"prefix", x.prefix, "max_topics", x.opts.MaxTopics, "dropped", drop, "first_dropped_after", topics[len(topics)-1])
		} else {
			x.log.Info("redeqprom: every topic is exported again", "prefix", x.prefix)
		}
		x.lastDrop = drop
	}
	if x.observes() {
		for _, t := range topics {
			if !x.zeroed[t] && len(x.zeroed) < x.opts.MaxTopics {
				x.zero(t)
				x.zeroed[t] = true
			}
		}
	}
	if x.totals != nil {
		x.totals.read(ctx, x.c, topics, x.statsErrs)
	}
	fresh := make(map[string]redeq.Stats, len(topics))
	var fmu sync.Mutex
	each(topics, func(t string) {
		st, err := x.c.Stats(ctx, t)
		fmu.Lock()
		defer fmu.Unlock()
		if err != nil {
			x.statsErrs.Inc()
			if old, ok := x.stats[t]; ok {
				fresh[t] = old
			}
			return
		}
		fresh[t] = st
	})
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

// readers is how many topics a scrape reads at once: a topic's Stats is
// three round trips, so 1000 topics read one after the other would take
// seconds.
const readers = 16

// each runs f for every topic, readers at a time, and returns when all
// have returned.
func each(topics []string, f func(topic string)) {
	next := make(chan string)
	var wg sync.WaitGroup
	for range min(readers, len(topics)) {
		wg.Go(func() {
			for t := range next {
				f(t)
			}
		})
	}
	for _, t := range topics {
		next <- t
	}
	close(next)
	wg.Wait()
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

package main

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	redeqotel "github.com/redeq-go/redeq/contrib/otel"
	redeqprom "github.com/redeq-go/redeq/contrib/prometheus"
	"github.com/redeq-go/redeq/redeq"
)

// observability is the OpenTelemetry and Prometheus integrations as a
// service installs them: every span recorded (the SDK's default sampler)
// and handed to a batch span processor, whose exporter counts and drops
// them; OpenTelemetry metrics into a reader; the Prometheus collector in a
// registry.
type observability struct {
	ratio float64 // of traces sampled; 1: every span recorded
	tp    *sdktrace.TracerProvider
	mp    *sdkmetric.MeterProvider
	rd    *sdkmetric.ManualReader
	in    *redeqotel.Instrumentation
	reg   *prometheus.Registry
	spans atomic.Int64 // spans exported
}

func newObservability(ratio float64) *observability {
	o := &observability{ratio: ratio, rd: sdkmetric.NewManualReader(), reg: prometheus.NewRegistry()}
	sampler := sdktrace.ParentBased(sdktrace.AlwaysSample())
	if ratio < 1 {
		sampler = sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))
	}
	o.tp = sdktrace.NewTracerProvider(sdktrace.WithBatcher(counting{&o.spans}), sdktrace.WithSampler(sampler))
	o.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(o.rd))
	in, err := redeqotel.New(redeqotel.Options{TracerProvider: o.tp, MeterProvider: o.mp})
	if err != nil {
		fail("redeqotel.New: %v", err)
	}
	o.in = in
	return o
}

// install puts both integrations on c, before it starts: the tracing
// middleware, and both Observers. Only the first client's collector is
// registered (their metric names are the same); the others still observe.
func (o *observability) install(c *redeq.Client, register bool) {
	col := redeqprom.New(c, redeqprom.Options{})
	if register {
		if err := o.reg.Register(col); err != nil {
			fail("prometheus register: %v", err)
		}
	}
	if err := c.Use(o.in.Middleware()); err != nil {
		fail("redeq Use: %v", err)
	}
	if err := c.Observe(redeq.Observers(o.in, col)); err != nil {
		fail("redeq Observe: %v", err)
	}
}

// check fails unless the integrations saw what ran: n processed jobs
// counted by Prometheus and by OpenTelemetry, and 2n spans exported (a
// producer span per job and a consumer span per delivery), or with a
// sampler some but fewer.
func (o *observability) check(n int) {
	ctx := context.Background()
	if err := o.tp.ForceFlush(ctx); err != nil {
		fail("flush spans: %v", err)
	}
	if got := o.spans.Load(); got == 0 || (o.ratio == 1 && got < int64(2*n)) || (o.ratio < 1 && got >= int64(2*n)) {
		fail("overhead: %d spans exported for %d jobs with %v of traces sampled", got, n, o.ratio)
	}
	mfs, err := o.reg.Gather()
	if err != nil {
		fail("prometheus gather: %v", err)
	}
	var prom float64
	for _, mf := range mfs {
		if mf.GetName() == "redeq_jobs_processed_total" {
			for _, m := range mf.GetMetric() {
				prom += m.GetCounter().GetValue()
			}
		}
	}
	var rm metricdata.ResourceMetrics
	if err := o.rd.Collect(ctx, &rm); err != nil {
		fail("collect metrics: %v", err)
	}
	var otel int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "redeq.jobs.processed" {
				for _, dp := range sum.DataPoints {
					otel += dp.Value
				}
			}
		}
	}
	if prom != float64(n) || otel != int64(n) {
		fail("overhead: processed counted %v by Prometheus and %d by OpenTelemetry, want %d", prom, otel, n)
	}
}

func (o *observability) close() {
	ctx := context.Background()
	_ = o.tp.Shutdown(ctx)
	_ = o.mp.Shutdown(ctx)
}

// counting is a span exporter that counts the spans and drops them.
type counting struct{ n *atomic.Int64 }

func (e counting) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.n.Add(int64(len(spans)))
	return nil
}
func (counting) Shutdown(context.Context) error { return nil }

// tracedRedeq is redeq with both integrations on: producer spans around
// its adds, whose trace context travels in the jobs' headers, and the
// consumer's deliveries traced and measured.
type tracedRedeq struct {
	*redeqSystem
	obs *observability
}

func (s tracedRedeq) EnqueueBatch(ctx context.Context, ids []string, body []byte, at time.Time) error {
	jobs := make([]*redeq.Job, len(ids))
	spans := make([]trace.Span, len(ids))
	for i, id := range ids {
		jobs[i] = &redeq.Job{Topic: topic, ID: id, Body: body, RunAt: at}
		_, spans[i] = s.obs.in.StartProducer(ctx, jobs[i])
	}
	err := s.c.AddBatch(ctx, jobs)
	for _, span := range spans {
		span.End()
	}
	return err
}

func (s tracedRedeq) Consume(workers int, handle func(ctx context.Context, id string, body []byte, attempt int)) func() {
	return s.consume(workers, handle, func(c *redeq.Client) { s.obs.install(c, true) })
}

// overheadRatio names the row of the overhead measurement's ratio.
const overheadRatio = "drain with the integrations on / off"

// overheadRows names the rows of the overhead measurement, for the table
// that shows them.
var overheadRows = []string{
	"drain, integrations off",
	"drain, OpenTelemetry and Prometheus on",
	overheadRatio,
	"drain with the integrations on, 1 trace in 10 sampled / off",
	"client CPU per job (adds and drain), integrations off",
	"client CPU per job (adds and drain), integrations on",
}

// sampledRatio is the share of traces the "sampled" mode records.
const sampledRatio = 0.1

// overheadRound is one round of the overhead measurement: the drain with
// the integrations off and on.
type overheadRound struct {
	Order    []string           `json:"order"` // which ran first
	Rate     map[string]float64 `json:"rate"`  // jobs per second, by "off" and "on"
	ClientUS map[string]float64 `json:"client_us"`
	ServerUS map[string]float64 `json:"server_us"`
}

func (r overheadRound) ratio() float64 { return r.Rate["on"] / r.Rate["off"] }

// overhead measures what the OpenTelemetry and Prometheus integrations
// cost a drain (the goal: at least 0.9x of the drain without them): the
// same drain as the drain measurement, with them off, on with every span
// recorded, and on with 1 trace in 10 sampled, in interleaved rounds that
// alternate which goes first. The published ratios are the medians of the
// rounds' ratios.
func (b *bench) overhead() {
	n, rounds := b.sz.Drain, 2*b.sz.Rounds+1
	fmt.Printf("drain of %d due jobs, 16 workers, OpenTelemetry and Prometheus off and on, %d interleaved rounds\n", n, rounds)
	var all []overheadRound
	for r := range rounds {
		order := []string{"off", "on", "sampled"}
		if r%2 == 1 {
			slices.Reverse(order)
		}
		round := overheadRound{Order: order, Rate: map[string]float64{}, ClientUS: map[string]float64{}, ServerUS: map[string]float64{}}
		for _, mode := range order {
			b.flush()
			runtime.GC() // none of the modes pays for the garbage of the one before

			var s system = newRedeq(b.newClient, b.cleanup)
			var obs *observability
			if mode != "off" {
				ratio := 1.0
				if mode == "sampled" {
					ratio = sampledRatio
				}
				obs = newObservability(ratio)
				rs := s.(*redeqSystem)
				obs.install(rs.c, false)
				s = tracedRedeq{rs, obs}
			}
			before := b.costs()
			c := b.drainOnce(s, n)
			cost := b.costs().since(before)
			s.Close()
			if obs != nil {
				obs.check(n)
				obs.close()
			}
			round.Rate[mode] = c.rate
			round.ServerUS[mode] = c.cpuUS
			// The client's CPU over the round covers the adds too; the
			// drain's share is what differs between the modes.
			round.ClientUS[mode] = cost.clientS / float64(n) * 1e6
		}
		fmt.Printf("  round %d: %s\n", r+1, round)
		all = append(all, round)
	}
	b.res.Overhead = all
	ratios, sampled := make([]float64, len(all)), make([]float64, len(all))
	var rs, ss []string
	for i, r := range all {
		ratios[i], sampled[i] = r.ratio(), r.Rate["sampled"]/r.Rate["off"]
		rs = append(rs, fmt.Sprintf("%.2f", ratios[i]))
		ss = append(ss, fmt.Sprintf("%.2f", sampled[i]))
	}
	pick := func(mode string, f func(overheadRound) map[string]float64) float64 {
		var v []float64
		for _, r := range all {
			v = append(v, f(r)[mode])
		}
		return median(v)
	}
	rate := func(r overheadRound) map[string]float64 { return r.Rate }
	client := func(r overheadRound) map[string]float64 { return r.ClientUS }
	b.res.Rows = append(b.res.Rows,
		row{Name: overheadRows[0], Unit: "jobs/s", Redeq: pick("off", rate), Better: "higher", Solo: true, Comment: "median of the rounds"},
		row{Name: overheadRows[1], Unit: "jobs/s", Redeq: pick("on", rate), Better: "higher", Solo: true, Comment: "median of the rounds"},
		row{Name: overheadRatio, Unit: "ratio", Redeq: median(ratios), Better: "higher", Solo: true,
			Comment: "every span recorded; median of the rounds' ratios: " + strings.Join(rs, ", ")},
		row{Name: overheadRows[3], Unit: "ratio", Redeq: median(sampled), Better: "higher", Solo: true,
			Comment: "ParentBased(TraceIDRatioBased(0.1)); median of the rounds' ratios: " + strings.Join(ss, ", ")},
		row{Name: overheadRows[4], Unit: "µs", Redeq: pick("off", client), Better: "lower", Solo: true, Comment: "median of the rounds"},
		row{Name: overheadRows[5], Unit: "µs", Redeq: pick("on", client), Better: "lower", Solo: true, Comment: "median of the rounds"},
	)
	for _, r := range b.res.Rows[len(b.res.Rows)-len(overheadRows):] {
		fmt.Printf("  %-55s %10.2f %s\n", r.Name, r.Redeq, r.Unit)
	}
}

func (r overheadRound) String() string {
	var b strings.Builder
	for _, m := range r.Order {
		fmt.Fprintf(&b, "%-3s %7.0f/s (client %5.1f µs, server %5.1f µs per job)  ", m, r.Rate[m], r.ClientUS[m], r.ServerUS[m])
	}
	fmt.Fprintf(&b, "on/off %.2fx sampled/off %.2fx", r.ratio(), r.Rate["sampled"]/r.Rate["off"])
	return b.String()
}

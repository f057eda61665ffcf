package main

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/redeq-go/redeq/redeq"
)

// limitedRedeq is redeq whose consumer listens with global limits that
// never bind: what the bookkeeping of the limits costs a drain.
type limitedRedeq struct {
	*redeqSystem
	opts []redeq.ListenerOption
}

func (s limitedRedeq) Consume(workers int, handle func(ctx context.Context, id string, body []byte, attempt int)) func() {
	h := func(ctx context.Context, job *redeq.Job, ch *redeq.Channel) error {
		handle(ctx, job.ID, job.Body, job.Attempt)
		ch.Ack()
		return nil
	}
	opts := append([]redeq.ListenerOption{redeq.WithWorkers(workers)}, s.opts...)
	return s.consumeWith(redeq.ListenerFunc(topic, h, opts...), nil)
}

// limitModes are the limits measured against none: a MaxRunning above the
// workers, and the same with a rate above the drain's.
var limitModes = map[string][]redeq.ListenerOption{
	"off":  nil,
	"max":  {redeq.WithMaxRunning(10_000)},
	"rate": {redeq.WithMaxRunning(10_000), redeq.WithRateLimit(1_000_000, time.Second)},
}

// limitsRatio names the row of the limits measurement's ratio.
const limitsRatio = "drain with MaxRunning that never binds / without limits"

// limits measures what global limits that never bind cost a drain (the
// goal: at least 0.85x of the drain without them): the drain measurement's
// drain without limits, with MaxRunning 10,000, and with MaxRunning plus a
// rate of 1,000,000/s, in interleaved rounds that alternate which goes
// first; the ratios are the medians of the rounds'.
func (b *bench) limits() {
	n, rounds := b.sz.Drain, 2*b.sz.Rounds+1
	fmt.Printf("drain of %d due jobs, 16 workers, without limits and with limits that never bind, %d interleaved rounds\n", n, rounds)
	var maxR, rateR, off []float64
	cpu, cmds := map[string][]float64{}, map[string][]float64{}
	for r := range rounds {
		order := []string{"off", "max", "rate"}
		if r%2 == 1 {
			slices.Reverse(order)
		}
		rate := map[string]float64{}
		for _, mode := range order {
			b.flush()
			runtime.GC()
			rs := newRedeq(b.newClient, b.cleanup)
			var s system = rs
			if opts := limitModes[mode]; opts != nil {
				s = limitedRedeq{rs, opts}
			}
			c := b.drainOnce(s, n)
			rate[mode] = c.rate
			cpu[mode] = append(cpu[mode], c.cpuUS)
			cmds[mode] = append(cmds[mode], c.cmds)
			s.Close()
		}
		off = append(off, rate["off"])
		maxR = append(maxR, rate["max"]/rate["off"])
		rateR = append(rateR, rate["rate"]/rate["off"])
		fmt.Printf("  round %d (%s): off %.0f/s  max %.0f/s (%.2fx)  max+rate %.0f/s (%.2fx)  Redis CPU per job off/max/rate %.1f/%.1f/%.1f µs\n", r+1, strings.Join(order, ","),
			rate["off"], rate["max"], rate["max"]/rate["off"], rate["rate"], rate["rate"]/rate["off"],
			cpu["off"][r], cpu["max"][r], cpu["rate"][r])
	}
	fmtR := func(v []float64) string {
		var s []string
		for _, x := range v {
			s = append(s, fmt.Sprintf("%.2f", x))
		}
		return strings.Join(s, ", ")
	}
	b.res.Rows = append(b.res.Rows,
		row{Name: "drain, no limits (limits measurement)", Unit: "jobs/s", Redeq: median(off), Better: "higher", Solo: true, Comment: "median of the rounds"},
		row{Name: limitsRatio, Unit: "ratio", Redeq: median(maxR), Better: "higher", Solo: true,
			Comment: "WithMaxRunning(10000); median of the rounds' ratios: " + fmtR(maxR)},
		row{Name: "drain with MaxRunning and a rate that never bind / without limits", Unit: "ratio", Redeq: median(rateR), Better: "higher", Solo: true,
			Comment: "WithMaxRunning(10000), WithRateLimit(1000000, 1s); median of the rounds' ratios: " + fmtR(rateR)},
	)
	for _, mode := range []string{"off", "max", "rate"} {
		b.res.Rows = append(b.res.Rows,
			row{Name: "Redis CPU per drained job, limits " + mode, Unit: "µs", Redeq: median(cpu[mode]), Better: "lower", Solo: true, Comment: "median of the rounds"},
			row{Name: "redis commands per drained job, limits " + mode, Unit: "cmds", Redeq: median(cmds[mode]), Better: "lower", Solo: true, Comment: "median of the rounds; script-inner commands included"})
	}
	for _, r := range b.res.Rows[len(b.res.Rows)-9:] {
		fmt.Printf("  %-66s %8.2f %s\n", r.Name, r.Redeq, r.Unit)
	}
}

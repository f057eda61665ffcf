package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/redeq-go/redeq/internal/script"
	"github.com/redeq-go/redeq/ready"
)

// limitCostBody runs the limits' part of a fetch of 8 jobs, topic-wide:
// the check (limit_open), a lease per job (limit_record) and their
// writes (limit_flush), nothing else of the fetch; its starts go to the
// start log alone, as in a namespace at keys.FormatStartLog.
const limitCostBody = script.UsesLimits + `
local spec = limit_spec(ARGV[1])
if spec then limit_set_mode('log') end
local want, _, lk = limit_open(KEYS[1], spec, KEYS[2], KEYS[3], 8, false)
local base = tonumber(ARGV[2])
for i = 1, want do limit_record(lk, tostring(base + i), 'c', 'j' .. (base + i)) end
limit_flush(lk)
return want
`

// limitCost measures the server CPU of the limits' bookkeeping alone,
// per fetch of 8 jobs: 20,000 such fetches pipelined 100 at a time, with
// no limits, MaxRunning 1,000,000 and that plus a rate of 1,000,000 per
// 100 ms (a period well within the run, so that the window is full of the
// starts of the last period and old ones leave it at every fetch, as in a
// busy drain), in interleaved rounds; medians of the rounds.
// Unlike the drain, no consumer shares the machine's cores with it.
func (b *bench) limitCost() {
	const calls, rounds = 20_000, 5
	s := script.New(limitCostBody)
	specs := map[string]string{
		"off":  "",
		"max":  ready.Limits{MaxRunning: 1_000_000}.Spec(),
		"rate": ready.Limits{MaxRunning: 1_000_000, Rate: 1_000_000, Per: 100 * time.Millisecond}.Spec(),
	}
	keys := []string{"{limitcost}:limit:", "{limitcost}:ready", "{limitcost}:state"}
	fmt.Printf("limits' bookkeeping of %d fetches of 8 jobs, pipelined, %d interleaved rounds\n", calls, rounds)
	cpu := map[string][]float64{}
	for r := range rounds {
		order := []string{"off", "max", "rate"}
		if r%2 == 1 {
			order = []string{"rate", "max", "off"}
		}
		for _, mode := range order {
			b.flush()
			if err := s.Load(b.ctx, b.admin).Err(); err != nil {
				fail("load the limits' script: %v", err)
			}
			before := b.serverCPU()
			pipe := b.admin.Pipeline()
			for i := range calls {
				s.EvalSha(b.ctx, pipe, keys, specs[mode], i*8)
				if i%100 == 99 {
					if _, err := pipe.Exec(b.ctx); err != nil {
						fail("limits' script: %v", err)
					}
				}
			}
			cpu[mode] = append(cpu[mode], (b.serverCPU()-before)*1e6/calls)
		}
		fmt.Printf("  round %d (%s): Redis CPU per fetch off/max/rate %.1f/%.1f/%.1f µs\n", r+1, strings.Join(order, ","),
			cpu["off"][r], cpu["max"][r], cpu["rate"][r])
	}
	fmtR := func(v []float64) string {
		var s []string
		for _, x := range v {
			s = append(s, fmt.Sprintf("%.1f", x))
		}
		return strings.Join(s, ", ")
	}
	for _, mode := range []string{"off", "max", "rate"} {
		r := row{Name: "Redis CPU per fetch of 8 jobs, limits' bookkeeping alone, limits " + mode, Unit: "µs", Redeq: median(cpu[mode]),
			Better: "lower", Solo: true, Comment: "20,000 pipelined; median of the rounds: " + fmtR(cpu[mode])}
		b.res.Rows = append(b.res.Rows, r)
		fmt.Printf("  %-72s %8.1f %s\n", r.Name, r.Redeq, r.Unit)
	}
}

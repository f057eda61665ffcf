package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/redeq-go/redeq/ack"
	"github.com/redeq-go/redeq/bucket"
	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/ready"
	"github.com/redeq-go/redeq/redeq"
)

// scriptCost measures what the server spends per job in each script of a
// job's hot path after its add, with nothing else running and fixed batch
// sizes, so that a change to a script shows in its own figure: 100,000 jobs
// due now in one bucket are moved to the ready list (move.lua, 1,000 a
// call), then fetched 16 a call by one consumer (fetch.lua), then acked 16
// a call (settle.lua), each phase alone; then again 64 a call; in Rounds
// rounds, medians of the rounds. The figures are the server's time in EVALSHA per job
// (commandstats), and its CPU per job (used_cpu_user + used_cpu_sys, the
// network's share included).
func (b *bench) scriptCost() {
	for _, batch := range []int{16, 64} {
		b.scriptCostOf(batch)
	}
}

// scriptCostOf is scriptCost with batch jobs fetched and acked a call.
func (b *bench) scriptCostOf(batch int) {
	n := 5 * b.sz.Drain
	rounds := b.sz.Rounds
	fmt.Printf("each hot-path script alone: %d jobs in one bucket, moved 1,000 a call, fetched and acked %d a call, %d rounds\n", n, batch, rounds)
	phases := []string{"move", "fetch", "settle"}
	script, cpu := map[string][]float64{}, map[string][]float64{}
	for r := range rounds {
		b.flush()
		cfg := config.Default()
		cfg.Concurrency = 1
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		c, err := redeq.New(b.admin, cfg)
		if err != nil {
			fail("redeq.New: %v", err)
		}
		ctx := context.Background()
		list := ids("s", n)
		for i := 0; i < n; i += 256 {
			jobs := make([]*redeq.Job, 0, 256)
			for _, id := range list[i:min(i+256, n)] {
				jobs = append(jobs, &redeq.Job{Topic: topic, ID: id, Body: body100})
			}
			if err := c.AddBatch(ctx, jobs); err != nil {
				fail("add: %v", err)
			}
		}
		time.Sleep(2 * time.Millisecond) // every job due
		phase := func(name string, f func()) {
			before := b.costs()
			f()
			d := b.costs().since(before)
			script[name] = append(script[name], d.scriptUS/float64(n))
			cpu[name] = append(cpu[name], d.serverS*1e6/float64(n))
		}
		phase("move", func() {
			for moved := 0; moved < n; {
				res, err := bucket.Move(ctx, b.admin, cfg.Prefix, topic, 0, 1000)
				if err != nil {
					fail("move: %v", err)
				}
				if res.Moved == 0 {
					fail("move: %d of %d jobs moved, then none", moved, n)
				}
				moved += res.Moved
			}
		})
		var items []ready.Item
		phase("fetch", func() {
			for len(items) < n {
				got, err := ready.FetchBatch(ctx, b.admin, cfg.Prefix, topic, 0, "c1", batch, false)
				if err != nil {
					fail("fetch: %v", err)
				}
				if len(got.Items) == 0 {
					fail("fetch: %d of %d jobs fetched, then none", len(items), n)
				}
				items = append(items, got.Items...)
			}
		})
		s := ack.NewSettler(b.admin, cfg.Prefix, "c1", cfg.DeadRetention)
		phase("settle", func() {
			for i := 0; i < n; i += batch {
				outs := make([]ack.Outcome, 0, batch)
				for _, it := range items[i:min(i+batch, n)] {
					outs = append(outs, ack.Outcome{ID: it.ID, Token: it.Token, Op: ack.OpAck, Late: it.Late})
				}
				applied, err := s.Settle(ctx, topic, 0, outs)
				if err != nil {
					fail("settle: %v", err)
				}
				for k, ok := range applied {
					if !ok {
						fail("settle: the ack of %s was dropped", outs[k].ID)
					}
				}
			}
		})
		fmt.Printf("  round %d: script µs per job move/fetch/settle %.2f/%.2f/%.2f, Redis CPU µs per job %.2f/%.2f/%.2f\n", r+1,
			script["move"][r], script["fetch"][r], script["settle"][r], cpu["move"][r], cpu["fetch"][r], cpu["settle"][r])
	}
	for _, p := range phases {
		b.res.Rows = append(b.res.Rows,
			row{Name: fmt.Sprintf("script alone: %s, %d a call, Redis time in the script per job", p, batch), Unit: "µs", Redeq: median(script[p]), Better: "lower", Solo: true, Comment: "median of the rounds: " + list2(script[p])},
			row{Name: fmt.Sprintf("script alone: %s, %d a call, Redis CPU per job", p, batch), Unit: "µs", Redeq: median(cpu[p]), Better: "lower", Solo: true, Comment: "median of the rounds: " + list2(cpu[p])})
	}
	for _, r := range b.res.Rows[len(b.res.Rows)-2*len(phases):] {
		fmt.Printf("  %-60s %8.2f %s\n", r.Name, r.Redeq, r.Unit)
	}
}

func list2(v []float64) string {
	var s []string
	for _, x := range v {
		s = append(s, fmt.Sprintf("%.2f", x))
	}
	return strings.Join(s, ", ")
}

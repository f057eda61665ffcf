package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/config"
	"github.com/redeq-go/redeq/redeq"
)

// idle: one started client, 50 topics x 4 buckets, no jobs. Redis
// commands per second it causes (script-inner commands included), with
// and without a listener on every topic.
func (b *bench) idle() {
	if *fleetClients != "" {
		b.fleet()
		return
	}
	const topics, buckets = 50, 4
	window := 20 * time.Second
	if *quick {
		window = 8 * time.Second
	}
	fmt.Printf("idle cost: one client, %d topics x %d buckets, no jobs, %v window\n", topics, buckets, window)
	for _, listen := range []bool{false, true} {
		b.idleOne(topics, buckets, window, listen, false)
	}
	b.idleOne(topics, buckets, window, false, true)
}

// idleOne measures one client; with second, another client started first
// holds every lock and the measured one is a non-holder.
func (b *bench) idleOne(topics, buckets int, window time.Duration, listen, second bool) {
	{
		b.flush()
		cfg := config.Default()
		cfg.Concurrency = buckets
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		rdb := b.newClient()
		sent := &countHook{}
		rdb.AddHook(sent)
		c, err := redeq.New(rdb, cfg)
		if err != nil {
			fail("%v", err)
		}
		for i := range topics {
			name := fmt.Sprintf("idle-%02d", i)
			// Record the topic the way a producer does: add and remove a job.
			if err := c.Add(b.ctx, &redeq.Job{Topic: name, ID: "x", Delay: time.Hour}); err != nil {
				fail("%v", err)
			}
			if _, err := c.Delete(b.ctx, name, "x"); err != nil {
				fail("%v", err)
			}
			if listen {
				if err := c.Register(redeqListener{workers: 1, handle: func(context.Context, string, []byte, int) {}}.named(name)); err != nil {
					fail("%v", err)
				}
			}
		}
		if second {
			first, err := redeq.New(b.newClient(), cfg)
			if err != nil {
				fail("%v", err)
			}
			if err := first.Start(b.ctx); err != nil {
				fail("%v", err)
			}
			defer first.Shutdown(b.ctx)
			time.Sleep(2 * time.Second) // it takes every lock
		}
		if err := c.Start(b.ctx); err != nil {
			fail("%v", err)
		}
		time.Sleep(3 * time.Second) // start-up: locks taken, first scans done
		before, sentBefore := b.commands(), sent.n.Load()
		time.Sleep(window)
		per := float64(b.commands()-before-1) / window.Seconds()
		perSent := float64(sent.n.Load()-sentBefore) / window.Seconds()
		_ = c.Shutdown(b.ctx)
		rdb.Close()
		scale := cfg.ScanInterval.Seconds() / float64(topics*buckets)
		label := "idle, movers only"
		if listen {
			label = "idle, movers + a listener per topic"
		}
		if second {
			label = "idle, a second client (holds no lock)"
		}
		b.res.Rows = append(b.res.Rows,
			row{Name: label + ", sent", Unit: "cmds/s", Redeq: perSent, Better: "lower", Solo: true,
				Comment: fmt.Sprintf("%.2f commands sent per bucket per ScanInterval", perSent*scale)},
			row{Name: label + ", executed", Unit: "cmds/s", Redeq: per, Better: "lower", Solo: true,
				Comment: fmt.Sprintf("%.2f executed (script-inner included; server-wide, so both clients when two run) per bucket per ScanInterval", per*scale)})
		fmt.Printf("  %-40s sent %7.1f/s = %.2f per bucket per ScanInterval; executed %7.1f/s = %.2f\n",
			label, perSent, perSent*scale, per, per*scale)
	}
}

// countHook counts the commands a client sends, pipelined ones included.
type countHook struct{ n atomic.Int64 }

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// named returns the listener for another topic.
func (l redeqListener) named(topic string) namedListener { return namedListener{l, topic} }

type namedListener struct {
	redeqListener
	topic string
}

func (n namedListener) Topic() string { return n.topic }

package main

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// burst: 100,000 jobs (redeq only) fall due at the same instant, one
// consumer drains them. Reports the drain rate and the longest single
// command Redis ran meanwhile (SLOWLOG, threshold 0.5 ms): every script is
// bounded, so none should hold the server for long.
func (b *bench) burst() {
	n := 100_000
	if *quick {
		n = 20_000
	}
	fmt.Printf("burst: %d jobs due at the same instant, one consumer (redeq)\n", n)
	b.flush()
	s := newRedeq(b.newClient, b.cleanup)
	defer s.Close()
	at := time.Now().Add(2 * time.Second)
	list := ids("b", n)
	for i := 0; i < n; i += 1000 {
		if err := s.EnqueueBatch(b.ctx, list[i:min(i+1000, n)], body100, at); err != nil {
			fail("enqueue: %v", err)
		}
	}
	for _, c := range []*redis.StatusCmd{
		b.admin.ConfigSet(b.ctx, "slowlog-log-slower-than", "500"),
		b.admin.ConfigSet(b.ctx, "slowlog-max-len", "10000"),
		b.admin.SlowLogReset(b.ctx),
	} {
		if err := c.Err(); err != nil {
			fail("slowlog: %v", err)
		}
	}
	defer b.admin.ConfigSet(context.Background(), "slowlog-log-slower-than", "10000")
	cnt := newCounter(n)
	stop := s.Consume(16, func(ctx context.Context, id string, body []byte, attempt int) { cnt.add(id) })
	time.Sleep(time.Until(at))
	start := time.Now()
	if err := cnt.wait(2 * time.Minute); err != nil {
		fail("burst: %v", err)
	}
	elapsed := time.Since(start)
	stop()
	logs, err := b.admin.SlowLogGet(b.ctx, 10000).Result()
	if err != nil {
		fail("slowlog: %v", err)
	}
	var longest time.Duration
	var which string
	for _, l := range logs {
		if l.Duration > longest {
			longest, which = l.Duration, fmt.Sprint(l.Args[:min(2, len(l.Args))])
		}
	}
	rate := float64(n) / elapsed.Seconds()
	b.res.Rows = append(b.res.Rows,
		row{Name: fmt.Sprintf("burst of %dk due at once: drain", n/1000), Unit: "jobs/s", Redeq: rate, Better: "higher", Solo: true},
		row{Name: "burst: commands over 0.5 ms", Unit: "commands", Redeq: float64(len(logs)), Better: "lower", Solo: true},
		row{Name: "burst: longest command", Unit: "ms", Redeq: float64(longest.Microseconds()) / 1000, Better: "lower", Solo: true, Comment: which})
	fmt.Printf("  drained in %v (%.0f jobs/s); %d commands over 0.5 ms, longest %v %s\n", elapsed.Round(time.Millisecond), rate, len(logs), longest, which)
}

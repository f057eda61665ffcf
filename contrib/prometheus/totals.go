package redeqprom

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redeq-go/redeq/redeq"
)

// totals turns the per-minute processed and failed counts that consumers
// record in Redis (Client.History: one counter per bucket and minute,
// kept 90 minutes) into counters that only rise: each read takes the
// minutes since the last read's, and adds what each minute gained since
// it was last seen. What the minutes held at the exporter's first read is
// its baseline, so the counters start at zero with the exporter, as a
// process's counters do; a topic first met later counts its minutes from
// that first read on. A gap between reads longer than the history's
// retention loses what fell out of it.
type totals struct {
	mu     sync.Mutex
	start  int64 // the minute of the first read; 0 before it
	last   int64 // the newest minute the last read returned
	topics map[string]*topicTotals
}

type topicTotals struct {
	seen      map[int64][2]int64 // minute → processed, failed, as last read
	processed float64
	failed    float64
}

type total struct{ processed, failed float64 }

func newTotals() *totals { return &totals{topics: map[string]*topicTotals{}} }

// lookBack is how many minutes before the last read's newest a read
// starts again: a minute can still gain counts after the reader's clock
// left it (a server's clock a little behind, a write in flight).
const lookBack = 2

// read brings the totals of topics up to date, one History read per
// topic (readers at a time); a failed read counts in errs and leaves that
// topic's totals.
func (t *totals) read(ctx context.Context, c *redeq.Client, topics []string, errs prometheus.Counter) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var since time.Time // zero: the whole retention
	if t.last > 0 {
		since = time.UnixMilli((t.last - lookBack) * 60000)
	}
	first := t.start == 0
	newest := t.last
	history := make(map[string][]redeq.Minute, len(topics))
	var hmu sync.Mutex
	each(topics, func(topic string) {
		ms, err := c.History(ctx, topic, since)
		hmu.Lock()
		defer hmu.Unlock()
		if err != nil {
			errs.Inc()
			return
		}
		history[topic] = ms
	})
	for _, topic := range topics {
		ms, ok := history[topic]
		if !ok {
			continue
		}
		tt := t.topics[topic]
		fresh := tt == nil
		if fresh {
			tt = &topicTotals{seen: map[int64][2]int64{}}
			t.topics[topic] = tt
		}
		for _, m := range ms {
			minute := m.Start.UnixMilli() / 60000
			newest = max(newest, minute)
			now := [2]int64{m.Processed, m.Failed}
			old, ok := tt.seen[minute]
			tt.seen[minute] = now
			if !ok && (first || fresh && t.start > 0 && minute < t.start) {
				continue // the baseline
			}
			tt.processed += float64(max(now[0]-old[0], 0))
			tt.failed += float64(max(now[1]-old[1], 0))
		}
		if since.IsZero() {
			continue
		}
		for minute := range tt.seen {
			if minute < since.UnixMilli()/60000 {
				delete(tt.seen, minute) // final: no read asks for it again
			}
		}
	}
	if first {
		t.start = max(newest, 1)
	}
	t.last = newest
}

// snapshot returns every topic's totals.
func (t *totals) snapshot() map[string]total {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]total, len(t.topics))
	for topic, tt := range t.topics {
		out[topic] = total{tt.processed, tt.failed}
	}
	return out
}

package redeq

import (
	"context"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redeq-go/redeq/internal/keys"
)

// HistoryRetention is how far back History reaches: each minute's counters
// expire 90 minutes after their first write, so the last 89 whole minutes
// are always there.
const HistoryRetention = 89 * time.Minute

// LatenessBuckets is the number of counters of a LatenessHistogram.
const LatenessBuckets = len(keys.HistLateBoundsMs) + 1

// LatenessHistogram counts jobs by lateness: how long after its due time a
// job was fetched (and its handler started), by the server's clock. Counter
// i holds the jobs later than LatenessBound(i-1) and at most
// LatenessBound(i); the last counts those later than every bound (60 s).
// Only jobs the mover put in the ready list are counted: a job recovered
// from a dead consumer, or requeued by hand, has no due time to be late to.
type LatenessHistogram [LatenessBuckets]int64

// LatenessBound returns the upper bound of counter i of a
// LatenessHistogram; the last counter has none (-1).
func LatenessBound(i int) time.Duration {
	if i < 0 || i >= len(keys.HistLateBoundsMs) {
		return -1
	}
	return time.Duration(keys.HistLateBoundsMs[i]) * time.Millisecond
}

// Count returns the number of jobs h counts.
func (h LatenessHistogram) Count() int64 {
	var n int64
	for _, v := range h {
		n += v
	}
	return n
}

// Quantile estimates the q-quantile (0 < q <= 1) of the lateness h
// counts, by linear interpolation inside the counter it falls in, as
// Prometheus's histogram_quantile does: exact to the counter's bounds. A
// quantile in the last counter is reported as its lower bound, 60 s ("at
// least"). It returns 0 for an empty histogram.
func (h LatenessHistogram) Quantile(q float64) time.Duration {
	total := h.Count()
	if total == 0 {
		return 0
	}
	q = min(max(q, 0), 1)
	rank := q * float64(total)
	var cum int64
	for i, v := range h {
		if v == 0 || float64(cum+v) < rank {
			cum += v
			continue
		}
		lower := time.Duration(0)
		if i > 0 {
			lower = LatenessBound(i - 1)
		}
		upper := LatenessBound(i)
		if upper < 0 {
			return lower
		}
		frac := (rank - float64(cum)) / float64(v)
		return lower + time.Duration(frac*float64(upper-lower))
	}
	return LatenessBound(LatenessBuckets - 2)
}

// Minute is what the consumers of one topic did in one minute of the
// server's clock.
type Minute struct {
	Start time.Time // the minute's start
	// Processed counts deliveries whose outcome was applied: acked,
	// rejoined, parked in un_ack, retried or sent to the dead set after a
	// failure. A delivery whose outcome was dropped (the reaper took the
	// job back meanwhile) is counted by the delivery that runs it again.
	Processed int64
	// Failed counts the processed deliveries that failed: an error, a
	// panic or a timeout, whether retried or sent to the dead set.
	Failed int64
	// Lateness counts the jobs fetched in the minute by how late.
	Lateness LatenessHistogram
}

// LatenessP50 estimates the median lateness of the minute's jobs.
func (m Minute) LatenessP50() time.Duration { return m.Lateness.Quantile(0.5) }

// LatenessP99 estimates the 99th percentile of the minute's lateness.
func (m Minute) LatenessP99() time.Duration { return m.Lateness.Quantile(0.99) }

// SumMinutes adds minutes up, for the totals and quantiles of a period;
// the result's Start is the first minute's.
func SumMinutes(ms []Minute) Minute {
	var t Minute
	for i, m := range ms {
		if i == 0 {
			t.Start = m.Start
		}
		t.Processed += m.Processed
		t.Failed += m.Failed
		for j, v := range m.Lateness {
			t.Lateness[j] += v
		}
	}
	return t
}

// History returns one Minute per minute of topic from the one holding
// since to the current one, oldest first, read in one pipelined round trip
// (one MGET per bucket). since is moved up to HistoryRetention ago when it
// is older (a zero since gives the whole retention); a since in the future
// gives the current minute alone. The counters are kept per bucket and per
// minute of the Redis server's clock, written by the fetch and outcome
// scripts (ready/fetch.lua, ack/settle.lua); History picks the minutes by
// the caller's clock, so a caller whose clock is off by seconds sees
// counts shifted by as much. A topic nobody used has empty minutes.
//
// Servers without BITFIELD record no history (the scripts skip it rather
// than fail): miniredis, for one.
func (c *Client) History(ctx context.Context, topic string, since time.Time) ([]Minute, error) {
	n, err := c.topicBuckets(ctx, topic)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	last := now.UnixMilli() / 60000
	first := since.UnixMilli() / 60000
	if since.IsZero() || now.Sub(since) > HistoryRetention {
		first = now.Add(-HistoryRetention).UnixMilli() / 60000
	}
	first = min(first, last)
	names := make([]string, 0, last-first+1)
	out := make([]Minute, last-first+1)
	cmds := make([]*redis.SliceCmd, n)
	pipe := c.rdb.Pipeline()
	for b := range n {
		k := keys.ForBucket(c.cfg.Prefix, topic, b)
		names = names[:0]
		for m := first; m <= last; m++ {
			names = append(names, k.History(m))
		}
		cmds[b] = pipe.MGet(ctx, names...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("history %s: %w", topic, err)
	}
	for i := range out {
		out[i].Start = time.UnixMilli((first + int64(i)) * 60000)
	}
	for _, cmd := range cmds {
		for i, v := range cmd.Val() {
			s, ok := v.(string)
			if !ok {
				continue
			}
			m := &out[i]
			m.Processed += counter(s, keys.HistProcessed)
			m.Failed += counter(s, keys.HistFailed)
			for j := range m.Lateness {
				m.Lateness[j] += counter(s, keys.HistLate+j)
			}
		}
	}
	return out, nil
}

// counter reads u32 counter i of a History value; a value too short to
// hold it (BITFIELD grows the string only as far as it wrote) counts 0.
func counter(s string, i int) int64 {
	if len(s) < 4*(i+1) {
		return 0
	}
	return int64(binary.BigEndian.Uint32([]byte(s[4*i : 4*i+4])))
}

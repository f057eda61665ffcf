package redeqprom

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redeq-go/redeq/redeq"
)

// maxCachedTopics bounds the per-topic cache of series; the series of
// further topics are looked up per call.
const maxCachedTopics = 1024

// series is one series of a vector, resolved on first use: WithLabelValues
// hashes its labels on every call, and a series appears at a scrape only
// once something was recorded into it, as without the cache.
type series[T any] struct{ p atomic.Pointer[T] }

func (s *series[T]) get(resolve func() T) T {
	if p := s.p.Load(); p != nil {
		return *p
	}
	v := resolve() // racing workers resolve the same series
	s.p.Store(&v)
	return v
}

// topicSeries are the series of one topic the Observer methods record into.
type topicSeries struct {
	added     series[prometheus.Counter]
	processed [len(outcomes)]series[prometheus.Counter] // by outcomeIndex
	lateness  [2]series[prometheus.Observer]            // by first attempt: false, true
	duration  series[prometheus.Observer]
	returned  [2]series[prometheus.Counter] // by recovered: false, true
	// asynq's, with Options.AsynqNames
	asynqProcessed, asynqFailed series[prometheus.Counter]
}

// topicCache maps a topic to its *topicSeries.
type topicCache struct {
	m sync.Map
	n atomic.Int64
}

// get returns the series of topic; once the cache is full, those of a
// topic not in it are new, resolved again on each call.
func (c *topicCache) get(topic string) *topicSeries {
	if v, ok := c.m.Load(topic); ok {
		return v.(*topicSeries)
	}
	if c.n.Load() >= maxCachedTopics {
		return new(topicSeries)
	}
	// A slot is taken before the store, so that workers meeting new
	// topics at once do not fill the cache past its bound between them.
	if c.n.Add(1) > maxCachedTopics {
		c.n.Add(-1)
		return new(topicSeries)
	}
	v, loaded := c.m.LoadOrStore(topic, new(topicSeries))
	if loaded {
		c.n.Add(-1)
	}
	return v.(*topicSeries)
}

// outcomes are the outcomes whose processed series a topic caches.
var outcomes = [...]redeq.Outcome{redeq.OutcomeAck, redeq.OutcomeRejoin, redeq.OutcomeRetry,
	redeq.OutcomeDead, redeq.OutcomeUnAck, redeq.OutcomeInterrupted}

// outcomeIndex is the index of o in outcomes, or -1. A scan of six
// short strings costs less than hashing o for a map.
func outcomeIndex(o redeq.Outcome) int {
	for i, x := range outcomes {
		if o == x {
			return i
		}
	}
	return -1
}

package redeqprom

import (
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/redeq-go/redeq/redeq"
)

// series is one series of a vector, resolved on first use: WithLabelValues
// hashes its labels on every call. (The counters of a topic exist at zero
// from its first sight, Collector.zero; the histograms appear once
// something was recorded into them.)
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

// outcomes are the outcomes whose processed series a topic caches.
var outcomes = [...]redeq.Outcome{redeq.OutcomeAck, redeq.OutcomeRejoin, redeq.OutcomeRetry,
	redeq.OutcomeDead, redeq.OutcomeUnAck, redeq.OutcomeInterrupted, redeq.OutcomeBroadcast}

// outcomeIndex is the index of o in outcomes, or -1. A scan of seven
// short strings costs less than hashing o for a map.
func outcomeIndex(o redeq.Outcome) int {
	for i, x := range outcomes {
		if o == x {
			return i
		}
	}
	return -1
}

package redeqotel

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/redeq-go/redeq/redeq"
)

// outcomes are the outcomes whose measurement options a topic caches.
var outcomes = [...]redeq.Outcome{redeq.OutcomeAck, redeq.OutcomeRejoin, redeq.OutcomeRetry,
	redeq.OutcomeDead, redeq.OutcomeUnAck, redeq.OutcomeInterrupted, redeq.OutcomeBroadcast}

// topicAttrs is what every measurement and span of a topic shares, built
// once: attribute sets (so that a measurement does not sort and hash its
// attributes again), the span name and the span's constant attributes.
type topicAttrs struct {
	added         []metric.AddOption
	durationRec   []metric.RecordOption
	lateness      [2][]metric.RecordOption          // by first attempt: false, true
	returned      [2][]metric.AddOption             // by recovered: false, true
	processed     [len(outcomes)][]metric.AddOption // by outcomeIndex
	consumerName  string
	consumerStart []trace.SpanStartOption // the kind and the topic's constant attributes
}

func newTopicAttrs(topic string) *topicAttrs {
	dest := AttrDestination.String(topic)
	add := func(kv ...attribute.KeyValue) []metric.AddOption {
		return []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(kv...))}
	}
	rec := func(kv ...attribute.KeyValue) []metric.RecordOption {
		return []metric.RecordOption{metric.WithAttributeSet(attribute.NewSet(kv...))}
	}
	t := &topicAttrs{
		added:       add(system, dest),
		durationRec: rec(system, dest),
		lateness: [2][]metric.RecordOption{
			rec(system, dest, AttrFirstAttempt.String("false")),
			rec(system, dest, AttrFirstAttempt.String("true")),
		},
		returned: [2][]metric.AddOption{
			add(system, dest, AttrReason.String("rollback")),
			add(system, dest, AttrReason.String("recovered")),
		},
		consumerName: "process " + topic,
		consumerStart: []trace.SpanStartOption{consumerKind, trace.WithAttributes(system, dest,
			AttrOperationName.String("process"), AttrOperationType.String("process"))},
	}
	for i, o := range outcomes {
		t.processed[i] = add(system, dest, AttrOutcome.String(string(o)))
	}
	return t
}

// processedOpts returns the options of redeq.jobs.processed for outcome o.
func (t *topicAttrs) processedOpts(topic string, o redeq.Outcome) []metric.AddOption {
	if i := outcomeIndex(o); i >= 0 {
		return t.processed[i]
	}
	return []metric.AddOption{metric.WithAttributes(system, AttrDestination.String(topic), AttrOutcome.String(string(o)))}
}

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

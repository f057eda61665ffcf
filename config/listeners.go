package config

import (
	"fmt"
	"reflect"
	"sync"
	"time"
)

// Bounds of the listeners section.
const (
	// MaxListeners bounds the entries of the listeners section.
	MaxListeners = 1000
	// MaxRate bounds a listener's rate: jobs started per rate_per.
	MaxRate = 1_000_000
	// MaxRatePer is the longest rate_per.
	MaxRatePer = 24 * time.Hour
)

// Listener is the per-topic section of the listeners a client registers:
// the topic's global limits, as the listener options WithMaxRunning,
// WithRateLimit and WithLimitKey set them. Register applies them to a
// listener of the topic that sets no limit of its own (a listener's
// options win whole: any of them replaces the section's limits). The
// limits need a topic of one bucket (Concurrency 1).
//
//	listeners:
//	  - topic: partner.callback
//	    max_running: 5       # at most 5 running at once, fleet-wide
//	    rate: 100            # at most 100 started ...
//	    rate_per: 1s         # ... per second
//	    limit_key: tenant    # both per value of the job header "tenant"
type Listener struct {
	// Topic is the listener's topic.
	Topic string `yaml:"topic"`
	// MaxRunning is the most jobs of the topic running at once across
	// every client (per value of LimitKey, with one). 0 for none, the
	// default.
	MaxRunning int `yaml:"max_running"`
	// Rate is the most jobs of the topic started per RatePer, fleet-wide
	// (per value of LimitKey, with one), up to MaxRate. 0 for none, the
	// default.
	Rate int `yaml:"rate"`
	// RatePer is the rate's period, 1ms to MaxRatePer (24h); set with
	// Rate only. Defaults to 1s when Rate is set.
	RatePer time.Duration `yaml:"rate_per"`
	// LimitKey is the job header whose values the limits apply to, each
	// on its own (per tenant, per partner); set with a limit only. ""
	// (the default) limits the topic as a whole.
	LimitKey string `yaml:"limit_key"`
}

// RatePerDefault is a listener's RatePer when its Rate is set alone.
const RatePerDefault = time.Second

// ListenerOf is the section of topic in c.Listeners, and whether there is one.
func (c *Config) ListenerOf(topic string) (Listener, bool) {
	for _, l := range c.Listeners {
		if l.Topic == topic {
			if l.Rate > 0 && l.RatePer == 0 {
				l.RatePer = RatePerDefault
			}
			return l, true
		}
	}
	return Listener{}, false
}

// listenerKeys are the YAML keys of a listener section.
var listenerKeys = sync.OnceValue(func() map[string]bool { return yamlKeys(reflect.TypeOf(Listener{})) })

// yamlKeys are the YAML keys of the fields of struct type t.
func yamlKeys(t reflect.Type) map[string]bool {
	out := map[string]bool{}
	for i := range t.NumField() {
		out[t.Field(i).Tag.Get("yaml")] = true
	}
	return out
}

// listenerProblems lists what is wrong with the listeners section, under
// a client of concurrency buckets per topic.
func listenerProblems(list []Listener, concurrency int) []*FieldError {
	var out []*FieldError
	bad := func(i int, field, key, format string, args ...any) {
		f, k := fmt.Sprintf("Listeners[%d]", i), fmt.Sprintf("listeners[%d]", i)
		if field != "" {
			f, k = f+"."+field, k+"."+key
		}
		out = append(out, &FieldError{Field: f, Key: k, Reason: fmt.Sprintf(format, args...)})
	}
	if len(list) > MaxListeners {
		return append(out, &FieldError{Field: "Listeners", Key: "listeners", Reason: fmt.Sprintf("has %d listeners, more than %d", len(list), MaxListeners)})
	}
	seen := map[string]int{}
	for i, l := range list {
		switch reason := nameProblem(l.Topic); {
		case l.Topic == "":
			bad(i, "Topic", "topic", "is missing")
		case reason != "":
			bad(i, "Topic", "topic", "%s", reason)
		default:
			if j, ok := seen[l.Topic]; ok {
				bad(i, "Topic", "topic", "%q is listeners[%d]'s topic too", l.Topic, j)
			}
			seen[l.Topic] = i
		}
		if l.MaxRunning < 0 {
			bad(i, "MaxRunning", "max_running", "%d is negative (0 is none)", l.MaxRunning)
		}
		switch {
		case l.Rate < 0 || l.Rate > MaxRate:
			bad(i, "Rate", "rate", "%d is out of range 0..%d (0 is none)", l.Rate, MaxRate)
		case l.Rate == 0 && l.RatePer != 0:
			bad(i, "RatePer", "rate_per", "%v is set without a rate", l.RatePer)
		case l.Rate > 0 && l.RatePer != 0 && (l.RatePer < time.Millisecond || l.RatePer > MaxRatePer):
			bad(i, "RatePer", "rate_per", "%v is out of range 1ms..%v", l.RatePer, MaxRatePer)
		}
		limited := l.MaxRunning > 0 || l.Rate > 0
		if l.LimitKey != "" && !limited {
			bad(i, "LimitKey", "limit_key", "%q is set without a limit (max_running or rate)", l.LimitKey)
		}
		for j := 0; j < len(l.LimitKey); j++ {
			if c := l.LimitKey[j]; c < ' ' || c == 0x7f {
				bad(i, "LimitKey", "limit_key", "%q holds a control character", l.LimitKey)
				break
			}
		}
		if limited && concurrency != 1 {
			bad(i, "", "", "global limits need a topic of one bucket (concurrency 1), not %d", concurrency)
		}
	}
	return out
}

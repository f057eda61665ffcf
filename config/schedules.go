package config

import (
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/redeq-go/redeq/internal/cron"
)

// Bounds of the schedules section.
const (
	// MaxSchedules bounds the schedules one file declares.
	MaxSchedules = 1000
	// MaxCatchUpWindow bounds a schedule's catch_up_window (redeq's
	// MaxCatchUpWindow).
	MaxCatchUpWindow = 366 * 24 * time.Hour
)

// Schedule is a periodic schedule declared in the config file: redeq.Open
// and redeq.OpenSection put each one (redeq.Client.PutSchedule) before
// they return, so every instance of a service declares its schedules as
// its settings. The fields are redeq.Schedule's; see it for their meaning.
//
//	schedules:
//	  - name: digest
//	    topic: mail
//	    spec: "0 8 * * *"
//	    time_zone: Europe/Paris
//	    catch_up: latest
//	    body: '{"kind":"daily"}'
type Schedule struct {
	// Name is unique within the file and the prefix.
	Name string `yaml:"name"`
	// Topic is where each tick's job goes.
	Topic string `yaml:"topic"`
	// Spec is a cron expression (5 fields, or 6 with seconds first),
	// @hourly, @daily ..., or "@every 5m".
	Spec string `yaml:"spec"`
	// TimeZone is the IANA zone the spec is read in. Defaults to UTC.
	TimeZone string `yaml:"time_zone"`
	// CatchUp is latest, none or all: what runs of the ticks missed while
	// no client ran. Defaults to latest.
	CatchUp string `yaml:"catch_up"`
	// CatchUpWindow is how far back catch_up: all looks, up to
	// MaxCatchUpWindow. Defaults to redeq's DefaultCatchUpWindow (24h).
	CatchUpWindow time.Duration `yaml:"catch_up_window"`
	// Body is each tick's job body, as text.
	Body string `yaml:"body"`
	// Headers are each tick's job headers.
	Headers map[string]string `yaml:"headers"`
	// MaxRetries and RetryIntervals are those of each tick's job (as a
	// Job's): 0 and none take the client's retry and retry_intervals.
	MaxRetries     int             `yaml:"max_retries"`
	RetryIntervals []time.Duration `yaml:"retry_intervals"`
}

// CatchUps are the words of catch_up, in the order of redeq's CatchUp
// constants: the index of a word is its value.
var CatchUps = [...]string{"latest", "none", "all"}

// scheduleKeys are the YAML keys of a schedule.
var scheduleKeys = sync.OnceValue(func() map[string]bool {
	out := map[string]bool{}
	t := reflect.TypeOf(Schedule{})
	for i := range t.NumField() {
		out[t.Field(i).Tag.Get("yaml")] = true
	}
	return out
})

// scheduleProblems lists what is wrong with the schedules: what can be
// told without Redis (names, spec, zone, policy, window, intervals).
// redeq.Open checks the rest (the topic's and the tick job's rules) and
// names the schedule the same way.
func scheduleProblems(list []Schedule) []*FieldError {
	var out []*FieldError
	bad := func(i int, field, key, format string, args ...any) {
		f := fmt.Sprintf("Schedules[%d]", i)
		k := fmt.Sprintf("schedules[%d]", i)
		if field != "" {
			f, k = f+"."+field, k+"."+key
		}
		out = append(out, &FieldError{Field: f, Key: k, Reason: fmt.Sprintf(format, args...)})
	}
	if len(list) > MaxSchedules {
		out = append(out, &FieldError{Field: "Schedules", Key: "schedules", Reason: fmt.Sprintf("has %d schedules, more than %d", len(list), MaxSchedules)})
		return out
	}
	seen := map[string]int{}
	for i, s := range list {
		switch reason := nameProblem(s.Name); {
		case s.Name == "":
			bad(i, "Name", "name", "is missing")
		case reason != "":
			bad(i, "Name", "name", "%s", reason)
		default:
			if j, ok := seen[s.Name]; ok {
				bad(i, "Name", "name", "%q is schedules[%d]'s name too", s.Name, j)
			}
			seen[s.Name] = i
		}
		if s.Topic == "" {
			bad(i, "Topic", "topic", "is missing")
		}
		if s.Spec == "" {
			bad(i, "Spec", "spec", "is missing")
		} else if _, err := cron.Parse(s.Spec); err != nil {
			bad(i, "Spec", "spec", "%q: %v", s.Spec, err)
		}
		switch s.TimeZone {
		case "", "UTC":
		case "Local":
			bad(i, "TimeZone", "time_zone", "\"Local\" differs between machines: name an IANA zone")
		default:
			if _, err := time.LoadLocation(s.TimeZone); err != nil {
				bad(i, "TimeZone", "time_zone", "%q: %v", s.TimeZone, err)
			}
		}
		if s.CatchUp != "" && CatchUpOf(s.CatchUp) < 0 {
			bad(i, "CatchUp", "catch_up", "%q is none of latest, none, all", s.CatchUp)
		}
		if s.CatchUpWindow < 0 || s.CatchUpWindow > MaxCatchUpWindow {
			bad(i, "CatchUpWindow", "catch_up_window", "%v is out of range 0..%v", s.CatchUpWindow, MaxCatchUpWindow)
		}
		if s.MaxRetries < -1 || s.MaxRetries > MaxRetriesLimit {
			bad(i, "MaxRetries", "max_retries", "%d is out of range -1..%d", s.MaxRetries, MaxRetriesLimit)
		}
		if j, reason := intervalsProblem(s.RetryIntervals); reason != "" {
			if j < 0 {
				bad(i, "RetryIntervals", "retry_intervals", "%s", reason)
			} else {
				bad(i, fmt.Sprintf("RetryIntervals[%d]", j), fmt.Sprintf("retry_intervals[%d]", j), "%s", reason)
			}
		}
	}
	return out
}

// CatchUpOf returns the index of word in CatchUps ("" is latest), or -1.
func CatchUpOf(word string) int {
	if word == "" {
		return 0
	}
	for i, w := range CatchUps {
		if w == word {
			return i
		}
	}
	return -1
}

// Package cron parses schedule specs and computes their tick instants: the
// pure part of periodic jobs, with no Redis and no clock of its own.
//
// A spec is a cron expression of 5 fields (minute hour day-of-month month
// day-of-week) or 6 with seconds first, or a descriptor: @yearly
// (@annually), @monthly, @weekly, @daily (@midnight), @hourly, or
// "@every <duration>". Fields take *, numbers, ranges a-b, steps */n and
// a-b/n, lists a,b,c, and the names JAN-DEC and SUN-SAT; day-of-week 7 is
// Sunday, as 0. When both day-of-month and day-of-week are restricted, a
// day matching either runs (as in every cron since Vixie's).
//
// Ticks are read in a time zone's wall clock. A local time that does not
// exist (the hour skipped in spring) ticks at the first instant after the
// gap; one that occurs twice (autumn) ticks once, at its first occurrence.
// Ticks of @every are the multiples of its interval since the Unix epoch,
// whatever the zone, so every client computes the same instants.
package cron

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// MinEvery and MaxEvery bound the interval of @every.
const (
	MinEvery = time.Second
	MaxEvery = 366 * 24 * time.Hour
)

// maxSpec bounds a spec's length: a handful of fields.
const maxSpec = 256

// Spec is a parsed schedule.
type Spec struct {
	every time.Duration // @every; the fields are unused then

	second, minute, hour, dom, month, dow uint64 // bit i set: value i matches
	domStar, dowStar                      bool   // the field was * (or ?)
}

// field is one cron field's range and names.
type field struct {
	name     string
	min, max int
	names    map[string]int
}

var (
	secondField = field{name: "second", min: 0, max: 59}
	minuteField = field{name: "minute", min: 0, max: 59}
	hourField   = field{name: "hour", min: 0, max: 23}
	domField    = field{name: "day of month", min: 1, max: 31}
	monthField  = field{name: "month", min: 1, max: 12, names: map[string]int{
		"jan": 1, "feb": 2, "mar": 3, "apr": 4, "may": 5, "jun": 6,
		"jul": 7, "aug": 8, "sep": 9, "oct": 10, "nov": 11, "dec": 12}}
	dowField = field{name: "day of week", min: 0, max: 7, names: map[string]int{
		"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}}
)

var descriptors = map[string]string{
	"@yearly":   "0 0 0 1 1 *",
	"@annually": "0 0 0 1 1 *",
	"@monthly":  "0 0 0 1 * *",
	"@weekly":   "0 0 0 * * 0",
	"@daily":    "0 0 0 * * *",
	"@midnight": "0 0 0 * * *",
	"@hourly":   "0 0 * * * *",
}

// Parse parses a spec; its error says what is wrong and where.
func Parse(spec string) (*Spec, error) {
	if len(spec) > maxSpec {
		return nil, fmt.Errorf("spec longer than %d bytes", maxSpec)
	}
	s := strings.TrimSpace(spec)
	if s == "" {
		return nil, errors.New("empty spec")
	}
	if rest, ok := strings.CutPrefix(s, "@every"); ok {
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		if err != nil || strings.TrimSpace(rest) == "" {
			return nil, fmt.Errorf("%q: @every needs a duration such as 30s or 5m", spec)
		}
		if d < MinEvery || d > MaxEvery {
			return nil, fmt.Errorf("%q: @every %v is outside %v to %v", spec, d, MinEvery, MaxEvery)
		}
		if d%time.Second != 0 {
			return nil, fmt.Errorf("%q: @every %v is not a whole number of seconds", spec, d)
		}
		return &Spec{every: d}, nil
	}
	if strings.HasPrefix(s, "@") {
		full, ok := descriptors[strings.ToLower(s)]
		if !ok {
			return nil, fmt.Errorf("%q: unknown descriptor (want @yearly, @monthly, @weekly, @daily, @hourly or @every <duration>)", spec)
		}
		s = full
	}
	f := strings.Fields(s)
	switch len(f) {
	case 5:
		f = append([]string{"0"}, f...)
	case 6:
	default:
		return nil, fmt.Errorf("%q: %d fields, want 5 (minute hour day-of-month month day-of-week) or 6 (seconds first)", spec, len(f))
	}
	out := &Spec{}
	var err error
	parse := func(text string, fd field) uint64 {
		if err != nil {
			return 0
		}
		var bits uint64
		bits, err = parseField(text, fd)
		if err != nil {
			err = fmt.Errorf("%q: %w", spec, err)
		}
		return bits
	}
	out.second = parse(f[0], secondField)
	out.minute = parse(f[1], minuteField)
	out.hour = parse(f[2], hourField)
	out.dom = parse(f[3], domField)
	out.month = parse(f[4], monthField)
	out.dow = parse(f[5], dowField)
	if err != nil {
		return nil, err
	}
	out.domStar = f[3] == "*" || f[3] == "?"
	out.dowStar = f[5] == "*" || f[5] == "?"
	if out.dow&(1<<7) != 0 { // 7 is Sunday too
		out.dow |= 1
	}
	if !out.canMatch() {
		return nil, fmt.Errorf("%q: no date matches its day of month and month", spec)
	}
	return out, nil
}

// canMatch reports whether some month has a day the spec's day-of-month
// allows (0 0 30 2 * never runs): such a spec is refused, not run never.
func (s *Spec) canMatch() bool {
	if !s.domStar && !s.dowStar {
		return true // either field may match
	}
	if s.domStar {
		return true
	}
	days := [13]int{0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31}
	for m := 1; m <= 12; m++ {
		if s.month&(1<<m) == 0 {
			continue
		}
		for d := 1; d <= days[m]; d++ {
			if s.dom&(1<<d) != 0 {
				return true
			}
		}
	}
	return false
}

// parseField parses one comma-separated field into a bit set.
func parseField(text string, fd field) (uint64, error) {
	var bits uint64
	for part := range strings.SplitSeq(text, ",") {
		if part == "" {
			return 0, fmt.Errorf("%s: empty list entry in %q", fd.name, text)
		}
		rng, stepText, hasStep := strings.Cut(part, "/")
		step := 1
		if hasStep {
			n, err := strconv.Atoi(stepText)
			if err != nil || n < 1 || n > fd.max {
				return 0, fmt.Errorf("%s: bad step %q in %q", fd.name, stepText, part)
			}
			step = n
		}
		lo, hi := fd.min, fd.max
		if fd.name == "day of week" {
			hi = 6 // * and */n over 0..6; 7 only when named
		}
		switch {
		case rng == "*" || rng == "?":
		default:
			a, b, isRange := strings.Cut(rng, "-")
			var err error
			if lo, err = value(a, fd); err != nil {
				return 0, err
			}
			hi = lo
			if isRange {
				if hi, err = value(b, fd); err != nil {
					return 0, err
				}
				if hi < lo {
					return 0, fmt.Errorf("%s: range %q runs backwards", fd.name, rng)
				}
			} else if hasStep {
				hi = fd.max // a/n: from a to the end
			}
		}
		for v := lo; v <= hi; v += step {
			bits |= 1 << v
		}
	}
	return bits, nil
}

// value reads one number or name of a field.
func value(text string, fd field) (int, error) {
	if n, ok := fd.names[strings.ToLower(text)]; ok {
		return n, nil
	}
	n, err := strconv.Atoi(text)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a number", fd.name, text)
	}
	if n < fd.min || n > fd.max {
		return 0, fmt.Errorf("%s: %d is outside %d-%d", fd.name, n, fd.min, fd.max)
	}
	return n, nil
}

// Every returns the interval of an @every spec, or 0.
func (s *Spec) Every() time.Duration { return s.every }

// Next returns the first tick strictly after after, read in loc, and
// false when none comes within five years (a spec such as 0 0 29 2 1,
// "February 29th or a Monday in February", always finds one sooner).
func (s *Spec) Next(after time.Time, loc *time.Location) (time.Time, bool) {
	if loc == nil {
		loc = time.UTC
	}
	if s.every > 0 {
		d := s.every.Milliseconds()
		ms := after.UnixMilli()
		next := (ms/d + 1) * d
		if ms < 0 && ms%d != 0 {
			next = (ms / d) * d
		}
		return time.UnixMilli(next).In(loc), true
	}
	after = after.In(loc)
	// Walk the wall clock as a calendar (in UTC, where no day has a gap),
	// from the wall time of after, and map each matching wall time to its
	// instant in loc. The mapping never goes back, so the first instant
	// past after is the next tick.
	y, mo, d := after.Date()
	h, mi, sec := after.Clock()
	wall := time.Date(y, mo, d, h, mi, sec, 0, time.UTC).Add(time.Second)
	limit := wall.AddDate(5, 0, 0)
	for wall.Before(limit) {
		w, ok := s.nextWall(wall, limit)
		if !ok {
			return time.Time{}, false
		}
		if at := resolve(w, loc); at.After(after) {
			return at, true
		}
		wall = w.Add(time.Second)
	}
	return time.Time{}, false
}

// nextWall returns the first wall time from t on (a calendar time in UTC)
// that the fields match, before limit.
func (s *Spec) nextWall(t, limit time.Time) (time.Time, bool) {
	for t.Before(limit) {
		switch {
		case s.month&(1<<int(t.Month())) == 0:
			t = time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, time.UTC)
		case !s.dayMatches(t):
			t = time.Date(t.Year(), t.Month(), t.Day()+1, 0, 0, 0, 0, time.UTC)
		case s.hour&(1<<t.Hour()) == 0:
			t = t.Truncate(time.Hour).Add(time.Hour)
		case s.minute&(1<<t.Minute()) == 0:
			t = t.Truncate(time.Minute).Add(time.Minute)
		case s.second&(1<<t.Second()) == 0:
			t = t.Add(time.Second)
		default:
			return t, true
		}
	}
	return time.Time{}, false
}

// dayMatches applies cron's day rule: both fields restricted means either.
func (s *Spec) dayMatches(t time.Time) bool {
	dom := s.dom&(1<<t.Day()) != 0
	dow := s.dow&(1<<int(t.Weekday())) != 0
	if !s.domStar && !s.dowStar {
		return dom || dow
	}
	return dom && dow
}

// resolve maps a wall time (a calendar time in UTC) to its instant in loc:
// the first of two when the wall clock shows it twice, the first instant
// after the gap when it shows it never.
func resolve(wall time.Time, loc *time.Location) time.Time {
	y, mo, d := wall.Date()
	h, mi, sec := wall.Clock()
	guess := time.Date(y, mo, d, h, mi, sec, 0, loc)
	// The offsets in force a day either side cover every transition.
	var best time.Time
	for _, probe := range []time.Time{guess.Add(-26 * time.Hour), guess, guess.Add(26 * time.Hour)} {
		_, off := probe.Zone()
		at := wall.Add(-time.Duration(off) * time.Second).In(loc)
		if sameWall(at, wall) && (best.IsZero() || at.Before(best)) {
			best = at
		}
	}
	if !best.IsZero() {
		return best
	}
	// In a gap: the wall time read with the offset before the jump lies
	// after the jump; the zone in force there began at the gap's end.
	_, off := guess.Add(-26 * time.Hour).Zone()
	at := wall.Add(-time.Duration(off) * time.Second).In(loc)
	start, _ := at.ZoneBounds()
	if start.IsZero() || start.After(at) {
		return at
	}
	return start
}

func sameWall(at, wall time.Time) bool {
	y, mo, d := at.Date()
	h, mi, s := at.Clock()
	wy, wmo, wd := wall.Date()
	wh, wmi, ws := wall.Clock()
	return y == wy && mo == wmo && d == wd && h == wh && mi == wmi && s == ws
}

// NextN returns the next n ticks strictly after after, in order, fewer when
// the spec runs out within five years of the last.
func (s *Spec) NextN(after time.Time, loc *time.Location, n int) []time.Time {
	out := make([]time.Time, 0, n)
	for len(out) < n {
		t, ok := s.Next(after, loc)
		if !ok {
			break
		}
		out = append(out, t)
		after = t
	}
	return out
}

package ready

import (
	"fmt"
	"strconv"
	"time"
)

// Limits are the global limits of a topic's deliveries, enforced by the
// fetch across every client: at most MaxRunning in flight at once, at most
// Rate started in any Per; for each value of the job header Key instead,
// when Key is set. A zero MaxRunning or Rate is no such limit.
type Limits struct {
	MaxRunning int
	Rate       int
	Per        time.Duration
	Key        string
}

// Set reports whether any limit is set.
func (l Limits) Set() bool { return l.MaxRunning > 0 || l.Rate > 0 }

// Spec is the limits as the fetch script reads them (ARGV), "" for none:
// "max|n|per ms|header".
func (l Limits) Spec() string {
	if !l.Set() {
		return ""
	}
	per := int64(0)
	if l.Rate > 0 {
		per = l.Per.Milliseconds()
	}
	return strconv.Itoa(l.MaxRunning) + "|" + strconv.Itoa(l.Rate) + "|" + strconv.FormatInt(per, 10) + "|" + l.Key
}

// ParseLimits reads a Spec back ("" is no limits).
func ParseLimits(spec string) (Limits, error) {
	var l Limits
	if spec == "" {
		return l, nil
	}
	var per int64
	var rest string
	n, err := fmt.Sscanf(spec, "%d|%d|%d|", &l.MaxRunning, &l.Rate, &per)
	if err != nil || n != 3 {
		return Limits{}, fmt.Errorf("bad limits %q", spec)
	}
	bars := 0
	for i := 0; i < len(spec); i++ {
		if spec[i] == '|' {
			if bars++; bars == 3 {
				rest = spec[i+1:]
				break
			}
		}
	}
	l.Per, l.Key = time.Duration(per)*time.Millisecond, rest
	return l, nil
}

// Check tells what is wrong with l, nil when it is sound.
func (l Limits) Check() error {
	switch {
	case l.MaxRunning < 0:
		return fmt.Errorf("max running %d is not positive", l.MaxRunning)
	case l.Rate < 0:
		return fmt.Errorf("rate %d is not positive", l.Rate)
	case l.Rate > 0 && l.Per < time.Millisecond:
		return fmt.Errorf("rate period %v is shorter than 1ms", l.Per)
	case l.Rate > 0 && l.Per > 24*time.Hour:
		return fmt.Errorf("rate period %v is longer than 24h", l.Per)
	case l.Rate > 1_000_000:
		return fmt.Errorf("rate %d is over 1,000,000 per period", l.Rate)
	case l.Key != "" && !l.Set():
		return fmt.Errorf("limit key %q without a limit (WithMaxRunning or WithRateLimit)", l.Key)
	}
	for i := 0; i < len(l.Key); i++ {
		if c := l.Key[i]; c < ' ' || c == 0x7f {
			return fmt.Errorf("limit key %q holds a control character", l.Key)
		}
	}
	return nil
}

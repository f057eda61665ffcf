package cron

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err)
	return loc
}

// at parses an RFC 3339 instant.
func at(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	require.NoError(t, err)
	return v
}

// ticks returns the next n ticks of spec after after, in loc, as RFC 3339
// strings in loc.
func ticks(t *testing.T, spec string, loc *time.Location, after string, n int) []string {
	t.Helper()
	s, err := Parse(spec)
	require.NoError(t, err)
	var out []string
	for _, v := range s.NextN(at(t, after), loc, n) {
		out = append(out, v.In(loc).Format(time.RFC3339))
	}
	return out
}

// TestNextReadsTheWallClock: ticks follow the fields in the zone's wall
// clock, strictly after the given instant.
func TestNextReadsTheWallClock(t *testing.T) {
	utc := time.UTC
	cases := []struct {
		spec, after string
		want        []string
	}{
		{"*/15 * * * *", "2026-01-01T00:00:00Z", []string{"2026-01-01T00:15:00Z", "2026-01-01T00:30:00Z", "2026-01-01T00:45:00Z"}},
		{"30 * * * * *", "2026-01-01T00:00:30Z", []string{"2026-01-01T00:01:30Z", "2026-01-01T00:02:30Z", "2026-01-01T00:03:30Z"}},
		{"0 8 * * mon-fri", "2026-12-04T09:00:00Z", []string{"2026-12-07T08:00:00Z", "2026-12-08T08:00:00Z", "2026-12-09T08:00:00Z"}},
		{"0 0 1,15 * *", "2026-01-01T00:00:00Z", []string{"2026-01-15T00:00:00Z", "2026-02-01T00:00:00Z", "2026-02-15T00:00:00Z"}},
		{"0 0 29 2 *", "2026-01-01T00:00:00Z", []string{"2028-02-29T00:00:00Z", "2032-02-29T00:00:00Z", "2036-02-29T00:00:00Z"}},
		{"0 0 13 * 5", "2026-02-01T00:00:00Z", []string{"2026-02-06T00:00:00Z", "2026-02-13T00:00:00Z", "2026-02-20T00:00:00Z"}}, // 13th OR Friday
		{"0 12 * * 7", "2026-12-01T00:00:00Z", []string{"2026-12-06T12:00:00Z", "2026-12-13T12:00:00Z", "2026-12-20T12:00:00Z"}}, // 7 is Sunday
		{"@hourly", "2026-01-01T00:30:00Z", []string{"2026-01-01T01:00:00Z", "2026-01-01T02:00:00Z", "2026-01-01T03:00:00Z"}},
		{"@daily", "2026-01-01T00:00:00Z", []string{"2026-01-02T00:00:00Z", "2026-01-03T00:00:00Z", "2026-01-04T00:00:00Z"}},
		{"@weekly", "2026-12-01T00:00:00Z", []string{"2026-12-06T00:00:00Z", "2026-12-13T00:00:00Z", "2026-12-20T00:00:00Z"}},
		{"@monthly", "2026-12-15T00:00:00Z", []string{"2027-01-01T00:00:00Z", "2027-02-01T00:00:00Z", "2027-03-01T00:00:00Z"}},
		{"@yearly", "2026-12-15T00:00:00Z", []string{"2027-01-01T00:00:00Z", "2028-01-01T00:00:00Z", "2029-01-01T00:00:00Z"}},
		{"@every 30s", "2026-01-01T00:00:10Z", []string{"2026-01-01T00:00:30Z", "2026-01-01T00:01:00Z", "2026-01-01T00:01:30Z"}},
		{"@every 1h", "2026-01-01T00:00:00Z", []string{"2026-01-01T01:00:00Z", "2026-01-01T02:00:00Z", "2026-01-01T03:00:00Z"}},
		{"5-10/5 0 1 jan *", "2026-01-01T00:00:00Z", []string{"2026-01-01T00:05:00Z", "2026-01-01T00:10:00Z", "2027-01-01T00:05:00Z"}},
	}
	for _, tc := range cases {
		t.Run(tc.spec, func(t *testing.T) {
			require.Equal(t, tc.want, ticks(t, tc.spec, utc, tc.after, 3))
		})
	}
}

// TestNextAcrossDaylightSaving: a local time skipped in spring ticks at
// the first instant after the gap, once; a local time shown twice in autumn
// ticks once, at its first occurrence; the hours around are unmoved.
func TestNextAcrossDaylightSaving(t *testing.T) {
	cases := []struct {
		name, zone, spec, after string
		want                    []string
	}{
		// New York: 2026-03-08 02:00 EST -> 03:00 EDT; 2026-11-01 02:00 EDT -> 01:00 EST.
		{"NewYorkSpringDaily", "America/New_York", "30 2 * * *", "2026-03-07T00:00:00-05:00",
			[]string{"2026-03-07T02:30:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-09T02:30:00-04:00"}},
		{"NewYorkSpringQuarters", "America/New_York", "*/15 1-3 8 3 *", "2026-03-08T01:30:00-05:00",
			[]string{"2026-03-08T01:45:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T03:15:00-04:00"}},
		{"NewYorkAutumnDaily", "America/New_York", "30 1 * * *", "2026-10-31T00:00:00-04:00",
			[]string{"2026-10-31T01:30:00-04:00", "2026-11-01T01:30:00-04:00", "2026-11-02T01:30:00-05:00"}},
		{"NewYorkAutumnHourly", "America/New_York", "0 * 1 11 *", "2026-11-01T00:30:00-04:00",
			[]string{"2026-11-01T01:00:00-04:00", "2026-11-01T02:00:00-05:00", "2026-11-01T03:00:00-05:00"}},
		{"NewYorkAutumnFromSecondOccurrence", "America/New_York", "30 1 * * *", "2026-11-01T01:10:00-05:00",
			[]string{"2026-11-02T01:30:00-05:00"}},
		// Paris: 2026-03-29 02:00 CET -> 03:00 CEST; 2026-10-25 03:00 CEST -> 02:00 CET.
		{"ParisSpring", "Europe/Paris", "0 2 * * *", "2026-03-28T12:00:00+01:00",
			[]string{"2026-03-29T03:00:00+02:00", "2026-03-30T02:00:00+02:00"}},
		{"ParisAutumn", "Europe/Paris", "30 2 * * *", "2026-10-25T00:00:00+02:00",
			[]string{"2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"}},
		{"ParisMondaySix", "Europe/Paris", "0 6 * * mon", "2026-10-20T00:00:00+02:00",
			[]string{"2026-10-26T06:00:00+01:00", "2026-11-02T06:00:00+01:00"}},
		// Lord Howe: 30-minute shifts. 2026-10-04 02:00 -> 02:30 (+10:30 -> +11);
		// 2026-04-05 02:00 (+11) -> 01:30 (+10:30).
		{"LordHoweSpring", "Australia/Lord_Howe", "15 2 * * *", "2026-10-03T12:00:00+10:30",
			[]string{"2026-10-04T02:30:00+11:00", "2026-10-05T02:15:00+11:00"}},
		{"LordHoweAutumn", "Australia/Lord_Howe", "45 1 * * *", "2026-04-04T12:00:00+11:00",
			[]string{"2026-04-05T01:45:00+11:00", "2026-04-06T01:45:00+10:30"}},
		{"EveryIgnoresTheZone", "America/New_York", "@every 1h", "2026-03-08T00:00:00-05:00",
			[]string{"2026-03-08T01:00:00-05:00", "2026-03-08T03:00:00-04:00", "2026-03-08T04:00:00-04:00"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := ticks(t, tc.spec, zone(t, tc.zone), tc.after, len(tc.want))
			require.Equal(t, tc.want, got)
		})
	}
}

// TestTicksNeverRepeatOrGoBack: through the months of both hemispheres'
// transitions, every tick is after the one before it, for specs of every
// shape.
func TestTicksNeverRepeatOrGoBack(t *testing.T) {
	windows := [][2]string{{"2026-03-01T00:00:00Z", "2026-04-10T00:00:00Z"}, {"2026-09-25T00:00:00Z", "2026-11-05T00:00:00Z"}}
	for _, name := range []string{"America/New_York", "Europe/Paris", "Australia/Lord_Howe", "UTC"} {
		loc := zone(t, name)
		for _, spec := range []string{"*/10 * * * *", "30 1 * * *", "30 2 * * *", "0 * * * *", "@every 7m"} {
			s, err := Parse(spec)
			require.NoError(t, err)
			for _, w := range windows {
				last := at(t, w[0])
				n := 0
				for last.Before(at(t, w[1])) {
					next, ok := s.Next(last, loc)
					require.True(t, ok)
					require.True(t, next.After(last), "%s %s: %v after %v", name, spec, next, last)
					last = next
					n++
				}
				require.Positive(t, n)
			}
		}
	}
}

// TestParseRefusesBadSpecs: a bad spec is an error that says what is wrong.
func TestParseRefusesBadSpecs(t *testing.T) {
	cases := map[string]string{
		"":                        "empty spec",
		"* * * *":                 "4 fields",
		"* * * * * * *":           "7 fields",
		"60 * * * *":              "minute: 60 is outside 0-59",
		"* 24 * * *":              "hour: 24 is outside 0-23",
		"* * 0 * *":               "day of month: 0 is outside 1-31",
		"* * * 13 *":              "month: 13 is outside 1-12",
		"* * * * 8":               "day of week: 8 is outside 0-7",
		"*/0 * * * *":             "bad step",
		"5-1 * * * *":             "runs backwards",
		"x * * * *":               `"x" is not a number`,
		"1,,2 * * * *":            "empty list entry",
		"0 0 30 2 *":              "no date matches",
		"@often":                  "unknown descriptor",
		"@every":                  "@every needs a duration",
		"@every banana":           "@every needs a duration",
		"@every 500ms":            "outside",
		"@every 1500ms":           "whole number of seconds",
		"@every 10000h":           "outside",
		string(make([]byte, 300)): "longer than",
	}
	for spec, want := range cases {
		_, err := Parse(spec)
		require.ErrorContains(t, err, want, "spec %q", spec)
	}
}

// BenchmarkNext: one next tick of a daily spec in a zone with DST.
func BenchmarkNext(b *testing.B) {
	loc, _ := time.LoadLocation("Europe/Paris")
	s, _ := Parse("0 8 * * mon-fri")
	t := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for b.Loop() {
		t, _ = s.Next(t, loc)
	}
}

// FuzzParse: no spec makes Parse or Next panic, and a tick is always after
// the instant it was asked for.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"*/5 * * * *", "0 0 1 1 *", "@every 90s", "1-5/2 * * * mon-fri", "0 0 29 2 *", "@daily"} {
		f.Add(s, int64(1_767_225_600))
	}
	loc, err := time.LoadLocation("America/New_York")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, spec string, unix int64) {
		s, err := Parse(spec)
		if err != nil {
			return
		}
		after := time.Unix(unix%(1<<34), 0)
		if next, ok := s.Next(after, loc); ok && !next.After(after) {
			t.Fatalf("%q: next %v is not after %v", spec, next, after)
		}
	})
}

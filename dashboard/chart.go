package dashboard

import (
	"fmt"
	"html/template"
	"slices"
	"strings"
	"time"

	"github.com/redeq-go/redeq/redeq"
)

// ChartWindow is the period the charts show.
const ChartWindow = time.Hour

// The drawing area of a chart, in SVG user units.
const (
	chartW, chartH = 600, 120
	chartLeft      = 48 // room for the y labels
	chartTop       = 8
	chartBottom    = 18 // room for the x labels
)

// charts is the last hour of one topic, or of the topics of a page.
type charts struct {
	Processed, Failed int64
	Timed             int64  // fetched jobs whose lateness is known
	P50, P99          string // over the hour
	Activity          template.HTML
	Lateness          template.HTML
}

// chartsOf draws minutes (oldest first) as two inline SVG charts, made
// here so that the page needs no script and passes the CSP: bars of the
// deliveries processed and failed per minute, and lines of the lateness
// p50 and p99 per minute.
func chartsOf(ms []redeq.Minute) charts {
	sum := redeq.SumMinutes(ms)
	c := charts{Processed: sum.Processed, Failed: sum.Failed, Timed: sum.Lateness.Count(), P50: "—", P99: "—"}
	if c.Timed > 0 {
		c.P50, c.P99 = lateness(sum.LatenessP50()), lateness(sum.LatenessP99())
	}
	c.Activity = activityChart(ms)
	c.Lateness = latenessChart(ms)
	return c
}

// lateness prints a quantile of a histogram: one in its last counter,
// past every bound, is only known to be at least that bound, and says so
// ("≥ 60.00s") rather than pass for the figure.
func lateness(d time.Duration) string {
	if d >= redeq.LatenessBound(redeq.LatenessBuckets-2) {
		return "≥ " + duration(d)
	}
	return duration(d)
}

// duration prints a lateness as a person reads it.
func duration(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
}

// frame opens an SVG chart with its axes and labels; the caller adds the
// marks and closes it.
func frame(b *strings.Builder, id, title, top string, n int) {
	fmt.Fprintf(b, `<svg id="%s" class="chart" viewBox="0 0 %d %d" width="%d" height="%d" role="img" aria-label="%s">`,
		id, chartW, chartH, chartW, chartH, template.HTMLEscapeString(title))
	fmt.Fprintf(b, `<title>%s</title>`, template.HTMLEscapeString(title))
	base := chartH - chartBottom
	fmt.Fprintf(b, `<line class="axis" x1="%d" y1="%d" x2="%d" y2="%d"/>`, chartLeft, base, chartW, base)
	fmt.Fprintf(b, `<line class="axis" x1="%d" y1="%d" x2="%d" y2="%d"/>`, chartLeft, chartTop, chartLeft, base)
	fmt.Fprintf(b, `<text class="lbl" x="%d" y="%d" text-anchor="end">%s</text>`, chartLeft-4, chartTop+8, template.HTMLEscapeString(top))
	fmt.Fprintf(b, `<text class="lbl" x="%d" y="%d" text-anchor="end">0</text>`, chartLeft-4, base)
	fmt.Fprintf(b, `<text class="lbl" x="%d" y="%d">-%d min</text>`, chartLeft, chartH-4, max(n-1, 0))
	fmt.Fprintf(b, `<text class="lbl" x="%d" y="%d" text-anchor="end">now</text>`, chartW, chartH-4)
}

// x returns the left edge of minute i of n and the width of its slot.
func x(i, n int) (float64, float64) {
	w := float64(chartW-chartLeft) / float64(max(n, 1))
	return float64(chartLeft) + float64(i)*w, w
}

// y returns the height of v on a scale whose top is top.
func y(v, top float64) float64 {
	if top <= 0 {
		return 0
	}
	return v / top * float64(chartH-chartBottom-chartTop)
}

func activityChart(ms []redeq.Minute) template.HTML {
	var top int64
	for _, m := range ms {
		top = max(top, m.Processed)
	}
	var b strings.Builder
	frame(&b, "chart-activity", "Jobs processed and failed per minute", fmt.Sprint(top), len(ms))
	base := float64(chartH - chartBottom)
	for i, m := range ms {
		if m.Processed == 0 {
			continue
		}
		left, w := x(i, len(ms))
		h := y(float64(m.Processed), float64(top))
		fmt.Fprintf(&b, `<rect class="processed" x="%.1f" y="%.1f" width="%.1f" height="%.1f"><title>%s: %d processed, %d failed</title></rect>`,
			left+0.5, base-h, max(w-1, 1), h, m.Start.UTC().Format("15:04"), m.Processed, m.Failed)
		if m.Failed > 0 {
			hf := y(float64(m.Failed), float64(top))
			fmt.Fprintf(&b, `<rect class="failed" x="%.1f" y="%.1f" width="%.1f" height="%.1f"/>`, left+0.5, base-hf, max(w-1, 1), hf)
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

func latenessChart(ms []redeq.Minute) template.HTML {
	var top time.Duration
	for _, m := range ms {
		if m.Lateness.Count() > 0 {
			top = max(top, m.LatenessP99())
		}
	}
	var b strings.Builder
	frame(&b, "chart-lateness", "Lateness p50 and p99 per minute", lateness(top), len(ms))
	base := float64(chartH - chartBottom)
	for _, line := range []struct {
		class string
		q     float64
	}{{"p99", 0.99}, {"p50", 0.5}} {
		var pts []string
		for i, m := range ms {
			if m.Lateness.Count() == 0 {
				continue
			}
			left, w := x(i, len(ms))
			v := base - y(float64(m.Lateness.Quantile(line.q)), float64(top))
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", left+w/2, v))
		}
		if len(pts) == 1 {
			var cx, cy float64
			fmt.Sscanf(pts[0], "%f,%f", &cx, &cy)
			fmt.Fprintf(&b, `<circle class="%s" cx="%.1f" cy="%.1f" r="2"/>`, line.class, cx, cy)
		} else if len(pts) > 1 {
			fmt.Fprintf(&b, `<polyline class="%s" points="%s"/>`, line.class, strings.Join(pts, " "))
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// mergeMinutes adds up the histories of several topics minute by minute
// (each History call reads up to its own current minute).
func mergeMinutes(hs [][]redeq.Minute) []redeq.Minute {
	var out []redeq.Minute
	at := map[int64]int{}
	for _, ms := range hs {
		for _, m := range ms {
			k := m.Start.UnixMilli()
			i, ok := at[k]
			if !ok {
				i = len(out)
				at[k] = i
				out = append(out, redeq.Minute{Start: m.Start})
			}
			out[i] = redeq.SumMinutes([]redeq.Minute{out[i], m})
			out[i].Start = m.Start
		}
	}
	slices.SortFunc(out, func(a, b redeq.Minute) int { return a.Start.Compare(b.Start) })
	return out
}

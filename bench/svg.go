package main

import (
	"fmt"
	"math"
	"strings"
)

// latenessSVG draws the cumulative distribution of each system's lateness
// on a log scale, in plain SVG.
func latenessSVG(late map[string][]float64) string {
	const w, h, left, bottom, top, right = 720, 400, 70, 50, 30, 20
	lo, hi := -1.0, 4.0 // 0.1 ms .. 10 s, log10 ms
	x := func(ms float64) float64 {
		v := math.Log10(math.Max(ms, 0.1))
		return left + (math.Min(v, hi)-lo)/(hi-lo)*(w-left-right)
	}
	y := func(frac float64) float64 { return top + (1-frac)*(h-top-bottom) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="14">Lateness (handler start minus due time), cumulative share of jobs</text>`+"\n", left)
	for e := lo; e <= hi; e++ {
		px := x(math.Pow(10, e))
		label := map[float64]string{-1: "0.1ms", 0: "1ms", 1: "10ms", 2: "100ms", 3: "1s", 4: "10s"}[e]
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/><text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", px, top, px, h-bottom, px, h-bottom+16, label)
	}
	for _, f := range []float64{0, 0.5, 0.9, 1} {
		py := y(f)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%g%%</text>`+"\n", left, py, w-right, py, left-6, py+4, f*100)
	}
	colors := map[string]string{"redeq": "#d62728", "asynq": "#1f77b4", asynqTuned: "#2ca02c"}
	labels := map[string]string{"redeq": "redeq", "asynq": "asynq, defaults", asynqTuned: "asynq, 100 ms checks"}
	ly := top + 20
	for _, name := range []string{"redeq", "asynq", asynqTuned} {
		data := late[name]
		if len(data) == 0 {
			continue
		}
		var pts []string
		for i, v := range data {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(v), y(float64(i+1)/float64(len(data)))))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", colors[name], strings.Join(pts, " "))
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="14" height="4" fill="%s"/><text x="%d" y="%d">%s (p99 %.1f ms)</text>`+"\n", left+10, ly-4, colors[name], left+30, ly, labels[name], pct(data, 99))
		ly += 18
	}
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">lateness (log scale; early or under 0.1 ms drawn at 0.1 ms)</text>`+"\n", (w+left)/2, h-10)
	b.WriteString("</svg>\n")
	return b.String()
}

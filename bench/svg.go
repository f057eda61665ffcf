package main

import (
	"fmt"
	"math"
	"strings"
)

// latenessSVG draws the cumulative distribution of each system's lateness
// on a symmetric log scale, in plain SVG: jobs run early to the left of
// zero, late ones to the right.
func latenessSVG(late map[string][]float64) string {
	const w, h, left, bottom, top, right = 720, 400, 70, 50, 30, 20
	// t runs over 9 decades: -1 s .. -0.1 ms on the left, 0.1 ms .. 10 s on
	// the right, anything between -0.1 and 0.1 ms at zero.
	t := func(ms float64) float64 {
		switch {
		case ms <= -0.1:
			return 3 - math.Log10(math.Min(-ms, 1000))
		case ms < 0.1:
			return 4
		}
		return 5 + math.Log10(math.Min(ms, 10_000))
	}
	x := func(ms float64) float64 { return left + t(ms)/9*(w-left-right) }
	y := func(frac float64) float64 { return top + (1-frac)*(h-top-bottom) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="#f3f3f3"/><text x="%d" y="%d" fill="#888">run early</text>`+"\n", left, top, x(0)-left, h-top-bottom, left+6, h-bottom-6)
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="14">Lateness (handler start minus due time), cumulative share of jobs</text>`+"\n", left)
	ticks := []struct {
		ms    float64
		label string
	}{{-1000, "-1s"}, {-100, "-100ms"}, {-10, "-10ms"}, {-1, "-1ms"}, {0, "0"}, {1, "1ms"}, {10, "10ms"}, {100, "100ms"}, {1000, "1s"}, {10_000, "10s"}}
	for _, tk := range ticks {
		px := x(tk.ms)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/><text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", px, top, px, h-bottom, px, h-bottom+16, tk.label)
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
	fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">lateness (log scale each side of zero; within 0.1 ms of zero drawn at zero)</text>`+"\n", (w+left)/2, h-10)
	b.WriteString("</svg>\n")
	return b.String()
}

package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"
)

// wayColors colour the ways in the chart, in the order of demoWays.
var wayColors = []string{"#d62728", "#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e"}

// writeChartFile writes the chart of rs to path.
func writeChartFile(path string, cfg demoConfig, rs []herdResult) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := writeChart(f, cfg, rs); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Chart geometry, in SVG user units.
const (
	chartW     = 1000.0
	chartH     = 680.0
	plotLeft   = 90.0
	plotRight  = 740.0
	legendLeft = 765.0
	top1, bot1 = 95.0, 330.0  // origin-queries panel
	top2, bot2 = 400.0, 625.0 // latency panel
)

// writeChart draws rs as an SVG: origin queries per bucket (log scale) in
// the upper panel, the p99 latency of the callers released in each bucket in
// the lower one, one line per way, both over time since the way started.
func writeChart(w io.Writer, cfg demoConfig, rs []herdResult) error {
	var b strings.Builder
	bw := cfg.bucket
	if bw <= 0 {
		bw = 100 * time.Millisecond
	}
	nb, maxOrigin, maxLat, minLat := 1, int64(1), time.Millisecond, time.Duration(math.MaxInt64)
	for _, r := range rs {
		nb = max(nb, len(r.buckets))
		for _, k := range r.buckets {
			maxOrigin = max(maxOrigin, k.origin)
			if k.calls > 0 {
				maxLat, minLat = max(maxLat, k.p99), min(minLat, k.p99)
			}
		}
	}
	span := (time.Duration(nb) * bw).Seconds()
	xStep := niceStep(span, 8)
	span = math.Ceil(span/xStep-1e-9) * xStep
	x := func(sec float64) float64 { return plotLeft + (plotRight-plotLeft)*sec/span }

	// Upper panel: log10(1+n), up to the next power of ten.
	decades := math.Ceil(math.Log10(float64(maxOrigin)) - 1e-9)
	oTop := math.Log10(1 + math.Pow(10, decades))
	yOrigin := func(n int64) float64 { return bot1 - (bot1-top1)*math.Log10(1+float64(n))/oTop }
	// Lower panel: log10 of the latency, whole decades.
	lo := math.Floor(math.Log10(float64(max(minLat, 10*time.Microsecond))))
	hi := math.Ceil(math.Log10(float64(maxLat)) - 1e-9)
	if hi <= lo {
		hi = lo + 1
	}
	yLat := func(d time.Duration) float64 {
		v := math.Log10(float64(max(d, time.Duration(math.Pow(10, lo)))))
		return bot2 - (bot2-top2)*(v-lo)/(hi-lo)
	}

	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="Helvetica, Arial, sans-serif" font-size="13">`+"\n",
		chartW, chartH, chartW, chartH)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%g" y="30" font-size="20" font-weight="bold">%s</text>`+"\n", plotLeft,
		esc("sqlflight demo: a hot-key herd played three ways"))
	backend := "embedded SQLite"
	if cfg.dsn != "" {
		backend = "Postgres"
	}
	fmt.Fprintf(&b, `<text x="%g" y="52" fill="#444">%s</text>`+"\n", plotLeft, esc(fmt.Sprintf(
		"%s; a wave of %d callers on one key every %s for %s; the query takes %s; %s buckets",
		backend, cfg.callers, cfg.interval, cfg.duration, cfg.latency, bw)))

	// Panels: frames, grids, axes.
	panel := func(top, bot float64, title, ylabel string) {
		fmt.Fprintf(&b, `<text x="%g" y="%g" font-size="15" font-weight="bold">%s</text>`+"\n", plotLeft, top-12, esc(title))
		fmt.Fprintf(&b, `<rect x="%g" y="%g" width="%g" height="%g" fill="none" stroke="#888"/>`+"\n", plotLeft, top, plotRight-plotLeft, bot-top)
		for t := 0.0; t <= span+1e-9; t += xStep {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#e5e5e5"/>`+"\n", x(t), top, x(t), bot)
			fmt.Fprintf(&b, `<text x="%.1f" y="%g" text-anchor="middle">%s</text>`+"\n", x(t), bot+17, fmtSeconds(t))
		}
		fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="middle">time since the way started (s)</text>`+"\n", (plotLeft+plotRight)/2, bot+35)
		cy := (top + bot) / 2
		fmt.Fprintf(&b, `<text x="22" y="%g" text-anchor="middle" transform="rotate(-90 22 %g)">%s</text>`+"\n", cy, cy, esc(ylabel))
	}
	panel(top1, bot1, "Origin queries reaching the database", fmt.Sprintf("origin queries per %s (log)", bw))
	// A log axis has no 0: its ticks are 1, 10, 100, … (an empty bucket
	// lies on the bottom edge, log10(1+0) = 0).
	for v := int64(1); v <= int64(math.Pow(10, decades)); v *= 10 {
		y := yOrigin(v)
		fmt.Fprintf(&b, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#e5e5e5"/>`+"\n", plotLeft, y, plotRight, y)
		fmt.Fprintf(&b, `<text x="%g" y="%.1f" text-anchor="end">%d</text>`+"\n", plotLeft-6, y+4, v)
	}
	panel(top2, bot2, "Caller latency: p99 of the callers released in each bucket", "p99 latency (log)")
	for e := lo; e <= hi; e++ {
		d := time.Duration(math.Pow(10, e))
		y := yLat(d)
		fmt.Fprintf(&b, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#e5e5e5"/>`+"\n", plotLeft, y, plotRight, y)
		fmt.Fprintf(&b, `<text x="%g" y="%.1f" text-anchor="end">%s</text>`+"\n", plotLeft-6, y+4, d)
	}

	// One step line per way and panel.
	for i, r := range rs {
		color := wayColors[i%len(wayColors)]
		var po, pl strings.Builder
		pen := false
		for k, bk := range r.buckets {
			x0, x1 := x((time.Duration(k) * bw).Seconds()), x((time.Duration(k+1) * bw).Seconds())
			y := yOrigin(bk.origin)
			if k == 0 {
				fmt.Fprintf(&po, "M%.1f %.1f", x0, y)
			} else {
				fmt.Fprintf(&po, " L%.1f %.1f", x0, y)
			}
			fmt.Fprintf(&po, " L%.1f %.1f", x1, y)
			if bk.calls == 0 {
				pen = false
				continue
			}
			y = yLat(bk.p99)
			if pen {
				fmt.Fprintf(&pl, " L%.1f %.1f", x0, y)
			} else {
				fmt.Fprintf(&pl, " M%.1f %.1f", x0, y)
			}
			fmt.Fprintf(&pl, " L%.1f %.1f", x1, y)
			pen = true
		}
		// Draw later ways thinner on top, so that overlapping lines stay visible.
		width := 3.5 - float64(i)
		if po.Len() > 0 {
			fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="%.1f" stroke-linejoin="round"/>`+"\n", po.String(), color, width)
		}
		if pl.Len() > 0 {
			fmt.Fprintf(&b, `<path d="%s" fill="none" stroke="%s" stroke-width="%.1f" stroke-linejoin="round"/>`+"\n", strings.TrimSpace(pl.String()), color, width)
		}
	}

	// Legend, with the totals.
	fmt.Fprintf(&b, `<text x="%g" y="%g" font-size="15" font-weight="bold">Ways</text>`+"\n", legendLeft, top1+4)
	for i, r := range rs {
		color := wayColors[i%len(wayColors)]
		y := top1 + 30 + float64(i)*78
		fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="%s" stroke-width="4"/>`+"\n", legendLeft, y-4, legendLeft+24, y-4, color)
		fmt.Fprintf(&b, `<text x="%g" y="%g" font-weight="bold">%s</text>`+"\n", legendLeft+32, y, esc(r.name))
		lines := []string{
			fmt.Sprintf("%d origin queries", r.origin),
			fmt.Sprintf("for %d callers, %d errors", r.callers, r.errors),
			fmt.Sprintf("p50 %s, p99 %s", fmtDur(r.p50), fmtDur(r.p99)),
		}
		for j, l := range lines {
			fmt.Fprintf(&b, `<text x="%g" y="%g" fill="#333">%s</text>`+"\n", legendLeft+32, y+17*float64(j+1), esc(l))
		}
	}
	fmt.Fprintf(&b, "</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// niceStep returns a step of 1, 2 or 5 times a power of ten that cuts span
// into at most about n parts.
func niceStep(span float64, n int) float64 {
	if span <= 0 {
		return 1
	}
	raw := span / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// fmtSeconds prints a tick value without trailing zeros.
func fmtSeconds(v float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.3f", v), "0"), ".")
}

// esc escapes s for SVG text and attribute values.
func esc(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;").Replace(s)
}

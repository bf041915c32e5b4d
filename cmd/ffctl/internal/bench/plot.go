package bench

import (
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strings"
)

// Series is one line of a plot: a value per x.
type Series struct {
	Name   string
	Color  string
	Points map[int]float64
}

// LifecycleSeries splits lifecycle results into the runner's, the plain
// API's and River's series, by worker count.
func LifecycleSeries(results []Result) []Series {
	runner := Series{Name: "ffriver runner", Color: "#1f77b4", Points: map[int]float64{}}
	plain := Series{Name: "ffriver plain API (Claim Max 1 → Complete)", Color: "#ff7f0e", Points: map[int]float64{}}
	river := Series{Name: "River no-op jobs", Color: "#2ca02c", Points: map[int]float64{}}
	for _, r := range results {
		if r.Scenario != "lifecycle" {
			continue
		}
		var w int
		switch {
		case strings.HasPrefix(r.Figure, "runner, "):
			if _, err := fmt.Sscanf(r.Figure, "runner, %d workers", &w); err == nil {
				runner.Points[w] = r.Value
				river.Points[w] = r.BaselineValue
			}
		case strings.HasPrefix(r.Figure, "plain API"):
			if _, err := fmt.Sscanf(r.Figure, "plain API claim → complete, %d workers", &w); err == nil {
				plain.Points[w] = r.Value
			}
		}
	}
	return []Series{runner, plain, river}
}

// WriteSVG draws series as lines over their x values (evenly spaced, in
// order) in an SVG document, titled title over a smaller subtitle: the
// bench's plot, for the README.
func WriteSVG(w io.Writer, title, subtitle, xLabel, yLabel string, series []Series) error {
	var xs []int
	ymax := 0.0
	for _, s := range series {
		for x, y := range s.Points {
			if !slices.Contains(xs, x) {
				xs = append(xs, x)
			}
			ymax = math.Max(ymax, y)
		}
	}
	if len(xs) == 0 {
		return fmt.Errorf("bench: nothing to plot")
	}
	slices.Sort(xs)
	const width, height, left, right, top, bottom = 720, 440, 70, 20, 56, 90
	pw, ph := float64(width-left-right), float64(height-top-bottom)
	ymax = niceCeil(ymax)
	px := func(i int) float64 {
		if len(xs) == 1 {
			return left + pw/2
		}
		return left + pw*float64(i)/float64(len(xs)-1)
	}
	py := func(y float64) float64 { return top + ph*(1-y/ymax) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="14" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(title))
	fmt.Fprintf(&b, `<text x="%d" y="40" font-size="11" fill="#555">%s</text>`+"\n", left, html.EscapeString(subtitle))
	for i := 0; i <= 5; i++ {
		y := ymax * float64(i) / 5
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, width-right, py(y), py(y))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%.0f</text>`+"\n", left-6, py(y)+4, y)
	}
	for i, x := range xs {
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%d</text>`+"\n", px(i), height-bottom+18, x)
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", left+pw/2, height-bottom+36, html.EscapeString(xLabel))
	fmt.Fprintf(&b, `<text transform="translate(16 %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", top+ph/2, html.EscapeString(yLabel))
	for k, s := range series {
		var pts []string
		for i, x := range xs {
			if y, ok := s.Points[x]; ok {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", px(i), py(y)))
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", px(i), py(y), s.Color)
			}
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", s.Color, strings.Join(pts, " "))
		ly := height - bottom + 54 + 14*k
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2"/>`+"\n", left, left+24, ly-4, ly-4, s.Color)
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", left+30, ly, html.EscapeString(s.Name))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

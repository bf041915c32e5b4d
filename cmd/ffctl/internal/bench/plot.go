package bench

import (
	"fmt"
	"html"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Series is one line of a plot: a value per x.
type Series struct {
	Name   string
	Color  string
	Points map[int]float64
	// Dashed draws the line dashed (a target, a reference).
	Dashed bool
}

// dash is the stroke attribute of a dashed series.
func (s Series) dash() string {
	if s.Dashed {
		return ` stroke-dasharray="6 4"`
	}
	return ""
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
// bench's plot, for docs/performance.md.
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
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`+"\n", s.Color, s.dash(), strings.Join(pts, " "))
		ly := height - bottom + 54 + 14*k
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2"%s/>`+"\n", left, left+24, ly-4, ly-4, s.Color, s.dash())
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

// Chart is one panel of a TimePlot: its series on a y axis of its own,
// from 0.
type Chart struct {
	YLabel string
	Series []Series
}

// Mark is a vertical line drawn across every chart of a TimePlot at x,
// with a label.
type Mark struct {
	X     int
	Label string
}

// TimePlot is charts stacked one above the other over one linear x axis
// of time: each Series' x values are seconds, drawn in units of XUnit
// seconds (60: minutes).
type TimePlot struct {
	Title, Subtitle, XLabel string
	// XUnit is how many seconds one unit of the x axis is (0: 1).
	XUnit  float64
	Marks  []Mark
	Charts []Chart
}

// WriteTimeSVG draws p as an SVG document: the x axis runs from 0 to the
// largest x of any series, each chart has its y axis from 0 and its legend
// under it.
func WriteTimeSVG(w io.Writer, p TimePlot) error {
	unit := p.XUnit
	if unit <= 0 {
		unit = 1
	}
	xmax := 0
	found := false
	for _, c := range p.Charts {
		for _, s := range c.Series {
			for x := range s.Points {
				xmax, found = max(xmax, x), true
			}
		}
	}
	if !found {
		return fmt.Errorf("bench: nothing to plot")
	}
	const width, left, right, top, chartH, legendRow, gap = 720, 70, 20, 56, 170, 14, 24
	pw := float64(width - left - right)
	xspan := float64(xmax) / unit
	step := niceCeil(xspan / 8)
	axisMax := step * math.Max(1, math.Ceil(xspan/step-1e-9))
	px := func(x float64) float64 { return left + pw*(x/unit)/axisMax }

	var b strings.Builder
	y0 := float64(top)
	for ci, c := range p.Charts {
		ymax := 0.0
		for _, s := range c.Series {
			for _, v := range s.Points {
				ymax = math.Max(ymax, v)
			}
		}
		ymax = niceCeil(ymax)
		py := func(v float64) float64 { return y0 + chartH*(1-v/ymax) }
		for i := 0; i <= 5; i++ {
			v := ymax * float64(i) / 5
			fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, width-right, py(v), py(v))
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", left-6, py(v)+4, tick(v))
		}
		for t := 0.0; t <= axisMax+step/2; t += step {
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", px(t*unit), y0+chartH+16, tick(t))
		}
		fmt.Fprintf(&b, `<text transform="translate(16 %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", y0+chartH/2, html.EscapeString(c.YLabel))
		for _, m := range p.Marks {
			x := px(float64(m.X))
			fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#888" stroke-dasharray="3 3"/>`+"\n", x, x, y0, y0+chartH)
			if ci == 0 {
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="10" fill="#555">%s</text>`+"\n", x+4, y0+10, html.EscapeString(m.Label))
			}
		}
		for _, s := range c.Series {
			xs := slices.Sorted(maps.Keys(s.Points))
			pts := make([]string, 0, len(xs))
			for _, x := range xs {
				cx, cy := px(float64(x)), py(s.Points[x])
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", cx, cy))
				fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>`+"\n", cx, cy, s.Color)
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2"%s points="%s"/>`+"\n", s.Color, s.dash(), strings.Join(pts, " "))
		}
		// The legend, entries side by side, wrapped at the width.
		lx, ly := float64(left), y0+chartH+36
		for _, s := range c.Series {
			ew := 30 + 6.5*float64(len([]rune(s.Name))) + 16
			if lx > left && lx+ew > width-right {
				lx, ly = left, ly+legendRow
			}
			fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="2"%s/>`+"\n", lx, lx+24, ly-4, ly-4, s.Color, s.dash())
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+30, ly, html.EscapeString(s.Name))
			lx += ew
		}
		y0 = ly + gap
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", left+pw/2, y0, html.EscapeString(p.XLabel))
	height := int(y0) + 16
	var doc strings.Builder
	fmt.Fprintf(&doc, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&doc, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&doc, `<text x="%d" y="22" font-size="14" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(p.Title))
	fmt.Fprintf(&doc, `<text x="%d" y="40" font-size="11" fill="#555">%s</text>`+"\n", left, html.EscapeString(p.Subtitle))
	doc.WriteString(b.String())
	doc.WriteString("</svg>\n")
	_, err := io.WriteString(w, doc.String())
	return err
}

// tick formats an axis value in at most 6 significant digits, without an
// exponent.
func tick(v float64) string {
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 6, 64), 64)
	return strconv.FormatFloat(r, 'f', -1, 64)
}

package analysis

import (
	"context"
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/dcl-beam/dcl-beam/internal/storage"
)

// Series is one named line: Y against X.
type Series struct {
	Name string
	X, Y []float64
}

// Panel is one chart of a figure.
type Panel interface {
	build() (*plot.Plot, error)
}

// LineChart draws series as lines with points, one colour per series.
type LineChart struct {
	Title, XLabel, YLabel string
	// LogX puts X on a log scale with a tick at every distinct X (for batch sizes).
	LogX bool
	// XTicks, when set, are X's only ticks, with their labels: for X values that are
	// positions 0, 1, 2, … of labelled things (reproductions by date and version). X then
	// spans them with half a position either side.
	XTicks []XTick
	YMin   *float64 // fix the Y range; nil fits the data
	YMax   *float64
	Series []Series
	Legend Corner
}

// XTick is a tick mark on X and its label (which may hold a line break).
type XTick struct {
	X     float64
	Label string
}

// palette is Okabe and Ito's colour-blind-safe set (Color Universal Design, 2008), less its
// yellow, which is faint on white: one colour per series, the same order in every figure.
var palette = []color.Color{
	color.RGBA{0x00, 0x00, 0x00, 0xff}, // black
	color.RGBA{0xe6, 0x9f, 0x00, 0xff}, // orange
	color.RGBA{0x56, 0xb4, 0xe9, 0xff}, // sky blue
	color.RGBA{0x00, 0x9e, 0x73, 0xff}, // bluish green
	color.RGBA{0x00, 0x72, 0xb2, 0xff}, // blue
	color.RGBA{0xd5, 0x5e, 0x00, 0xff}, // vermillion
	color.RGBA{0xcc, 0x79, 0xa7, 0xff}, // reddish purple
}

// seriesColor is series i's colour; after len(palette) series the colours repeat and the
// dash pattern (seriesDashes) changes instead.
func seriesColor(i int) color.Color { return palette[i%len(palette)] }

func seriesDashes(i int) []vg.Length { return plotutil.Dashes(i / len(palette)) }

// HistogramChart overlays histograms as step outlines of the fraction of values per bin, so
// distributions of different sizes compare.
type HistogramChart struct {
	Title, XLabel string
	Names         []string
	Histograms    []Histogram
	Legend        Corner
}

// Corner is where a chart's legend goes.
type Corner int

// The corners a legend can sit in; TopRight is the default.
const (
	TopRight Corner = iota
	TopLeft
	BottomRight
	BottomLeft
)

func placeLegend(p *plot.Plot, c Corner) {
	p.Legend.Top = c == TopRight || c == TopLeft
	p.Legend.Left = c == TopLeft || c == BottomLeft
	// Keep the legend off the axes and the frame.
	p.Legend.XOffs, p.Legend.YOffs = -vg.Millimeter*2, -vg.Millimeter*2
	if p.Legend.Left {
		p.Legend.XOffs = vg.Millimeter * 2
	}
	if !p.Legend.Top {
		p.Legend.YOffs = vg.Millimeter * 2
	}
}

// Float returns a pointer to v, for LineChart's optional bounds.
func Float(v float64) *float64 { return &v }

// WritePNG draws the panels in a grid of cols columns on one white width×height pixel PNG.
func WritePNG(w io.Writer, width, height, cols int, panels ...Panel) error {
	if len(panels) == 0 {
		return errors.New("no panels to draw")
	}
	if width <= 0 || height <= 0 {
		return fmt.Errorf("image size %dx%d: both sides must be positive", width, height)
	}
	cols = max(1, min(cols, len(panels)))
	rows := (len(panels) + cols - 1) / cols
	grid := make([][]*plot.Plot, rows)
	for i, p := range panels {
		pl, err := p.build()
		if err != nil {
			return fmt.Errorf("panel %d: %w", i+1, err)
		}
		grid[i/cols] = append(grid[i/cols], pl)
	}
	for len(grid[rows-1]) < cols {
		grid[rows-1] = append(grid[rows-1], nil)
	}
	const dpi = 96
	c := vgimg.NewWith(
		vgimg.UseWH(vg.Length(width)*vg.Inch/dpi, vg.Length(height)*vg.Inch/dpi),
		vgimg.UseDPI(dpi),
	)
	dc := draw.New(c)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Millimeter * 4, PadY: vg.Millimeter * 4,
		PadTop: vg.Millimeter * 2, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := plot.Align(grid, tiles, dc)
	for r := range grid {
		for col, pl := range grid[r] {
			if pl != nil {
				pl.Draw(canvases[r][col])
			}
		}
	}
	_, err := vgimg.PngCanvas{Canvas: c}.WriteTo(w)
	return err
}

// SavePNG writes the figure to path (local, gs:// or memfs://) atomically.
func SavePNG(ctx context.Context, path string, width, height, cols int, panels ...Panel) error {
	if err := storage.Create(ctx, path, func(w io.Writer) error {
		return WritePNG(w, width, height, cols, panels...)
	}); err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return nil
}

func (lc LineChart) build() (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = lc.Title, lc.XLabel, lc.YLabel
	p.Add(plotter.NewGrid())
	var xs []float64
	for i, s := range lc.Series {
		if len(s.X) != len(s.Y) {
			return nil, fmt.Errorf("series %q has %d x and %d y values", s.Name, len(s.X), len(s.Y))
		}
		if !finite(s.X) || !finite(s.Y) {
			return nil, fmt.Errorf("series %q has a NaN or infinite value", s.Name)
		}
		pts := make(plotter.XYs, len(s.X))
		for j := range s.X {
			if lc.LogX && !(s.X[j] > 0) {
				return nil, fmt.Errorf("series %q: x = %v on a log scale", s.Name, s.X[j])
			}
			pts[j].X, pts[j].Y = s.X[j], s.Y[j]
		}
		xs = append(xs, s.X...)
		line, points, err := plotter.NewLinePoints(pts)
		if err != nil {
			return nil, fmt.Errorf("series %q: %w", s.Name, err)
		}
		line.Color = seriesColor(i)
		line.Width = vg.Points(1.5)
		line.Dashes = seriesDashes(i)
		points.Color = seriesColor(i)
		points.Shape = plotutil.Shape(i)
		p.Add(line, points)
		if s.Name != "" {
			p.Legend.Add(s.Name, line, points)
		}
	}
	if lc.LogX && len(xs) > 0 {
		p.X.Scale = plot.LogScale{}
		slices.Sort(xs)
		xs = slices.Compact(xs)
		if len(xs) <= 12 {
			ticks := make(plot.ConstantTicks, len(xs))
			for i, x := range xs {
				ticks[i] = plot.Tick{Value: x, Label: strconv.FormatFloat(x, 'g', -1, 64)}
			}
			p.X.Tick.Marker = ticks
		} else {
			p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		}
		// Leave a little room either side of the first and last points.
		p.X.Min, p.X.Max = xs[0]/1.15, xs[len(xs)-1]*1.15
	}
	if len(lc.XTicks) > 0 {
		ticks := make(plot.ConstantTicks, len(lc.XTicks))
		p.X.Min, p.X.Max = math.Inf(1), math.Inf(-1)
		for i, t := range lc.XTicks {
			ticks[i] = plot.Tick{Value: t.X, Label: t.Label}
			p.X.Min, p.X.Max = math.Min(p.X.Min, t.X-0.5), math.Max(p.X.Max, t.X+0.5)
		}
		for _, x := range xs {
			p.X.Min, p.X.Max = math.Min(p.X.Min, x-0.5), math.Max(p.X.Max, x+0.5)
		}
		p.X.Tick.Marker = ticks
	}
	if lc.YMin != nil {
		p.Y.Min = *lc.YMin
	}
	if lc.YMax != nil {
		p.Y.Max = *lc.YMax
	}
	placeLegend(p, lc.Legend)
	return p, nil
}

func (hc HistogramChart) build() (*plot.Plot, error) {
	if len(hc.Names) != len(hc.Histograms) {
		return nil, fmt.Errorf("%d names for %d histograms", len(hc.Names), len(hc.Histograms))
	}
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = hc.Title, hc.XLabel, "fraction of anchors"
	p.Add(plotter.NewGrid())
	for i, h := range hc.Histograms {
		if len(h.Counts) == 0 || !(h.Hi > h.Lo) {
			return nil, fmt.Errorf("histogram %q has no bins", hc.Names[i])
		}
		total := h.Total()
		width := (h.Hi - h.Lo) / float64(len(h.Counts))
		// A step outline: across each bin at its height, down or up to the next.
		var pts plotter.XYs
		for b, c := range h.Counts {
			y := 0.0
			if total > 0 {
				y = float64(c) / float64(total)
			}
			x0 := h.Lo + float64(b)*width
			pts = append(pts, plotter.XY{X: x0, Y: y}, plotter.XY{X: x0 + width, Y: y})
		}
		pts = append([]plotter.XY{{X: h.Lo, Y: 0}}, append(pts, plotter.XY{X: h.Hi, Y: 0})...)
		line, err := plotter.NewLine(pts)
		if err != nil {
			return nil, fmt.Errorf("histogram %q: %w", hc.Names[i], err)
		}
		line.Color = seriesColor(i)
		line.Width = vg.Points(1.5)
		line.Dashes = seriesDashes(i)
		p.Add(line)
		p.Legend.Add(hc.Names[i], line)
	}
	if len(hc.Histograms) > 0 {
		p.X.Min, p.X.Max = hc.Histograms[0].Lo, hc.Histograms[0].Hi
	}
	p.Y.Min = 0
	placeLegend(p, hc.Legend)
	return p, nil
}

// NPCSummaryCharts are the panels of the paper's Fig. 1(a): mean q and its coefficient of
// variation C_v = σ/μ against batch size, one line per report.
func NPCSummaryCharts(reports []NPCReport) (meanQ, cv LineChart) {
	meanQ = LineChart{Title: "NPC multiplier", XLabel: "batch size", YLabel: "mean q", LogX: true, YMin: Float(0), YMax: Float(1), Legend: BottomRight}
	cv = LineChart{Title: "Coefficient of variation", XLabel: "batch size", YLabel: "C_v = σ/μ of q", LogX: true, YMin: Float(0)}
	for _, r := range reports {
		m, c := Series{Name: r.Name}, Series{Name: r.Name}
		for _, s := range r.Stats {
			m.X, m.Y = append(m.X, float64(s.BatchSize)), append(m.Y, s.Mean)
			c.X, c.Y = append(c.X, float64(s.BatchSize)), append(c.Y, s.CV)
		}
		meanQ.Series, cv.Series = append(meanQ.Series, m), append(cv.Series, c)
	}
	return meanQ, cv
}

// NPCDistributionChart is the paper's Fig. 1(b) for one report: the distribution of q for
// each batch size, overlaid.
func NPCDistributionChart(r NPCReport) HistogramChart {
	h := HistogramChart{Title: "Distribution of q: " + r.Name, XLabel: "NPC multiplier q"}
	for _, s := range r.Stats {
		h.Names = append(h.Names, "batch "+strconv.Itoa(s.BatchSize))
		h.Histograms = append(h.Histograms, s.Histogram)
	}
	return h
}

// MetricByEpochChart draws one metric (loss, kNN accuracy, …) against epoch, one line per run.
func MetricByEpochChart(title, metric string, runs []Series) LineChart {
	return LineChart{Title: title, XLabel: "epoch", YLabel: metric, Series: runs}
}

// AccuracyByBatchSizeChart draws accuracy against batch size, one line per loss; each
// series' X are batch sizes.
func AccuracyByBatchSizeChart(title string, perLoss []Series) LineChart {
	return LineChart{Title: title, XLabel: "batch size", YLabel: "top-1 accuracy (%)", LogX: true, Series: perLoss}
}

// finite reports whether every value is a finite number (NaN and ±Inf cannot be plotted).
func finite(v []float64) bool {
	for _, x := range v {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return false
		}
	}
	return true
}

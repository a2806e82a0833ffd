// Package figures draws the reports' PNG plots with gonum/plot, apart from the evaluation math
// of package analysis that they show. WritePNG/SavePNG draw LineChart, HistogramChart and
// ScatterChart panels in a grid, in Okabe and Ito's colour-blind-safe palette, with each
// legend beside its chart (Outside) unless a chart asks for a corner; a LineChart's
// References are horizontal lines (baselines, the paper's figures). NPCSummaryCharts and
// NPCDistributionChart are the paper's Fig. 1(a) and (b), MetricByEpochChart and
// AccuracyByBatchSizeChart the reproduction's usual plots, ScatterChart its t-SNE (Fig. 4c).
//
// TSNE makes that t-SNE figure from embedding files (`dcl tsne`, the reproduction's report):
// a per-class sample of each set (package shards/embeddings reads them), laid out by
// analysis.TSNE, one ScatterChart panel per set.
package figures

import (
	"context"
	"errors"
	"fmt"
	"image/color"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/dcl-beam/dcl-beam/analysis"
	"github.com/dcl-beam/dcl-beam/internal/storage"
)

// Series is one named line: Y against X.
type Series struct {
	Name string
	X, Y []float64
	// YErr, when set, is a half-width per point, drawn as an error bar Y ± YErr (the
	// standard deviation over seeds, for example).
	YErr []float64
	// Style is 1 + the place of the series' colour, dashes and marker in the palette's
	// order, so that a run keeps its colour in every figure of a report even where some
	// figures leave runs out; 0 takes the series' position in its chart.
	Style int
}

// style is the palette position of series i of a chart.
func (s Series) style(i int) int {
	if s.Style > 0 {
		return s.Style - 1
	}
	return i
}

// Panel is one chart of a figure.
type Panel interface {
	build() (*plot.Plot, error)
}

// legendOf returns where a built panel's legend goes.
func legendOf(p Panel) Corner {
	switch c := p.(type) {
	case LineChart:
		return c.Legend
	case HistogramChart:
		return c.Legend
	case ScatterChart:
		return Outside
	}
	return Outside
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
	// MinYSpan, when set, widens a fitted Y range narrower than it to it, around the data's
	// middle and inside YBounds: accuracy charts span at least a few points, so that a
	// difference of a fraction of a point is not drawn across the whole chart.
	MinYSpan float64
	YBounds  [2]float64
	Series   []Series
	// References are horizontal lines across the chart (baselines, published figures).
	References []Reference
	Legend     Corner
}

// Reference is a horizontal reference line at Y. With Of naming one of the chart's series it
// is drawn dashed in that series' colour (the paper's figure for a run); otherwise in grey,
// with a dash pattern of its own (a baseline that belongs to no series).
type Reference struct {
	Name string
	Y    float64
	Of   string
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
	Histograms    []analysis.Histogram
	Legend        Corner
}

// Corner is where a chart's legend goes.
type Corner int

// Where a legend can sit. Outside, the default, is right of the chart's axes, where it
// never covers data; the corners put it inside, for charts known to leave one empty.
const (
	Outside Corner = iota
	TopRight
	TopLeft
	BottomRight
	BottomLeft
)

func placeLegend(p *plot.Plot, c Corner) {
	if c == Outside {
		// Drawn by WritePNG beside the chart; entries start at the top, text after icons.
		p.Legend.Top, p.Legend.Left = true, true
		return
	}
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

// distinctTicks are gonum's default ticks, labelled with as many decimals as it takes to
// tell them apart: the default labels of a narrow range (83.96 to 84.04) all read "84".
type distinctTicks struct{}

func (distinctTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	if distinctLabels(ticks) {
		return ticks
	}
	for prec := 1; prec <= 6; prec++ {
		relabelled := slices.Clone(ticks)
		for i, t := range relabelled {
			if t.Label != "" {
				relabelled[i].Label = strconv.FormatFloat(t.Value, 'f', prec, 64)
			}
		}
		if distinctLabels(relabelled) {
			return relabelled
		}
	}
	return ticks
}

func distinctLabels(ticks []plot.Tick) bool {
	seen := map[string]bool{}
	for _, t := range ticks {
		if t.Label == "" {
			continue
		}
		if seen[t.Label] {
			return false
		}
		seen[t.Label] = true
	}
	return true
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
	// A legend outside its chart takes a strip on the right of the chart's tile, as wide as
	// its longest entry; the chart is drawn in the rest.
	outside := make([][]plot.Legend, rows)
	for i, p := range panels {
		pl := grid[i/cols][i%cols]
		var leg plot.Legend
		if legendOf(p) == Outside {
			leg, pl.Legend = pl.Legend, plot.NewLegend()
		}
		outside[i/cols] = append(outside[i/cols], leg)
	}
	canvases := plot.Align(grid, tiles, dc)
	for r := range grid {
		for col, pl := range grid[r] {
			if pl == nil {
				continue
			}
			c := canvases[r][col]
			if leg := outside[r][col]; leg.Rectangle(c).Size().X > 0 {
				w := leg.Rectangle(c).Size().X + vg.Millimeter*4
				chart := draw.Crop(c, 0, -w, 0, 0)
				pl.Draw(chart)
				// Level with the top of the axes: below the chart's title.
				top := vg.Length(0)
				if pl.Title.Text != "" {
					top = pl.Title.TextStyle.Rectangle(pl.Title.Text).Size().Y + pl.Title.Padding + vg.Millimeter*2
				}
				leg.Draw(draw.Crop(c, c.Size().X-w+vg.Millimeter*3, 0, 0, -top))
				continue
			}
			pl.Draw(c)
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
	var xs, ys []float64
	for i, s := range lc.Series {
		if len(s.X) != len(s.Y) {
			return nil, fmt.Errorf("series %q has %d x and %d y values", s.Name, len(s.X), len(s.Y))
		}
		if s.YErr != nil && len(s.YErr) != len(s.Y) {
			return nil, fmt.Errorf("series %q has %d y values and %d error bars", s.Name, len(s.Y), len(s.YErr))
		}
		if !finite(s.X) || !finite(s.Y) || !finite(s.YErr) {
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
		st := s.style(i)
		line.Color = seriesColor(st)
		line.Width = vg.Points(1.5)
		line.Dashes = seriesDashes(st)
		points.Color = seriesColor(st)
		points.Shape = plotutil.Shape(st)
		p.Add(line, points)
		for j, y := range s.Y {
			e := 0.0
			if s.YErr != nil {
				e = math.Abs(s.YErr[j])
			}
			ys = append(ys, y-e, y+e)
		}
		if s.YErr != nil {
			bars := errorPoints{XYs: pts, YErrors: make(plotter.YErrors, len(pts))}
			for j, e := range s.YErr {
				bars.YErrors[j].Low, bars.YErrors[j].High = math.Abs(e), math.Abs(e)
			}
			eb, err := plotter.NewYErrorBars(bars)
			if err != nil {
				return nil, fmt.Errorf("series %q: %w", s.Name, err)
			}
			eb.Color, eb.Width, eb.CapWidth = seriesColor(st), vg.Points(1.2), vg.Points(6)
			p.Add(eb)
		}
		if s.Name != "" {
			p.Legend.Add(s.Name, line, points)
		}
	}
	if err := lc.addReferences(p, xs); err != nil {
		return nil, err
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
	p.Y.Tick.Marker = distinctTicks{}
	for _, ref := range lc.References {
		ys = append(ys, ref.Y)
	}
	if lc.MinYSpan > 0 && len(ys) > 0 {
		p.Y.Min, p.Y.Max = widen(slices.Min(ys), slices.Max(ys), lc.MinYSpan, lc.YBounds)
	}
	// A fitted axis ends at the extreme points, where their markers would be cut in half by
	// its edge: leave room for them.
	if span := p.Y.Max - p.Y.Min; len(ys) > 0 && span > 0 {
		p.Y.Min, p.Y.Max = p.Y.Min-yMargin*span, p.Y.Max+yMargin*span
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

// errorPoints are a series' points with their error bars, for plotter.NewYErrorBars.
type errorPoints struct {
	plotter.XYs
	plotter.YErrors
}

// yMargin is the room left above and below a fitted Y axis's extreme points, as a fraction
// of its span.
const yMargin = 0.04

// widen returns [lo, hi] widened to at least span around its middle, moved inside bounds
// where bounds are set (bounds[0] < bounds[1]) and the span fits them.
func widen(lo, hi, span float64, bounds [2]float64) (float64, float64) {
	if hi-lo >= span {
		return lo, hi
	}
	mid := (lo + hi) / 2
	lo, hi = mid-span/2, mid+span/2
	if bounds[0] < bounds[1] && bounds[1]-bounds[0] >= span {
		if lo < bounds[0] {
			lo, hi = bounds[0], bounds[0]+span
		}
		if hi > bounds[1] {
			lo, hi = bounds[1]-span, bounds[1]
		}
	}
	return lo, hi
}

// referenceGrey is the colour of reference lines that belong to no series: a mid grey,
// distinct from every palette colour for every kind of colour vision.
var referenceGrey = color.RGBA{0x88, 0x88, 0x88, 0xff}

// addReferences draws the chart's reference lines across the series' X range (xs).
func (lc LineChart) addReferences(p *plot.Plot, xs []float64) error {
	if len(lc.References) == 0 {
		return nil
	}
	if len(xs) == 0 {
		return errors.New("reference lines need a series to span")
	}
	lo, hi := slices.Min(xs), slices.Max(xs)
	if lo == hi {
		lo, hi = lo-0.5, hi+0.5
	}
	neutral := 0
	for _, ref := range lc.References {
		if math.IsNaN(ref.Y) || math.IsInf(ref.Y, 0) {
			return fmt.Errorf("reference %q is not a finite number", ref.Name)
		}
		line, err := plotter.NewLine(plotter.XYs{{X: lo, Y: ref.Y}, {X: hi, Y: ref.Y}})
		if err != nil {
			return fmt.Errorf("reference %q: %w", ref.Name, err)
		}
		line.Width = vg.Points(1.2)
		if i := slices.IndexFunc(lc.Series, func(s Series) bool { return ref.Of != "" && s.Name == ref.Of }); i >= 0 {
			line.Color = seriesColor(lc.Series[i].style(i))
			line.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
		} else {
			if ref.Of != "" {
				return fmt.Errorf("reference %q belongs to series %q, which the chart does not have", ref.Name, ref.Of)
			}
			line.Color = referenceGrey
			line.Dashes = plotutil.Dashes(1 + neutral)
			neutral++
		}
		p.Add(line)
		if ref.Name != "" {
			p.Legend.Add(ref.Name, line)
		}
	}
	return nil
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
func NPCSummaryCharts(reports []analysis.NPCReport) (meanQ, cv LineChart) {
	meanQ = LineChart{Title: "NPC multiplier", XLabel: "batch size", YLabel: "mean q", LogX: true, YMin: Float(0), YMax: Float(1)}
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
func NPCDistributionChart(r analysis.NPCReport) HistogramChart {
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
// series' X are batch sizes. Its Y axis spans at least AccuracySpan points.
func AccuracyByBatchSizeChart(title string, perLoss []Series) LineChart {
	return LineChart{Title: title, XLabel: "batch size", YLabel: "top-1 accuracy (%)", LogX: true, Series: perLoss,
		MinYSpan: AccuracySpan, YBounds: [2]float64{0, 100}}
}

// AccuracySpan is the least span, in percentage points, of an accuracy chart's Y axis: the
// differences that matter in the paper are one to five points, and seeds move a figure by
// about one; on an axis fitted to two points 0.5 apart, a half-point difference would fill
// the chart.
const AccuracySpan = 10

// finite reports whether every value is a finite number (NaN and ±Inf cannot be plotted).
func finite(v []float64) bool {
	for _, x := range v {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return false
		}
	}
	return true
}

// ScatterChart draws points coloured by class, with a legend of the class names: a t-SNE
// layout (TSNE). Class l is drawn in palette colour l mod 7 with marker shape l div 7, so
// that up to 42 classes stay distinct without a colour that colour-blind readers confuse.
type ScatterChart struct {
	Title  string
	X, Y   []float64
	Labels []int32
	// Classes names the labels (label l is Classes[l]); a label without a name is "class l".
	Classes []string
}

// scatterShapes are the class markers after the colours run out: filled ones first.
var scatterShapes = []draw.GlyphDrawer{draw.CircleGlyph{}, draw.PyramidGlyph{}, draw.BoxGlyph{},
	draw.CrossGlyph{}, draw.PlusGlyph{}, draw.RingGlyph{}}

func classStyle(l int32) draw.GlyphStyle {
	return draw.GlyphStyle{Color: seriesColor(int(l)), Radius: vg.Points(2),
		Shape: scatterShapes[(int(l)/len(palette))%len(scatterShapes)]}
}

func (sc ScatterChart) build() (*plot.Plot, error) {
	n := len(sc.X)
	if len(sc.Y) != n || len(sc.Labels) != n {
		return nil, fmt.Errorf("scatter %q: %d x, %d y and %d labels, want one of each per point", sc.Title, n, len(sc.Y), len(sc.Labels))
	}
	if n == 0 {
		return nil, fmt.Errorf("scatter %q has no points", sc.Title)
	}
	if !finite(sc.X) || !finite(sc.Y) {
		return nil, fmt.Errorf("scatter %q has a NaN or infinite coordinate", sc.Title)
	}
	p := plot.New()
	p.Title.Text = sc.Title
	p.HideAxes()
	placeLegend(p, Outside)
	present := map[int32]bool{}
	for _, l := range sc.Labels {
		if l < 0 {
			return nil, fmt.Errorf("scatter %q: label %d (unlabelled points cannot be coloured by class)", sc.Title, l)
		}
		present[l] = true
	}
	// Points are drawn in an order that mixes the classes (a fixed permutation), so that no
	// class is always drawn over the others where they overlap.
	order := rand.New(rand.NewPCG(uint64(n), 0x5ca7)).Perm(n)
	pts := make(plotter.XYs, n)
	for i, j := range order {
		pts[i] = plotter.XY{X: sc.X[j], Y: sc.Y[j]}
	}
	s, err := plotter.NewScatter(pts)
	if err != nil {
		return nil, fmt.Errorf("scatter %q: %w", sc.Title, err)
	}
	s.GlyphStyleFunc = func(i int) draw.GlyphStyle { return classStyle(sc.Labels[order[i]]) }
	p.Add(s)
	for _, l := range slices.Sorted(maps.Keys(present)) {
		name := "class " + strconv.Itoa(int(l))
		if int(l) < len(sc.Classes) {
			name = sc.Classes[l]
		}
		p.Legend.Add(name, &plotter.Scatter{GlyphStyle: classStyle(l)})
	}
	// The same scale on both axes, so that the layout's distances are not stretched one way
	// more than the other (as far as the panel is square).
	x0, x1, y0, y1 := slices.Min(sc.X), slices.Max(sc.X), slices.Min(sc.Y), slices.Max(sc.Y)
	half := max(x1-x0, y1-y0, 1e-9) / 2 * 1.04
	p.X.Min, p.X.Max = (x0+x1)/2-half, (x0+x1)/2+half
	p.Y.Min, p.Y.Max = (y0+y1)/2-half, (y0+y1)/2+half
	return p, nil
}

package figures

import (
	"bytes"
	"context"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/analysis"
)

func sampleNPCReports(t *testing.T) []analysis.NPCReport {
	t.Helper()
	var reports []analysis.NPCReport
	for i, name := range []string{"InfoNCE τ=0.1", "DCL τ=0.1"} {
		var stats []analysis.NPCStats
		for _, size := range []int{32, 64, 128, 256} {
			var acc analysis.QAccumulator
			for j := range 200 {
				x := float64(j) / 200
				acc.Add(math.Pow(x, 1/(float64(size)/32*float64(i+1))))
			}
			stats = append(stats, acc.Stats(size, 3, 20))
		}
		reports = append(reports, analysis.NPCReport{Name: name, Source: "emb/pairs.parquet", Temperature: 0.1, Seed: 5, Pairs: 1000, Stats: stats})
	}
	return reports
}

// decodePNG checks that b is a PNG of the given size with more than one colour drawn.
func decodePNG(t *testing.T, b []byte, width, height int) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	if got := img.Bounds(); got != image.Rect(0, 0, width, height) {
		t.Errorf("image bounds %v, want %dx%d", got, width, height)
	}
	colours := map[[4]uint32]bool{}
	for y := 0; y < height; y += 3 {
		for x := 0; x < width; x += 3 {
			r, g, b, a := img.At(x, y).RGBA()
			colours[[4]uint32{r, g, b, a}] = true
		}
	}
	if len(colours) < 5 {
		t.Errorf("the image has %d colours: nothing was drawn", len(colours))
	}
}

func TestPlotsDecode(t *testing.T) {
	reports := sampleNPCReports(t)
	meanQ, cv := NPCSummaryCharts(reports)
	runs := []Series{{Name: "dcl", X: []float64{1, 2, 3}, Y: []float64{40, 55, 61}}, {Name: "infonce", X: []float64{1, 2, 3}, Y: []float64{35, 50, 58}}}
	tests := []struct {
		name          string
		width, height int
		cols          int
		panels        []Panel
	}{
		{"fig1a", 1200, 450, 2, []Panel{meanQ, cv}},
		{"fig1b", 1400, 500, 2, []Panel{NPCDistributionChart(reports[0]), NPCDistributionChart(reports[1])}},
		{"by epoch", 640, 480, 1, []Panel{MetricByEpochChart("kNN accuracy", "top-1 (%)", runs)}},
		{"by batch", 641, 479, 1, []Panel{AccuracyByBatchSizeChart("CIFAR-10", []Series{{Name: "dcl", X: []float64{32, 64, 128}, Y: []float64{80, 82, 83}}})}},
		{"three in two columns", 900, 900, 2, []Panel{meanQ, cv, NPCDistributionChart(reports[0])}},
		{"with references", 700, 400, 1, []Panel{LineChart{Title: "kNN", Series: runs, References: []Reference{
			{Name: "dcl, paper", Y: 70, Of: "dcl"}, {Name: "random-init baseline", Y: 20}, {Name: "raw-pixels baseline", Y: 30}}}}},
		{"error bars", 600, 400, 1, []Panel{AccuracyByBatchSizeChart("seeds", []Series{{Name: "dcl", X: []float64{32, 256}, Y: []float64{80, 81}, YErr: []float64{0.4, 0}}})}},
		{"scatter", 500, 400, 1, []Panel{ScatterChart{Title: "t-SNE", X: []float64{0, 1, 2, 3}, Y: []float64{0, 1, 0, 1},
			Labels: []int32{0, 1, 2, 9}, Classes: []string{"cat", "dog", "bird"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := WritePNG(&buf, tt.width, tt.height, tt.cols, tt.panels...); err != nil {
				t.Fatal(err)
			}
			decodePNG(t, buf.Bytes(), tt.width, tt.height)
		})
	}
	path := filepath.Join(t.TempDir(), "fig1a.png")
	if err := SavePNG(context.Background(), path, 800, 300, 2, meanQ, cv); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	decodePNG(t, b, 800, 300)
}

func TestPlotErrors(t *testing.T) {
	tests := []struct {
		panels []Panel
		want   string
	}{
		{nil, "no panels"},
		{[]Panel{LineChart{Series: []Series{{Name: "s", X: []float64{1, 2}, Y: []float64{1}}}}}, `series "s" has 2 x and 1 y values`},
		{[]Panel{LineChart{Series: []Series{{Name: "s", X: []float64{1}, Y: []float64{math.NaN()}}}}}, `series "s" has a NaN`},
		{[]Panel{LineChart{Series: []Series{{Name: "s", X: []float64{1, 2}, Y: []float64{1, 2}, YErr: []float64{1}}}}}, `series "s" has 2 y values and 1 error bars`},
		{[]Panel{LineChart{Series: []Series{{Name: "s", X: []float64{1}, Y: []float64{1}, YErr: []float64{math.NaN()}}}}}, `series "s" has a NaN`},
		{[]Panel{LineChart{LogX: true, Series: []Series{{Name: "s", X: []float64{0}, Y: []float64{1}}}}}, "on a log scale"},
		{[]Panel{HistogramChart{Names: []string{"a"}}}, "1 names for 0 histograms"},
		{[]Panel{HistogramChart{Names: []string{"a"}, Histograms: []analysis.Histogram{{}}}}, `histogram "a" has no bins`},
		{[]Panel{LineChart{Series: []Series{{Name: "s", X: []float64{1}, Y: []float64{1}}}, References: []Reference{{Name: "r", Y: 1, Of: "t"}}}}, `reference "r" belongs to series "t"`},
		{[]Panel{LineChart{References: []Reference{{Name: "r", Y: 1}}}}, "reference lines need a series"},
		{[]Panel{LineChart{Series: []Series{{Name: "s", X: []float64{1}, Y: []float64{1}}}, References: []Reference{{Name: "r", Y: math.Inf(1)}}}}, `reference "r" is not a finite`},
		{[]Panel{ScatterChart{Title: "t", X: []float64{1, 2}, Y: []float64{1}, Labels: []int32{0, 0}}}, `scatter "t": 2 x, 1 y and 2 labels`},
		{[]Panel{ScatterChart{Title: "t"}}, `scatter "t" has no points`},
		{[]Panel{ScatterChart{Title: "t", X: []float64{1}, Y: []float64{1}, Labels: []int32{-1}}}, "label -1"},
	}
	for _, tt := range tests {
		err := WritePNG(&bytes.Buffer{}, 100, 100, 1, tt.panels...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("error %v, want %q", err, tt.want)
		}
	}
}

// An accuracy axis spans at least AccuracySpan points around the data, inside 0–100: two
// figures half a point apart do not fill the chart.
func TestAccuracyAxisDoesNotExaggerate(t *testing.T) {
	tests := []struct {
		lo, hi, span float64
		bounds       [2]float64
		want         [2]float64
	}{
		{79.5, 80, 10, [2]float64{0, 100}, [2]float64{74.75, 84.75}},
		{60, 90, 10, [2]float64{0, 100}, [2]float64{60, 90}},
		{97, 99.5, 10, [2]float64{0, 100}, [2]float64{90, 100}},
		{1, 2, 10, [2]float64{0, 100}, [2]float64{0, 10}},
		{1, 2, 10, [2]float64{}, [2]float64{-3.5, 6.5}},
	}
	for _, tt := range tests {
		if lo, hi := widen(tt.lo, tt.hi, tt.span, tt.bounds); lo != tt.want[0] || hi != tt.want[1] {
			t.Errorf("widen(%v, %v) = %v, %v; want %v", tt.lo, tt.hi, lo, hi, tt.want)
		}
	}
	chart := AccuracyByBatchSizeChart("two points", []Series{{Name: "a", X: []float64{32, 256}, Y: []float64{79.5, 80}, YErr: []float64{0.2, 0.2}}})
	p, err := chart.build()
	if err != nil {
		t.Fatal(err)
	}
	if span := p.Y.Max - p.Y.Min; span < AccuracySpan {
		t.Errorf("the axis spans %v points, want at least %v", span, AccuracySpan)
	}
	// A fitted axis leaves room beyond its extreme points, whose markers its edge would
	// cut: with a span wider than AccuracySpan too.
	wide := MetricByEpochChart("wide", "top-1", []Series{{Name: "a", X: []float64{1, 2}, Y: []float64{60, 90}}})
	if p, err = wide.build(); err != nil {
		t.Fatal(err)
	}
	if p.Y.Min >= 60 || p.Y.Max <= 90 {
		t.Errorf("the axis of points at 60 and 90 spans %v–%v: their markers sit on its edges", p.Y.Min, p.Y.Max)
	}
}

// A legend outside the chart (the default) sits right of every data point: a line across
// the whole top of the chart, where a legend inside would cover it, ends left of the legend's
// thumbnail of it with white space between. Inside the chart there is no such gap.
func TestLegendOutsideDoesNotCoverData(t *testing.T) {
	series := []Series{
		{Name: "", X: []float64{0, 10}, Y: []float64{0, 0}},
		{Name: "a series with a long name", X: []float64{0, 10}, Y: []float64{1, 1}},
	}
	orange := palette[1].(color.RGBA)
	gap := func(legend Corner) int {
		var buf bytes.Buffer
		if err := WritePNG(&buf, 600, 300, 1, LineChart{Series: series, Legend: legend}); err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(&buf)
		if err != nil {
			t.Fatal(err)
		}
		var cols []int
		for x := range 600 {
			for y := range 300 {
				if r, g, b, _ := img.At(x, y).RGBA(); r>>8 == uint32(orange.R) && g>>8 == uint32(orange.G) && b>>8 == uint32(orange.B) {
					cols = append(cols, x)
					break
				}
			}
		}
		widest := 0
		for i := 1; i < len(cols); i++ {
			widest = max(widest, cols[i]-cols[i-1])
		}
		return widest
	}
	if g := gap(Outside); g < 10 {
		t.Errorf("outside legend: the widest gap between the line and its thumbnail is %d px, want the legend clear of the data", g)
	}
	if g := gap(TopRight); g >= 10 {
		t.Errorf("inside legend: a gap of %d px: the test cannot tell an inside legend from an outside one", g)
	}
}

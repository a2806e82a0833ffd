package reproduce

import (
	"context"
	"fmt"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dcl-beam/dcl-beam/analysis"
	"github.com/dcl-beam/dcl-beam/analysis/figures"
	"github.com/dcl-beam/dcl-beam/trainstep"
)

// Plots name runs by their method, with the settings that tell apart runs of one method.
func TestSeriesNames(t *testing.T) {
	tests := []struct {
		name string
		give []RunConfig
		want map[string]string
	}{
		{name: "one run per method",
			give: []RunConfig{newRun("infonce-b32", "loss", "infonce", "batch_size", 32), newRun("dcl-b32", "loss", "dcl", "batch_size", 32), newRun("moco", "method", "moco", "loss", "dcl", "batch_size", 32)},
			want: map[string]string{"infonce-b32": "SimCLR (InfoNCE)", "dcl-b32": "DCL", "moco": "MoCo-v2 (DCL)"}},
		{name: "a batch-size sweep",
			give: []RunConfig{newRun("a", "loss", "dcl", "batch_size", 32, "temperature", 0.1), newRun("b", "loss", "dcl", "batch_size", 256, "temperature", 0.1), newRun("c", "loss", "infonce", "batch_size", 32)},
			want: map[string]string{"a": "DCL, batch 32", "b": "DCL, batch 256", "c": "SimCLR (InfoNCE)"}},
		{name: "temperatures and models",
			give: []RunConfig{newRun("a", "loss", "dcl", "temperature", 0.1, "model", "resnet18-cifar"), newRun("b", "loss", "dcl", "temperature", 0.5, "model", "resnet50-cifar")},
			want: map[string]string{"a": "DCL, τ=0.1, resnet18-cifar", "b": "DCL, τ=0.5, resnet50-cifar"}},
		{name: "seeds",
			give: []RunConfig{newRun("dcl-s1", "loss", "dcl", "seed", 1), newRun("dcl-s2", "loss", "dcl", "seed", 2)},
			want: map[string]string{"dcl-s1": "DCL, seed 1", "dcl-s2": "DCL, seed 2"}},
		{name: "no setting differs: the run names do",
			give: []RunConfig{newRun("a", "loss", "dcl", "sigma", 0.5), newRun("b", "loss", "dcl", "sigma", 0.7)},
			want: map[string]string{"a": "DCL (a)", "b": "DCL (b)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := seriesNames(tt.give)
			for run, want := range tt.want {
				if got[run] != want {
					t.Errorf("run %s is %q, want %q", run, got[run], want)
				}
			}
		})
	}
}

// sweepResults are the results of a batch-size sweep of two losses, with the paper's
// figures and both baselines, as if every stage had run.
func sweepResults() *Results {
	res := &Results{Experiment: "sweep", Evaluate: EvaluateConfig{}}
	for _, loss := range []string{"infonce", "dcl"} {
		for _, bs := range []int{32, 256} {
			base := 60.0
			if loss == "dcl" {
				base = 70
			}
			r := RunResult{Config: newRun(loss+"-b"+map[int]string{32: "32", 256: "256"}[bs], "loss", loss, "batch_size", bs, "epochs", 3)}
			r.Curves = Curves{Epoch: []float64{1, 2, 3}, Loss: []float64{5, 4.5, 4.2}, KNNEpoch: []float64{1, 2, 3}, KNNTop1: []float64{base - 10, base - 5, base}}
			if loss == "dcl" {
				r.Curves.Loss = []float64{-1, -1.5, -1.7} // DCL's loss is another quantity, here negative
			}
			r.KNN = &analysis.KNNResult{Top1: base, Top5: 95}
			r.Paper = PaperFigures{KNNTop1: base + 8}
			res.Runs = append(res.Runs, r)
		}
	}
	res.Baselines = []BaselineResult{
		{Name: RawPixels, Evaluation: Evaluation{KNN: &analysis.KNNResult{Top1: 35}}},
		{Name: RandomInit, Evaluation: Evaluation{KNN: &analysis.KNNResult{Top1: 30}}},
	}
	return res
}

// The report's figures of a sweep: a loss panel per objective, kNN by epoch with the paper's
// figures and the baselines as reference lines, accuracy by batch size; each linked from
// report.md with a caption.
func TestPlotsOfASweep(t *testing.T) {
	out := t.TempDir()
	res := sweepResults()
	summarise(res)
	made, err := writePlots(context.Background(), out, res, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantSize := map[string][2]int{
		PlotsDir + "/" + LossPlotName:      {2 * plotWidth, plotRows}, // two objectives, two panels
		PlotsDir + "/" + KNNPlotName:       {plotWidth, plotRows},
		PlotsDir + "/" + BatchSizePlotName: {plotWidth, plotRows},
	}
	if len(made) != len(wantSize) {
		t.Errorf("figures %+v, want %d", made, len(wantSize))
	}
	report := markdown(res, made)
	for _, f := range made {
		size, ok := wantSize[f.Path]
		if !ok {
			t.Errorf("unexpected figure %s", f.Path)
			continue
		}
		file, err := os.Open(filepath.Join(out, f.Path))
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := png.DecodeConfig(file)
		file.Close()
		if err != nil || cfg.Width != size[0] || cfg.Height != size[1] {
			t.Errorf("%s: %dx%d (%v), want %dx%d", f.Path, cfg.Width, cfg.Height, err, size[0], size[1])
		}
		if !strings.Contains(report, "]("+f.Path+")") {
			t.Errorf("report.md does not show %s", f.Path)
		}
	}
	chart, ok := knnChart(res, newCellSeries(res.Runs))
	if !ok {
		t.Fatal("no kNN chart")
	}
	var refs []string
	for _, r := range chart.References {
		refs = append(refs, r.Name+"@"+r.Of)
	}
	want := "SimCLR (InfoNCE), batch 32, paper@SimCLR (InfoNCE), batch 32|SimCLR (InfoNCE), batch 256, paper@SimCLR (InfoNCE), batch 256|" +
		"DCL, batch 32, paper@DCL, batch 32|DCL, batch 256, paper@DCL, batch 256|raw-pixels baseline@|random-init baseline@"
	if got := strings.Join(refs, "|"); got != want {
		t.Errorf("kNN reference lines\n%s\nwant\n%s", got, want)
	}
	for _, s := range chart.Series {
		if strings.Contains(s.Name, "-b") {
			t.Errorf("legend entry %q is a run's id, not its method", s.Name)
		}
	}
	losses := lossCharts(res, newCellSeries(res.Runs))
	if len(losses) != 2 {
		t.Fatalf("%d loss panels, want one per objective (2)", len(losses))
	}
	for i, want := range []string{"Training loss: SimCLR (InfoNCE)", "Training loss: DCL"} {
		if c := losses[i].(figures.LineChart); c.Title != want || len(c.Series) != 2 {
			t.Errorf("loss panel %d: %q with %d series, want %q with the 2 runs of that objective", i, c.Title, len(c.Series), want)
		}
	}
}

// TestSweepTableHasKNNAndLinear: the by-batch-size table is laid out as the paper's Table 1,
// with a kNN and a linear row per loss, ours beside the paper's figure.
func TestSweepTableHasKNNAndLinear(t *testing.T) {
	res := sweepResults()
	for i := range res.Runs {
		res.Runs[i].Linear = &analysis.LinearResult{Top1: res.Runs[i].KNN.Top1 + 2}
		res.Runs[i].Paper.LinearTop1 = res.Runs[i].Paper.KNNTop1 + 1
	}
	summarise(res)
	table, ok := sweepTable(res)
	if !ok {
		t.Fatal("no table for a sweep of two batch sizes")
	}
	got := regexp.MustCompile(` +`).ReplaceAllString(table.Markdown(), " ") // without the column padding
	for _, want := range []string{"| batch size", "| 32", "| 256",
		"| SimCLR (InfoNCE), kNN | 60.0 / 68.0 | 60.0 / 68.0 |",
		"| SimCLR (InfoNCE), linear | 62.0 / 69.0 | 62.0 / 69.0 |",
		"| DCL, kNN | 70.0 / 78.0 |", "| DCL, linear | 72.0 / 79.0 |"} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
}

// seededResults are two cells of three seeds each at batch 32 (InfoNCE and DCL, kNN and
// linear), and one seed each at batch 256, as if every stage had run.
func seededResults(dclGap float64) *Results {
	res := &Results{Experiment: "seeds"}
	knn := map[string][]float64{"infonce-b32": {78.6, 79.2, 79.3}, "dcl-b32": {79.2, 79.7, 78.6}, "infonce-b256": {80}, "dcl-b256": {81}}
	for _, cell := range []string{"infonce-b32", "dcl-b32", "infonce-b256", "dcl-b256"} {
		loss, bs, _ := strings.Cut(cell, "-b")
		for i, v := range knn[cell] {
			if loss == "dcl" && bs == "32" {
				v += dclGap
			}
			c := newRun(fmt.Sprintf("%s-s%d", cell, i+1), "loss", loss, "batch_size", map[string]int{"32": 32, "256": 256}[bs], "seed", i+1)
			if len(knn[cell]) == 1 {
				c.Name = cell
			}
			r := RunResult{Config: c, Cell: cell, Evaluation: Evaluation{KNN: &analysis.KNNResult{Top1: v}, Linear: &analysis.LinearResult{Top1: v + 5}}}
			r.Curves = Curves{KNNEpoch: []float64{1, 2}, KNNTop1: []float64{v - 2, v}}
			res.Runs = append(res.Runs, r)
		}
	}
	return res
}

// A seeded experiment's report: each cell's mean, spread and n; every comparison with its
// verdict by the stated rule, "within seed noise" for the demo's figures, a gain only for a
// gap the seeds cannot explain, no claim from one seed; error bars on the figures.
func TestReportOfSeededCells(t *testing.T) {
	for _, tt := range []struct {
		gap  float64
		want string
	}{{0, "within seed noise"}, {5, "gain"}} {
		res := seededResults(tt.gap)
		summarise(res)
		if len(res.Cells) != 4 || len(res.Cells[0].Runs) != 3 {
			t.Fatalf("cells %+v, want 4, the first of 3 runs", res.Cells)
		}
		if s := res.Cells[0].Metrics["knn_top1"]; s.N != 3 || math.Abs(s.Mean-79.0333) > 1e-3 || math.Abs(s.SD-0.3786) > 1e-3 {
			t.Errorf("infonce-b32 kNN over its seeds = %+v", s)
		}
		var verdicts []string
		for _, c := range res.Comparisons {
			verdicts = append(verdicts, c.Cell+" "+c.Metric+": "+string(c.Verdict))
		}
		want := []string{"dcl-b32 knn_top1: " + tt.want, "dcl-b32 linear_top1: " + tt.want,
			"dcl-b256 knn_top1: one seed: no claim", "dcl-b256 linear_top1: one seed: no claim"}
		if !slices.Equal(verdicts, want) {
			t.Errorf("gap %v: comparisons %q, want %q", tt.gap, verdicts, want)
		}
		// Tables pad their columns: compare with single spaces.
		report := regexp.MustCompile(` +`).ReplaceAllString(markdown(res, nil), " ")
		for _, w := range []string{"## Cells (mean ± standard deviation over the seeds)", "| infonce-b32 | SimCLR (InfoNCE) | 32 | 1, 2, 3 | 79.0 ± 0.4 |",
			analysis.SeedRule, "| dcl-b32 | infonce-b32 | knn_top1 |", "| " + tt.want + " |", "| infonce-b32-s2 |"} {
			if !strings.Contains(report, w) {
				t.Errorf("gap %v: report.md lacks %q:\n%s", tt.gap, w, report)
			}
		}
		if tt.gap == 0 && strings.Contains(report, "| gain |") {
			t.Errorf("report.md calls seed noise a gain:\n%s", report)
		}
	}

	res := seededResults(0)
	summarise(res)
	chart, ok := knnChart(res, newCellSeries(res.Runs))
	if !ok || len(chart.Series) != 4 {
		t.Fatalf("kNN chart %v with %d series, want one per cell", ok, len(chart.Series))
	}
	if s := chart.Series[0]; s.Name != "SimCLR (InfoNCE), batch 32" || len(s.YErr) != 2 || math.Abs(s.Y[1]-79.0333) > 1e-3 || math.Abs(s.YErr[1]-0.3786) > 1e-3 {
		t.Errorf("InfoNCE at batch 32: %+v, want the mean of its seeds with their standard deviation as error bars", s)
	}
	if s := chart.Series[2]; s.YErr != nil {
		t.Errorf("a one-seed cell has error bars %v", s.YErr)
	}
	if chart.MinYSpan < 10 {
		t.Errorf("the accuracy axis may span %v points: a fraction of a point would fill the chart", chart.MinYSpan)
	}
	series := batchSizeSeries(res)
	if len(series) != 2 || len(series[0].YErr) != 2 || series[0].YErr[0] == 0 {
		t.Errorf("accuracy by batch size %+v, want error bars from the seeds", series)
	}
	if _, err := writePlots(context.Background(), t.TempDir(), res, nil); err != nil {
		t.Errorf("plots of a seeded experiment: %v", err)
	}
}

// The trend of a metric against the reproductions labels every reproduction whose config
// changed, with the config, whatever the ticks skipped; its accuracy axes span at least
// figures.AccuracySpan points, as every accuracy chart's; the changes table says when the
// previous reproduction had another config.
func TestTrendMarksConfigChanges(t *testing.T) {
	res := sweepResults()
	res.ConfigFingerprint = "bbb"
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var history []Reproduction
	for i := range 20 {
		fp := "aaa"
		if i >= 13 {
			fp = "bbb"
		}
		h := Reproduction{File: fmt.Sprint(i), Time: start.Add(time.Duration(i) * 24 * time.Hour), CodeVersion: "v1", ConfigFingerprint: fp}
		for _, r := range res.Runs {
			h.Rows = append(h.Rows, HistoryRow{Run: r.Config.Name, Metric: "knn_top1", Value: 80 + 0.1*float64(i%3)})
		}
		history = append(history, h)
	}
	panels := trendCharts(res, history, newRunSeries(res.Runs))
	if len(panels) == 0 {
		t.Fatal("no trend chart")
	}
	chart := panels[0].(figures.LineChart)
	var marked []float64
	for _, tick := range chart.XTicks {
		if strings.Contains(tick.Label, "config bbb (changed)") {
			marked = append(marked, tick.X)
		}
	}
	if !slices.Equal(marked, []float64{13}) {
		t.Errorf("ticks %+v: want reproduction 13, where the config changed, labelled with it", chart.XTicks)
	}
	if chart.MinYSpan != figures.AccuracySpan || chart.YBounds != [2]float64{0, 100} {
		t.Errorf("the kNN trend's axis spans at least %v within %v, want %v within 0–100", chart.MinYSpan, chart.YBounds, figures.AccuracySpan)
	}
	res.Previous = &ReproductionInfo{ConfigFingerprint: "aaa"}
	if report := markdown(res, nil); !strings.Contains(report, "| previous (config aaa, another) |") {
		t.Errorf("the changes table does not say the previous reproduction had another config:\n%s", report)
	}
}

// The kNN monitor's curve on a sample reads below the full split: its chart draws no
// baseline or paper figure measured on the full split beside it, but ends each curve with
// the run's final kNN on the full split, and its caption says which is which. A monitor of
// the full splits keeps the reference lines.
func TestKNNChartOfASampledMonitor(t *testing.T) {
	res := sweepResults()
	summarise(res)
	full, ok := knnChart(res, newCellSeries(res.Runs))
	if !ok || len(full.References) == 0 {
		t.Fatalf("the chart of a full-split monitor has no reference lines: %+v", full.References)
	}
	// Results of a version whose log did not say so: the evaluation's splits are larger
	// than the default sample.
	for i := range res.Runs {
		res.Runs[i].KNN.NTrain, res.Runs[i].KNN.NTest = 60000, 10000
	}
	if bank, queries := monitorSample(res); bank != trainstep.DefaultKNNBank || queries != trainstep.DefaultKNNQueries {
		t.Errorf("the monitor's sample of results without it in the log: %d and %d, want the default %d and %d", bank, queries, trainstep.DefaultKNNBank, trainstep.DefaultKNNQueries)
	}
	for i := range res.Runs {
		res.Runs[i].Curves.KNNBank, res.Runs[i].Curves.KNNQueries = 6144, 2048
	}
	chart, ok := knnChart(res, newCellSeries(res.Runs))
	if !ok || len(chart.References) != 0 {
		t.Fatalf("the chart of a sampled monitor draws the full split's references %+v", chart.References)
	}
	finals := 0
	for _, s := range chart.Series {
		if strings.HasSuffix(s.Name, ", full split") {
			finals++
			if len(s.X) != 1 || s.X[0] != 3 {
				t.Errorf("%s at %v, want one point at the last epoch, 3", s.Name, s.X)
			}
		}
	}
	if finals != len(res.Runs) {
		t.Errorf("%d curves end with the full split's figure, want %d", finals, len(res.Runs))
	}
	made, err := writePlots(context.Background(), t.TempDir(), res, nil)
	if err != nil {
		t.Fatal(err)
	}
	if i := slices.IndexFunc(made, func(f figure) bool { return strings.HasSuffix(f.Path, KNNPlotName) }); i < 0 ||
		!strings.Contains(made[i].Caption, "on a sample of 6144 bank and 2048 query images") {
		t.Errorf("figures %+v: want the kNN chart's caption to name the monitor's sample", made)
	}
}

// The report says how many test images the accuracies are of, and what one image is worth:
// with 40, one image is 2.5 points.
func TestReportGivesTheTestSetSize(t *testing.T) {
	res := sweepResults()
	for i := range res.Runs {
		res.Runs[i].KNN.NTest = 40
	}
	if report := markdown(res, nil); !strings.Contains(report, "tested on test, 40 images: one image is 2.5 points of accuracy)") {
		t.Errorf("the report does not give the test set's size:\n%s", report)
	}
}

// The report says when probes' losses climbed before they converged, and where to look.
func TestReportNotesClimbingProbeLosses(t *testing.T) {
	res := sweepResults()
	res.Evaluate.Set("linear", "epochs", 3)
	for i := range res.Runs {
		res.Runs[i].Linear = &analysis.LinearResult{Top1: 70}
	}
	res.Runs[1].Linear.Note = "the probe's training loss rose from 2.3 (epoch 1) to 1500 (epoch 3) ..."
	if report := markdown(res, nil); !strings.Contains(report, "In 1 of 4 probes the training loss rose to more than 3 times its first epoch's before it fell") {
		t.Errorf("the report does not note the probe's climbing loss:\n%s", report)
	}
}

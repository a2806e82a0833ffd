package reproduce

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"slices"

	"github.com/dcl-beam/dcl-beam/analysis"
	"github.com/dcl-beam/dcl-beam/analysis/figures"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/pipelines"
	"github.com/dcl-beam/dcl-beam/shards/embeddings"
	"github.com/dcl-beam/dcl-beam/trainstep"
)

// Plot files under plots/.
const (
	LossPlotName        = "loss-by-epoch.png"
	KNNPlotName         = "knn-by-epoch.png"
	LinearPlotName      = "linear-by-epoch.png"
	BatchSizePlotName   = "accuracy-by-batch-size.png"
	NPCPlotName         = "npc-mean-cv.png"
	TrendPlotName       = "trend.png"
	TSNEPlotName        = "tsne.png"
	plotWidth, plotRows = 900, 600
)

// maxTSNEPanels bounds the t-SNE figure: one panel per method, the first of each.
const maxTSNEPanels = 4

// figure is one image the report shows: its caption and its path relative to report.md.
type figure struct {
	Caption, Path string
}

// runSeries names the runs, or the cells, in plots (seriesNames) and gives each its colour,
// the same in every figure.
type runSeries struct {
	names map[string]string
	style map[string]int
}

// newRunSeries names every run (the trend of each seed's figures).
func newRunSeries(runs []RunResult) runSeries {
	var configs []RunConfig
	rs := runSeries{style: map[string]int{}}
	for i, r := range runs {
		configs = append(configs, r.Config)
		rs.style[r.Config.Name] = i + 1
	}
	rs.names = seriesNames(configs)
	return rs
}

// newCellSeries names every cell: the figures that show a cell's mean over its seeds.
func newCellSeries(runs []RunResult) runSeries {
	var configs []RunConfig
	rs := runSeries{style: map[string]int{}}
	for i, g := range groupCells(runs) {
		c := g.runs[0].Config
		c.Name = g.name
		c.Set(trainstep.SettingSeed, 0)
		configs = append(configs, c)
		rs.style[g.name] = i + 1
	}
	rs.names = seriesNames(configs)
	return rs
}

// of is the series of y against x of a run or cell called name.
func (rs runSeries) of(name string, x, y, yerr []float64) figures.Series {
	return figures.Series{Name: rs.names[name], X: x, Y: y, YErr: yerr, Style: rs.style[name]}
}

// meanCurve averages a cell's runs' curves point by point (over the runs that have each x),
// with the seeds' standard deviation as yerr where a point has more than one (nil where
// none has).
func meanCurve(g cellGroup, curve func(*RunResult) (x, y []float64)) (x, y, yerr []float64) {
	at := map[float64][]float64{}
	for _, r := range g.runs {
		xs, ys := curve(r)
		for i := range min(len(xs), len(ys)) {
			at[xs[i]] = append(at[xs[i]], ys[i])
		}
	}
	seeded := false
	for _, xv := range slices.Sorted(maps.Keys(at)) {
		s := analysis.SpreadOf(at[xv])
		x, y, yerr = append(x, xv), append(y, s.Mean), append(yerr, s.SD)
		seeded = seeded || s.N > 1
	}
	if !seeded {
		yerr = nil
	}
	return x, y, yerr
}

// writePlots draws the figures the results and the history support into out's plots/ and
// returns every figure the report shows (with the runs' NPC distributions, which the NPC
// stage drew in each run's folder).
func writePlots(ctx context.Context, out string, res *Results, history []Reproduction) ([]figure, error) {
	dir := storage.Join(out, PlotsDir)
	var made []figure
	save := func(name, caption string, cols int, panels ...figures.Panel) error {
		if err := reportStopped(ctx); err != nil {
			return err
		}
		cols = min(cols, len(panels))
		h := plotRows * ((len(panels) + cols - 1) / cols)
		if err := figures.SavePNG(ctx, storage.Join(dir, name), plotWidth*cols, h, cols, panels...); err != nil {
			return fmt.Errorf("plot %s: %w", name, err)
		}
		made = append(made, figure{Caption: caption, Path: PlotsDir + "/" + name})
		return nil
	}
	names := newCellSeries(res.Runs)
	if panels := lossCharts(res, names); len(panels) > 0 {
		if err := save(LossPlotName, "training loss by epoch, one panel per objective", 2, panels...); err != nil {
			return nil, err
		}
	}
	seeds := ""
	if res.seeded() {
		seeds = "; mean over the seeds, bars ± one standard deviation"
	}
	if chart, ok := knnChart(res, names); ok {
		caption := "kNN top-1 during training, with the baselines and the paper's figures"
		if bank, queries := monitorSample(res); bank > 0 {
			caption = fmt.Sprintf("kNN top-1 during training, by the trainer's monitor on a sample of %d bank and %d query images, which reads "+
				"below the full split (fewer neighbours vote); the last point of each line, \"full split\", is the final kNN of the "+
				"evaluation, the protocol of the baselines and the paper's figures, which are in the tables", bank, queries)
		}
		if err := save(KNNPlotName, caption+seeds, 1, chart); err != nil {
			return nil, err
		}
	}
	if chart, ok := linearMonitorChart(res, names); ok {
		bank, queries := monitorSample(res)
		sample := "every image of the evaluation splits"
		if bank > 0 {
			sample = fmt.Sprintf("a sample of %d train and %d test images", bank, queries)
		}
		caption := fmt.Sprintf("linear top-1 during training, by the trainer's monitor: a fast linear probe (standardised features, %d epochs) "+
			"fitted to %s each time; not the evaluation's protocol, whose final figures are in the tables", analysis.MonitorLinearConfig().Epochs, sample)
		if err := save(LinearPlotName, caption+seeds, 1, chart); err != nil {
			return nil, err
		}
	}
	if series := batchSizeSeries(res); len(series) > 0 {
		chart := figures.AccuracyByBatchSizeChart("kNN top-1 against batch size", series)
		chart.References = baselineReferences(res)
		if err := save(BatchSizePlotName, "kNN top-1 against batch size, ours and the paper's, with the baselines"+seeds, 1, chart); err != nil {
			return nil, err
		}
	}
	var npc []analysis.NPCReport
	var npcStyle []int
	for _, r := range res.Runs {
		if r.NPC != nil && len(r.NPC.Stats) > 0 {
			rep := *r.NPC
			rep.Name = names.names[r.cell()] // reports of older versions carry the run's name
			npc = append(npc, rep)
			npcStyle = append(npcStyle, names.style[r.cell()])
		}
	}
	if len(npc) > 0 {
		meanQ, cv := figures.NPCSummaryCharts(npc)
		for i, st := range npcStyle {
			meanQ.Series[i].Style, cv.Series[i].Style = st, st
		}
		if err := save(NPCPlotName, "NPC multiplier q against batch size (the paper's Fig. 1a)", 2, meanQ, cv); err != nil {
			return nil, err
		}
	}
	for _, r := range res.Runs {
		if r.NPC == nil || len(r.NPC.Stats) == 0 {
			continue
		}
		// Drawn by the NPC stage in the run's folder: the report links it where it is.
		rel := storage.Join(npcDir(runDir("", r.Config.Name)), pipelines.NPCDistPlotName)
		ok, err := storage.Exists(ctx, storage.Join(out, rel))
		if err != nil {
			return nil, err
		}
		if ok {
			made = append(made, figure{Caption: "distribution of q per batch size (the paper's Fig. 1b): " + names.names[r.cell()], Path: filepath.ToSlash(rel)})
		}
	}
	if opts, ok, err := tsneOptions(ctx, out, res, names); err != nil {
		return nil, err
	} else if ok {
		opts.Output = storage.Join(dir, TSNEPlotName)
		if _, err := figures.TSNE(ctx, opts); err != nil {
			return nil, fmt.Errorf("plot %s: %w", TSNEPlotName, err)
		}
		made = append(made, figure{Caption: fmt.Sprintf("t-SNE of %d test embeddings of each class (the first %d classes), coloured by class (the paper's Fig. 4c)", opts.PerClass, opts.Classes), Path: PlotsDir + "/" + TSNEPlotName})
	}
	if panels := trendCharts(res, history, newRunSeries(res.Runs)); len(panels) > 0 {
		if err := save(TrendPlotName, "every gated metric and the paper's accuracies by reproduction", 2, panels...); err != nil {
			return nil, err
		}
	}
	return made, nil
}

// lossCharts draw the training loss against epoch with a panel per objective (runLabel):
// the losses of different objectives are different quantities (DCL's can be negative) and
// never share an axis.
func lossCharts(res *Results, names runSeries) []figures.Panel {
	var order []string
	byLabel := map[string][]figures.Series{}
	for _, g := range groupCells(res.Runs) {
		x, y, yerr := meanCurve(g, func(r *RunResult) ([]float64, []float64) { return r.Curves.Epoch, r.Curves.Loss })
		if len(x) == 0 {
			continue
		}
		l := runLabel(g.runs[0].Config)
		if byLabel[l] == nil {
			order = append(order, l)
		}
		byLabel[l] = append(byLabel[l], names.of(g.name, x, y, yerr))
	}
	var panels []figures.Panel
	for _, l := range order {
		series := byLabel[l]
		if len(series) == 1 {
			series[0].Name = "" // the title names it
		}
		panels = append(panels, figures.MetricByEpochChart("Training loss: "+l, "loss", series))
	}
	return panels
}

// knnChart is the kNN monitor's top-1 against epoch, one line per run, with the baselines'
// kNN top-1 and the paper's figure for each run as horizontal reference lines.
func knnChart(res *Results, names runSeries) (figures.LineChart, bool) {
	chart := figures.MetricByEpochChart("kNN top-1 during training", "kNN top-1 (%)", nil)
	chart.MinYSpan, chart.YBounds = figures.AccuracySpan, [2]float64{0, 100}
	groups := groupCells(res.Runs)
	for _, g := range groups {
		x, y, yerr := meanCurve(g, func(r *RunResult) ([]float64, []float64) { return r.Curves.KNNEpoch, r.Curves.KNNTop1 })
		if len(x) > 0 {
			chart.Series = append(chart.Series, names.of(g.name, x, y, yerr))
		}
	}
	if len(chart.Series) == 0 {
		return chart, false
	}
	if bank, _ := monitorSample(res); bank > 0 {
		// The monitor's sample reads below the full split: the baselines and the paper's
		// figures, measured on the full split, would stand above curves that are not below
		// them. Each curve ends with its run's final kNN on the full split instead.
		chart.Title = "kNN top-1 during training (the monitor's sample)"
		for _, g := range groups {
			s, ok := res.cellSpread(g.name, "knn_top1")
			x, _, _ := meanCurve(g, func(r *RunResult) ([]float64, []float64) { return r.Curves.KNNEpoch, r.Curves.KNNTop1 })
			if !ok || len(x) == 0 {
				continue
			}
			final := names.of(g.name, []float64{x[len(x)-1]}, []float64{s.Mean}, nil)
			if s.N > 1 {
				final.YErr = []float64{s.SD}
			}
			final.Name += ", full split"
			chart.Series = append(chart.Series, final)
		}
		return chart, true
	}
	for _, g := range groups {
		r := g.runs[0]
		if r.Paper.KNNTop1 != 0 && len(r.Curves.KNNEpoch) > 0 {
			n := names.names[g.name]
			chart.References = append(chart.References, figures.Reference{Name: n + ", paper", Y: r.Paper.KNNTop1, Of: n})
		}
	}
	chart.References = append(chart.References, baselineReferences(res)...)
	return chart, true
}

// linearMonitorChart is the monitor's linear probe's top-1 against epoch, one line per run
// (evaluate.knn_monitor.linear); false where no run has one. It draws no reference line:
// the baselines' and the paper's figures are another protocol's.
func linearMonitorChart(res *Results, names runSeries) (figures.LineChart, bool) {
	chart := figures.MetricByEpochChart("linear top-1 during training (the monitor's probe)", "linear top-1 (%)", nil)
	chart.MinYSpan, chart.YBounds = figures.AccuracySpan, [2]float64{0, 100}
	for _, g := range groupCells(res.Runs) {
		x, y, yerr := meanCurve(g, func(r *RunResult) ([]float64, []float64) { return r.Curves.KNNEpoch, r.Curves.LinearTop1 })
		if len(x) > 0 {
			chart.Series = append(chart.Series, names.of(g.name, x, y, yerr))
		}
	}
	return chart, len(chart.Series) > 0
}

// monitorSample is the size of the kNN monitor's sample, bank and queries, where the runs'
// monitor drew one (0, 0: it read the full splits, or did not run). The log says so; results
// of versions whose log did not are read from the config's monitor and the evaluation's
// split sizes (a split smaller than the sample is read whole).
func monitorSample(res *Results) (bank, queries int) {
	for _, r := range res.Runs {
		if r.Curves.KNNBank > 0 {
			return r.Curves.KNNBank, r.Curves.KNNQueries
		}
	}
	m := res.Evaluate.KNNMonitor
	if m != nil && m.Full {
		return 0, 0
	}
	bank, queries = trainstep.DefaultKNNBank, trainstep.DefaultKNNQueries
	if m != nil {
		bank, queries = cmp.Or(m.Bank, bank), cmp.Or(m.Queries, queries)
	}
	for _, r := range res.Runs {
		if len(r.Curves.KNNEpoch) > 0 && r.KNN != nil && r.KNN.NTrain > 0 && r.KNN.NTest > 0 {
			if bank >= r.KNN.NTrain && queries >= r.KNN.NTest {
				return 0, 0 // the whole splits
			}
			return min(bank, r.KNN.NTrain), min(queries, r.KNN.NTest)
		}
	}
	return 0, 0
}

// baselineReferences are the baselines' kNN top-1, as reference lines.
func baselineReferences(res *Results) []figures.Reference {
	var refs []figures.Reference
	for _, b := range res.Baselines {
		if b.KNN != nil {
			refs = append(refs, figures.Reference{Name: b.Name + " baseline", Y: b.KNN.Top1})
		}
	}
	return refs
}

// tsneOptions lay out the test embeddings of the first run of each method (runLabel), up to
// maxTSNEPanels, side by side: the paper's Fig. 4c compares SimCLR's and DCL's. Its first 10
// classes, as the paper's CIFAR-10: 1,000 points a panel, seconds, for any dataset. ok is false
// when the config has no kNN or linear evaluation (no test embeddings) or none is there.
func tsneOptions(ctx context.Context, out string, res *Results, names runSeries) (o figures.TSNEOptions, ok bool, err error) {
	if !res.Evaluate.Has(pipelines.EvalKNN) && !res.Evaluate.Has(pipelines.EvalLinear) {
		return o, false, nil
	}
	seen := map[string]bool{}
	for _, r := range res.Runs {
		l := runLabel(r.Config)
		if seen[l] || len(o.Embeddings) == maxTSNEPanels {
			continue
		}
		p := embeddingsDir(runDir(out, r.Config.Name), "test")
		there, err := storage.Exists(ctx, storage.Join(p, embeddings.ManifestName))
		if err != nil {
			return o, false, err
		}
		if !there {
			continue
		}
		seen[l] = true
		o.Embeddings, o.Labels = append(o.Embeddings, p), append(o.Labels, names.names[r.cell()])
	}
	if len(o.Embeddings) == 0 {
		return o, false, nil
	}
	o.PerClass, o.Classes, o.Config = figures.DefaultTSNEPerClass, 10, analysis.DefaultTSNEConfig()
	o.Config.Seed = res.Preprocess.Seed
	o.Width, o.Height = plotWidth*2/3, plotRows*5/6
	return o, true, nil
}

// maxTrendTicks bounds the labelled reproductions on a trend plot's axis, so that the
// labels of a year of nightly runs do not overlap.
const maxTrendTicks = 8

// trendCharts draw the paper's accuracies and every gated metric against the reproductions
// of the history (by date and code version), one line per run.
func trendCharts(res *Results, history []Reproduction, names runSeries) []figures.Panel {
	if len(history) == 0 {
		return nil
	}
	step := (len(history) + maxTrendTicks - 1) / maxTrendTicks
	var ticks []figures.XTick
	for i, h := range history {
		// Every reproduction whose config differs from the one before is labelled, with its
		// config: figures of other settings are no trend.
		changed := i > 0 && h.ConfigFingerprint != history[i-1].ConfigFingerprint
		if i%step == 0 || i == len(history)-1 || changed {
			label := h.Time.UTC().Format("2006-01-02 15:04") + "\n" + h.CodeVersion
			if changed {
				label += "\nconfig " + h.ConfigFingerprint + " (changed)"
			}
			ticks = append(ticks, figures.XTick{X: float64(i), Label: label})
		}
	}
	var panels []figures.Panel
	for _, m := range metrics() {
		if _, gated := res.gated(m.Name); !gated && !slices.Contains(trendMetrics, m.Name) {
			continue
		}
		chart := figures.LineChart{Title: m.Description + " by reproduction", XLabel: "reproduction (UTC date, dcl version)",
			YLabel: m.Name, XTicks: ticks}
		if m.Accuracy {
			chart.MinYSpan, chart.YBounds = figures.AccuracySpan, [2]float64{0, 100}
		}
		for _, r := range res.Runs {
			s := names.of(r.Config.Name, nil, nil, nil)
			for i := range history {
				if v, ok := history[i].Value(r.Config.Name, m.Name); ok {
					s.X, s.Y = append(s.X, float64(i)), append(s.Y, v)
				}
			}
			if len(s.X) > 0 {
				chart.Series = append(chart.Series, s)
			}
		}
		if len(chart.Series) > 0 {
			panels = append(panels, chart)
		}
	}
	return panels
}

// gated returns the gate checks of a metric, and whether a gate names it.
func (res *Results) gated(metric string) ([]GateCheck, bool) {
	var out []GateCheck
	for _, g := range res.Gates {
		if g.Metric == metric {
			out = append(out, g)
		}
	}
	return out, len(out) > 0
}

// batchSizeSeries is kNN top-1 against batch size per loss (ours: each cell's mean, with
// its seeds' standard deviation as error bars where it has several; and the paper's where it
// has figures), when the runs cover at least two batch sizes.
func batchSizeSeries(res *Results) []figures.Series {
	byLoss := map[string]*figures.Series{}
	paper := map[string]*figures.Series{}
	var order []string
	batches := map[int]bool{}
	seeded := false
	for _, g := range groupCells(res.Runs) {
		s, ok := res.cellSpread(g.name, "knn_top1")
		if !ok {
			continue
		}
		c := g.runs[0].Config
		l := c.Loss()
		if byLoss[l] == nil {
			byLoss[l] = &figures.Series{Name: lossName(l) + ", ours"}
			paper[l] = &figures.Series{Name: lossName(l) + ", paper"}
			order = append(order, l)
		}
		byLoss[l].X = append(byLoss[l].X, float64(c.BatchSize()))
		byLoss[l].Y = append(byLoss[l].Y, s.Mean)
		byLoss[l].YErr = append(byLoss[l].YErr, s.SD)
		seeded = seeded || s.N > 1
		if p := g.runs[0].Paper.KNNTop1; p != 0 {
			paper[l].X = append(paper[l].X, float64(c.BatchSize()))
			paper[l].Y = append(paper[l].Y, p)
		}
		batches[c.BatchSize()] = true
	}
	if len(batches) < 2 {
		return nil
	}
	var out []figures.Series
	for _, l := range order {
		if !seeded {
			byLoss[l].YErr = nil
		}
		out = append(out, *byLoss[l])
		if len(paper[l].X) > 0 {
			out = append(out, *paper[l])
		}
	}
	return out
}

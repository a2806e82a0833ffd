package reproduce

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/dcl-beam/dcl-beam/analysis"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/trainstep"
)

// Plot files under plots/.
const (
	LossPlotName        = "loss-by-epoch.png"
	KNNPlotName         = "knn-by-epoch.png"
	BatchSizePlotName   = "accuracy-by-batch-size.png"
	NPCPlotName         = "npc-mean-cv.png"
	TrendPlotName       = "trend.png"
	plotWidth, plotRows = 900, 600
)

// lossName is a loss as the paper's tables name it (its registry entry's display name).
func lossName(l string) string {
	if spec, ok := trainstep.LookupLoss(trainstep.LossKind(l)); ok {
		return spec.Display
	}
	return l
}

// writeReport writes the plots, results.json and report.md (the last two last of all).
// history is every reproduction of the run directory, this one last.
func writeReport(ctx context.Context, out string, res *Results, history []Reproduction) error {
	plots, err := writePlots(ctx, storage.Join(out, PlotsDir), res, history)
	if err != nil {
		return err
	}
	if err := storage.SaveJSON(ctx, storage.Join(out, ResultsName), res); err != nil {
		return err
	}
	return storage.WriteFile(ctx, storage.Join(out, ReportName), []byte(markdown(res, plots)))
}

// writePlots draws the figures the results and the history support and returns their names.
func writePlots(ctx context.Context, dir string, res *Results, history []Reproduction) ([]string, error) {
	var written []string
	save := func(name string, cols int, panels ...analysis.Panel) error {
		h := plotRows
		if len(panels) > cols {
			h *= (len(panels) + cols - 1) / cols
		}
		if err := analysis.SavePNG(ctx, storage.Join(dir, name), plotWidth*cols, h, cols, panels...); err != nil {
			return fmt.Errorf("plot %s: %w", name, err)
		}
		written = append(written, name)
		return nil
	}
	var loss, knn []analysis.Series
	for _, r := range res.Runs {
		if len(r.Curves.Epoch) > 0 {
			loss = append(loss, analysis.Series{Name: r.Config.Name, X: r.Curves.Epoch, Y: r.Curves.Loss})
		}
		if len(r.Curves.KNNEpoch) > 0 {
			knn = append(knn, analysis.Series{Name: r.Config.Name, X: r.Curves.KNNEpoch, Y: r.Curves.KNNTop1})
		}
	}
	if len(loss) > 0 {
		if err := save(LossPlotName, 1, analysis.MetricByEpochChart("Training loss", "loss", loss)); err != nil {
			return nil, err
		}
	}
	if len(knn) > 0 {
		chart := analysis.MetricByEpochChart("kNN top-1 during training", "kNN top-1 (%)", knn)
		chart.Legend = analysis.BottomRight // accuracy rises: the lower right is free
		if err := save(KNNPlotName, 1, chart); err != nil {
			return nil, err
		}
	}
	if series := batchSizeSeries(res); len(series) > 0 {
		if err := save(BatchSizePlotName, 1, analysis.AccuracyByBatchSizeChart("kNN top-1 against batch size", series)); err != nil {
			return nil, err
		}
	}
	var npc []analysis.NPCReport
	for _, r := range res.Runs {
		if r.NPC != nil && len(r.NPC.Stats) > 0 {
			npc = append(npc, *r.NPC)
		}
	}
	if len(npc) > 0 {
		meanQ, cv := analysis.NPCSummaryCharts(npc)
		if err := save(NPCPlotName, 2, meanQ, cv); err != nil {
			return nil, err
		}
	}
	if panels := trendCharts(res, history); len(panels) > 0 {
		if err := save(TrendPlotName, 2, panels...); err != nil {
			return nil, err
		}
	}
	return written, nil
}

// maxTrendTicks bounds the labelled reproductions on a trend plot's axis, so that the
// labels of a year of nightly runs do not overlap.
const maxTrendTicks = 8

// trendCharts draw the paper's accuracies and every gated metric against the reproductions
// of the history (by date and code version), one line per run.
func trendCharts(res *Results, history []Reproduction) []analysis.Panel {
	if len(history) == 0 {
		return nil
	}
	step := (len(history) + maxTrendTicks - 1) / maxTrendTicks
	var ticks []analysis.XTick
	for i, h := range history {
		if i%step == 0 || i == len(history)-1 {
			ticks = append(ticks, analysis.XTick{X: float64(i), Label: h.Time.UTC().Format("2006-01-02 15:04") + "\n" + h.CodeVersion})
		}
	}
	var panels []analysis.Panel
	for _, m := range metrics {
		if _, gated := res.gated(m.Name); !gated && !slices.Contains(trendMetrics, m.Name) {
			continue
		}
		chart := analysis.LineChart{Title: m.Description + " by reproduction", XLabel: "reproduction (UTC date, dcl version)",
			YLabel: m.Name, XTicks: ticks}
		if m.HigherIsBetter {
			chart.Legend = analysis.BottomRight
		}
		for _, r := range res.Runs {
			s := analysis.Series{Name: r.Config.Name}
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

// batchSizeSeries is kNN top-1 against batch size per loss (ours, and the paper's where it
// has figures), when the runs cover at least two batch sizes.
func batchSizeSeries(res *Results) []analysis.Series {
	byLoss := map[string]*analysis.Series{}
	paper := map[string]*analysis.Series{}
	var order []string
	batches := map[int]bool{}
	for _, r := range res.Runs {
		if r.KNN == nil {
			continue
		}
		l := r.Config.Loss
		if byLoss[l] == nil {
			byLoss[l] = &analysis.Series{Name: lossName(l) + ", ours"}
			paper[l] = &analysis.Series{Name: lossName(l) + ", paper"}
			order = append(order, l)
		}
		byLoss[l].X = append(byLoss[l].X, float64(r.Config.BatchSize))
		byLoss[l].Y = append(byLoss[l].Y, r.KNN.Top1)
		if r.Paper.KNNTop1 != 0 {
			paper[l].X = append(paper[l].X, float64(r.Config.BatchSize))
			paper[l].Y = append(paper[l].Y, r.Paper.KNNTop1)
		}
		batches[r.Config.BatchSize] = true
	}
	if len(batches) < 2 {
		return nil
	}
	var out []analysis.Series
	for _, l := range order {
		out = append(out, *byLoss[l])
		if len(paper[l].X) > 0 {
			out = append(out, *paper[l])
		}
	}
	return out
}

// markdown renders report.md: the runs against the paper, the baselines, the NPC statistics,
// the plots and what each stage did.
func markdown(res *Results, plots []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n", res.Experiment)
	if res.Description != "" {
		fmt.Fprintf(&b, "%s\n\n", res.Description)
	}
	if res.Paper != "" {
		fmt.Fprintf(&b, "Reproduces: %s of Yeh et al., *Decoupled Contrastive Learning* (ECCV 2022).\n\n", res.Paper)
	}
	d := res.Dataset
	fmt.Fprintf(&b, "Dataset: %s (pretraining split %s", d.Name, orDefault(d.PretrainSplit, "train"))
	if d.Limit > 0 {
		fmt.Fprintf(&b, ", first %d images", d.Limit)
	}
	fmt.Fprintf(&b, "; kNN bank and linear probe on %s", orDefault(d.TrainSplit, "train"))
	if d.EvalLimit > 0 {
		fmt.Fprintf(&b, ", first %d images of each evaluation split", d.EvalLimit)
	}
	fmt.Fprintf(&b, "; tested on %s). Augmentation %s, %d augmented pass(es), seed %d.\n\n",
		orDefault(d.TestSplit, "test"), res.Preprocess.Augment, res.Preprocess.Passes, res.Preprocess.Seed)
	if k := res.Evaluate.KNN; k != nil {
		fmt.Fprintf(&b, "kNN: k = %d, T = %g, cosine similarity on %s features. ", k.K, k.Temperature, orDefault(res.Evaluate.Feature, "backbone"))
	}
	if res.Evaluate.Linear != nil {
		b.WriteString("Linear probe: frozen features, SGD (OpenSelfSup protocol). ")
	}
	b.WriteString("Accuracies are top-1 in percent; the paper's figure follows ours where it has one.\n\n")

	b.WriteString("## Runs\n\n")
	b.WriteString(runsTable(res).Markdown())
	b.WriteString("\n")
	if t, ok := sweepTable(res); ok {
		b.WriteString("## Against the paper, by batch size (kNN top-1: ours / paper)\n\n")
		b.WriteString(t.Markdown())
		b.WriteString("\n")
	}
	if len(res.Baselines) > 0 {
		b.WriteString("## Baselines\n\n")
		t := analysis.Table{Header: []string{"baseline", "kNN top-1", "kNN top-5", "linear top-1", "linear top-5"}, RightAlign: []bool{false, true, true, true, true}}
		for _, bl := range res.Baselines {
			t.Rows = append(t.Rows, []string{bl.Name + ": " + bl.Description, knnTop(bl.KNN, 1), knnTop(bl.KNN, 5), linTop(bl.Linear, 1), linTop(bl.Linear, 5)})
		}
		b.WriteString(t.Markdown())
		b.WriteString("\n")
	}
	var npc []analysis.NPCReport
	for _, r := range res.Runs {
		if r.NPC != nil && len(r.NPC.Stats) > 0 {
			npc = append(npc, *r.NPC)
		}
	}
	if len(npc) > 0 {
		b.WriteString("## NPC multiplier q (the paper's Fig. 1), on each trained encoder's projections\n\n")
		b.WriteString("q = 1 − exp(s_ii/τ)/(exp(s_ii/τ) + U_ik) per anchor; InfoNCE's gradient is scaled by it, DCL's is not. ")
		b.WriteString("C_v is its coefficient of variation σ/μ.\n\n")
		b.WriteString(analysis.NPCTable(npc).Markdown())
		b.WriteString("\n")
	}
	changesSection(&b, res)
	if len(plots) > 0 {
		b.WriteString("## Plots\n\n")
		for _, p := range plots {
			fmt.Fprintf(&b, "![%s](%s/%s)\n\n", strings.TrimSuffix(p, ".png"), PlotsDir, p)
		}
	}
	b.WriteString("## Stages\n\n")
	for _, s := range res.Stages {
		if s.Skipped {
			fmt.Fprintf(&b, "- %s: skipped (%s)\n", s.Name, s.Reason)
		} else {
			fmt.Fprintf(&b, "- %s: %s (%s)\n", s.Name, s.Wall, s.Reason)
		}
	}
	fmt.Fprintf(&b, "\nWall time of this call: %s.", res.Wall)
	if res.CodeVersion != "" {
		fmt.Fprintf(&b, " dcl %s.", res.CodeVersion)
	}
	b.WriteString("\n")
	return b.String()
}

// changesSection is the report's comparison with the previous reproduction and the paper,
// with the gates' verdicts.
func changesSection(b *strings.Builder, res *Results) {
	b.WriteString("## Changes since the last reproduction\n\n")
	if p := res.Previous; p != nil {
		fmt.Fprintf(b, "Previous reproduction: %s, dcl %s, config %s", p.Time.UTC().Format("2006-01-02 15:04:05 UTC"), p.CodeVersion, p.ConfigFingerprint)
		if p.ConfigFingerprint != res.ConfigFingerprint {
			fmt.Fprintf(b, " (the config changed: now %s)", res.ConfigFingerprint)
		}
		if p.CodeVersion != res.CodeVersion {
			fmt.Fprintf(b, " (the code changed: now dcl %s)", res.CodeVersion)
		}
		b.WriteString(". ")
	} else {
		b.WriteString("This is the first reproduction in this run directory's history. ")
	}
	fmt.Fprintf(b, "This one is %s/%s (every reproduction is a file there; read them together with DuckDB's `read_parquet('%s/*.parquet')`).\n\n", HistoryDir, res.HistoryFile, HistoryDir)
	if len(res.Gates) > 0 {
		failed := res.FailedGates()
		fmt.Fprintf(b, "Gates: %d checked, %d failed.\n\n", len(res.Gates), len(failed))
		for _, g := range failed {
			fmt.Fprintf(b, "- **%s**\n", g)
		}
		if len(failed) > 0 {
			b.WriteString("\n")
		}
	}
	t := analysis.Table{Header: []string{"run", "metric", "previous", "now", "change", "paper", "gates"},
		RightAlign: []bool{false, false, true, true, true, true, false}}
	for _, c := range res.Changes {
		prev, change := "—", "—"
		if c.Previous != nil {
			prev = num(*c.Previous)
			d := c.Value - *c.Previous
			change = num(d)
			if d > 0 {
				change = "+" + change
			}
		}
		paper := "—"
		if c.Paper != nil {
			paper = num(*c.Paper)
		}
		var verdicts []string
		for _, g := range res.Gates {
			if g.Run == c.Run && g.Metric == c.Metric {
				v := "ok"
				if g.Failed {
					v = "FAILED"
				}
				verdicts = append(verdicts, fmt.Sprintf("vs %s: %s (drop %s, allowed %s)", g.Against, v, num(g.Drop), num(g.MaxDrop)))
			}
		}
		t.Rows = append(t.Rows, []string{c.Run, c.Metric, prev, num(c.Value), change, paper, orDefault(strings.Join(verdicts, "; "), "—")})
	}
	b.WriteString(t.Markdown())
	b.WriteString("\n")
}

func runsTable(res *Results) analysis.Table {
	t := analysis.Table{
		Header:     []string{"run", "loss", "model", "batch", "τ", "epochs", "kNN top-1", "paper", "linear top-1", "paper", "final loss", "mean q"},
		RightAlign: []bool{false, false, false, true, true, true, true, true, true, true, true, true},
	}
	for _, r := range res.Runs {
		c := r.Config
		row := []string{c.Name, runLabel(c), c.Model, strconv.Itoa(c.BatchSize), strconv.FormatFloat(c.Temperature, 'g', -1, 64),
			strconv.Itoa(c.Epochs), knnTop(r.KNN, 1), paperFig(r.Paper.KNNTop1), linTop(r.Linear, 1), paperFig(r.Paper.LinearTop1)}
		if r.Train != nil {
			row = append(row, fmt.Sprintf("%.3f", r.Train.Loss), fmt.Sprintf("%.3f", r.Train.MeanQ))
		} else {
			row = append(row, "—", "—")
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

// sweepTable lays out a batch-size sweep as the paper's Table 1: a row per loss, a column per
// batch size.
func sweepTable(res *Results) (analysis.Table, bool) {
	var batches []int
	var losses []string
	cell := map[string]map[int]string{}
	for _, r := range res.Runs {
		if r.KNN == nil {
			continue
		}
		c := r.Config
		if !slices.Contains(batches, c.BatchSize) {
			batches = append(batches, c.BatchSize)
		}
		if cell[c.Loss] == nil {
			cell[c.Loss] = map[int]string{}
			losses = append(losses, c.Loss)
		}
		cell[c.Loss][c.BatchSize] = knnTop(r.KNN, 1) + " / " + paperFig(r.Paper.KNNTop1)
	}
	if len(batches) < 2 {
		return analysis.Table{}, false
	}
	slices.Sort(batches)
	t := analysis.Table{Header: []string{"batch size"}, RightAlign: []bool{false}}
	for _, bs := range batches {
		t.Header = append(t.Header, strconv.Itoa(bs))
		t.RightAlign = append(t.RightAlign, true)
	}
	for _, l := range losses {
		row := []string{lossName(l)}
		for _, bs := range batches {
			row = append(row, orDefault(cell[l][bs], "—"))
		}
		t.Rows = append(t.Rows, row)
	}
	return t, true
}

func knnTop(r *analysis.KNNResult, k int) string {
	if r == nil {
		return "—"
	}
	if k == 5 {
		return fmt.Sprintf("%.1f", r.Top5)
	}
	return fmt.Sprintf("%.1f", r.Top1)
}

func linTop(r *analysis.LinearResult, k int) string {
	if r == nil {
		return "—"
	}
	if k == 5 {
		return fmt.Sprintf("%.1f", r.Top5)
	}
	return fmt.Sprintf("%.1f", r.Top1)
}

func paperFig(v float64) string {
	if v == 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f", v)
}

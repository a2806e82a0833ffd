package reproduce

import (
	"cmp"
	"context"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/dcl-beam/dcl-beam/analysis"
	"github.com/dcl-beam/dcl-beam/analysis/figures"
	"github.com/dcl-beam/dcl-beam/internal/storage"
)

// DocsFigures are the figures a section of the docs shows, drawn from results.json (the t-SNE,
// which needs the embeddings, is copied from the run directory's plots).
var DocsFigures = []string{KNNPlotName, BatchSizePlotName, NPCPlotName, TSNEPlotName}

// DocsSection renders a section of the docs (make docs) of a reproduction's results: the
// machine and wall time, each cell's figures over its seeds beside the baselines, every
// comparison with its verdict and the rule behind it, the kNN monitor's figures by epoch, the
// NPC statistics of the first InfoNCE encoder, and the figures that exist (have lists them).
// keptDir is where results.json and the figures are kept, relative to the repository's root,
// and linkDir the same folder relative to the document that shows them.
func DocsSection(res *Results, command, keptDir, linkDir string, have []string) string {
	summarise(res)
	var b strings.Builder
	fmt.Fprintf(&b, "Results of `%s`", command)
	if res.Machine != "" {
		fmt.Fprintf(&b, " on %s", res.Machine)
	}
	fmt.Fprintf(&b, ": %s for the whole reproduction", res.Wall)
	if res.CodeVersion != "" {
		fmt.Fprintf(&b, ", dcl %s", res.CodeVersion)
	}
	fmt.Fprintf(&b, " (from `%s`; `make docs` rewrites this section and the figures).\n\n", path.Join(keptDir, ResultsName))

	t := analysis.Table{Header: []string{"encoder", "seeds", "kNN top-1", "kNN top-5", "linear top-1", "final loss", "mean q (training)"},
		RightAlign: []bool{false, false, true, true, true, true, true}}
	names := newCellSeries(res.Runs)
	for _, g := range groupCells(res.Runs) {
		c := g.runs[0].Config
		var seeds []string
		for _, r := range g.runs {
			seeds = append(seeds, strconv.FormatUint(r.Config.Seed(), 10))
		}
		var q []float64
		for _, r := range g.runs {
			if r.Train != nil {
				q = append(q, r.Train.MeanQ)
			}
		}
		epochs := fmt.Sprintf("%d epochs", c.Epochs())
		if c.Epochs() == 1 {
			epochs = "1 epoch"
		}
		t.Rows = append(t.Rows, []string{fmt.Sprintf("%s, batch %d, %s", runLabel(c), c.BatchSize(), epochs), strings.Join(seeds, ", "),
			res.cellText(g.name, "knn_top1", 1), res.cellText(g.name, "knn_top5", 1), res.cellText(g.name, "linear_top1", 1),
			res.cellText(g.name, "train_loss", 3), spreadFixed(analysis.SpreadOf(q), 3)})
	}
	for _, bl := range res.Baselines {
		name := map[string]string{RawPixels: "raw pixels (baseline)", RandomInit: "random initial weights (baseline)"}[bl.Name]
		t.Rows = append(t.Rows, []string{cmp.Or(name, bl.Name+" (baseline)"), "—", knnTop(bl.KNN, 1), knnTop(bl.KNN, 5), linTop(bl.Linear, 1), "—", "—"})
	}
	b.WriteString(t.Markdown())
	if res.seeded() {
		b.WriteString("\nA figure with seeds is the mean ± the sample standard deviation over them (training seeds: initial weights and batch order, on the same augmented views).\n")
	}
	if len(res.Comparisons) > 0 {
		b.WriteString("\n")
		for _, c := range res.Comparisons {
			a, _ := res.cellSpread(c.Baseline, c.Metric)
			s, _ := res.cellSpread(c.Cell, c.Metric)
			m, _ := lookupMetric(c.Metric)
			fmt.Fprintf(&b, "- %s against %s, %s: %s against %s, difference %s.\n", names.names[c.Cell], names.names[c.Baseline],
				m.Description, spreadText(s), spreadText(a), c.Difference)
		}
		b.WriteString("\n" + analysis.SeedRule + "\n")
	}
	if t, ok := knnByEpochTable(res, names); ok {
		if bank, queries := monitorSample(res); bank > 0 {
			fmt.Fprintf(&b, "\nkNN top-1 during training (the paper's Fig. 3 view), by the trainer's monitor on a sample of %d bank and %d query "+
				"images: it reads below the full split's kNN of the table above (fewer neighbours vote), so compare its epochs and runs with "+
				"each other, not with that table:\n\n", bank, queries)
		} else {
			b.WriteString("\nkNN top-1 during training (the trainer's monitor; the paper's Fig. 3 view):\n\n")
		}
		b.WriteString(t.Markdown())
	}
	for _, r := range res.Runs {
		if r.NPC == nil || len(r.NPC.Stats) == 0 || r.Config.Loss() != "infonce" {
			continue
		}
		fmt.Fprintf(&b, "\nNPC multiplier q on the projections of the %s encoder (seed %d; the paper's Fig. 1, the report has every encoder's):\n\n",
			names.names[r.cell()], r.Config.Seed())
		nt := analysis.Table{Header: []string{"batch size"}, RightAlign: []bool{false}}
		mean, cv := []string{"mean q"}, []string{"C_v = σ/μ"}
		for _, s := range r.NPC.Stats {
			nt.Header, nt.RightAlign = append(nt.Header, strconv.Itoa(s.BatchSize)), append(nt.RightAlign, true)
			mean, cv = append(mean, fmt.Sprintf("%.3f", s.Mean)), append(cv, fmt.Sprintf("%.3f", s.CV))
		}
		nt.Rows = [][]string{mean, cv}
		b.WriteString(nt.Markdown())
		break
	}
	captions := map[string]string{
		KNNPlotName:       "kNN top-1 during training",
		BatchSizePlotName: "kNN top-1 against batch size",
		NPCPlotName:       "NPC multiplier q against batch size (the paper's Fig. 1a)",
		TSNEPlotName:      "t-SNE of the test embeddings (the paper's Fig. 4c)",
	}
	for _, f := range DocsFigures {
		if slices.Contains(have, f) {
			fmt.Fprintf(&b, "\n![%s](%s)\n", captions[f], path.Join(linkDir, f))
		}
	}
	return b.String()
}

// cellText is a cell's metric, mean ± sd over its seeds, with prec decimals.
func (res *Results) cellText(cell, metric string, prec int) string {
	s, ok := res.cellSpread(cell, metric)
	if !ok {
		return "—"
	}
	return spreadFixed(s, prec)
}

func spreadFixed(s analysis.Spread, prec int) string {
	switch {
	case s.N == 0:
		return "—"
	case s.N == 1:
		return strconv.FormatFloat(s.Mean, 'f', prec, 64)
	}
	return strconv.FormatFloat(s.Mean, 'f', prec, 64) + " ± " + strconv.FormatFloat(s.SD, 'f', prec, 64)
}

// knnByEpochTable is each cell's kNN monitor reading after each epoch it ran, mean ± sd over
// its seeds.
func knnByEpochTable(res *Results, names runSeries) (analysis.Table, bool) {
	var epochs []float64
	rows := map[string]map[float64]string{}
	groups := groupCells(res.Runs)
	for _, g := range groups {
		x, y, yerr := meanCurve(g, func(r *RunResult) ([]float64, []float64) { return r.Curves.KNNEpoch, r.Curves.KNNTop1 })
		rows[g.name] = map[float64]string{}
		for i := range x {
			if !slices.Contains(epochs, x[i]) {
				epochs = append(epochs, x[i])
			}
			v := fmt.Sprintf("%.1f", y[i])
			if yerr != nil {
				v += fmt.Sprintf(" ± %.1f", yerr[i])
			}
			rows[g.name][x[i]] = v
		}
	}
	if len(epochs) == 0 {
		return analysis.Table{}, false
	}
	slices.Sort(epochs)
	t := analysis.Table{Header: []string{"encoder"}, RightAlign: []bool{false}}
	for _, e := range epochs {
		t.Header, t.RightAlign = append(t.Header, "epoch "+strconv.FormatFloat(e, 'g', -1, 64)), append(t.RightAlign, true)
	}
	for _, g := range groups {
		row := []string{names.names[g.name]}
		for _, e := range epochs {
			row = append(row, cmp.Or(rows[g.name][e], "—"))
		}
		t.Rows = append(t.Rows, row)
	}
	return t, true
}

// WriteDocsFigures draws the docs' figures of res into figDir from the results alone (the kNN
// curves, accuracy by batch size, the NPC figure) and copies the t-SNE from runDir's plots
// where it is there. It returns the figures it wrote, in DocsFigures' order.
func WriteDocsFigures(ctx context.Context, res *Results, runDir, figDir string) ([]string, error) {
	summarise(res)
	var wrote []string
	save := func(name string, cols int, panels ...figures.Panel) error {
		h := plotRows * ((len(panels) + cols - 1) / cols)
		if err := figures.SavePNG(ctx, storage.Join(figDir, name), plotWidth*min(cols, len(panels)), h, cols, panels...); err != nil {
			return err
		}
		wrote = append(wrote, name)
		return nil
	}
	names := newCellSeries(res.Runs)
	if chart, ok := knnChart(res, names); ok {
		if err := save(KNNPlotName, 1, chart); err != nil {
			return nil, err
		}
	}
	if series := batchSizeSeries(res); len(series) > 0 {
		chart := figures.AccuracyByBatchSizeChart("kNN top-1 against batch size", series)
		chart.References = baselineReferences(res)
		if err := save(BatchSizePlotName, 1, chart); err != nil {
			return nil, err
		}
	}
	var npc []analysis.NPCReport
	for _, r := range res.Runs {
		if r.NPC != nil && len(r.NPC.Stats) > 0 {
			rep := *r.NPC
			rep.Name = names.names[r.cell()]
			npc = append(npc, rep)
		}
	}
	if len(npc) > 0 {
		meanQ, cv := figures.NPCSummaryCharts(npc)
		if err := save(NPCPlotName, 2, meanQ, cv); err != nil {
			return nil, err
		}
	}
	if runDir != "" {
		src := storage.Join(runDir, PlotsDir, TSNEPlotName)
		ok, err := storage.Exists(ctx, src)
		if err != nil {
			return nil, err
		}
		if ok {
			data, err := storage.ReadFile(ctx, src)
			if err != nil {
				return nil, err
			}
			if err := storage.WriteFile(ctx, storage.Join(figDir, TSNEPlotName), data); err != nil {
				return nil, err
			}
			wrote = append(wrote, TSNEPlotName)
		}
	}
	return wrote, nil
}

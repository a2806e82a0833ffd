package reproduce

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/dcl-beam/dcl-beam/analysis"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/pipelines"
	"github.com/dcl-beam/dcl-beam/trainstep"
)

// runLabel is how the report names a run's training: the loss as the paper's tables name it,
// after the method where it is not SimCLR, e.g. "MoCo-v2 (DCL)".
func runLabel(run RunConfig) string {
	name := lossName(run.Loss())
	if spec, err := trainstep.LookupMethod(run.Method()); err == nil && spec.Name != trainstep.SimCLRMethod {
		return spec.Display + " (" + name + ")"
	}
	return name
}

// lossName is a loss as the paper's tables name it (its registry entry's display name).
func lossName(l string) string {
	if spec, ok := trainstep.LookupLoss(trainstep.LossKind(l)); ok {
		return spec.Display
	}
	return l
}

// writeReport writes the plots, results.json and report.md (the last two last of all).
// history is every reproduction of the run directory, this one last.
func writeReport(ctx context.Context, log *slog.Logger, out string, res *Results, history []Reproduction) error {
	summarise(res)
	made, err := writePlots(ctx, out, res, history)
	if stop := reportStopped(ctx); err != nil && stop != nil {
		return stop // the plot that was cut short says only that its context ended
	}
	if err != nil {
		return err
	}
	log.Info("plots written; results.json, report.md and the history next", "plots", len(made))
	if err := reportStopped(ctx); err != nil {
		return err
	}
	if err := storage.SaveJSON(ctx, storage.Join(out, ResultsName), res); err != nil {
		return err
	}
	if err := reportStopped(ctx); err != nil {
		return err
	}
	return storage.WriteFile(ctx, storage.Join(out, ReportName), []byte(markdown(res, made)))
}

// seriesNames are the runs' names in plot legends and NPC reports: the method as the report
// names it (runLabel), with the settings that tell apart runs of the same method (batch
// size, τ, model, epochs, queue), or the run's name where none does.
func seriesNames(runs []RunConfig) map[string]string {
	byLabel := map[string][]RunConfig{}
	for _, r := range runs {
		byLabel[runLabel(r)] = append(byLabel[runLabel(r)], r)
	}
	names := map[string]string{}
	for label, group := range byLabel {
		settings := []struct {
			name string
			of   func(RunConfig) string
		}{
			{"batch", func(c RunConfig) string { return strconv.Itoa(c.BatchSize()) }},
			{"τ=", func(c RunConfig) string { return strconv.FormatFloat(c.Temperature(), 'g', -1, 64) }},
			{"", func(c RunConfig) string { return c.Model() }},
			{"epochs", func(c RunConfig) string { return strconv.Itoa(c.Epochs()) }},
			{"queue", func(c RunConfig) string { return strconv.Itoa(c.QueueSize()) }},
			{"seed", func(c RunConfig) string { return strconv.FormatUint(c.Seed(), 10) }},
		}
		parts := make(map[string][]string, len(group))
		for _, set := range settings {
			values := map[string]bool{}
			for _, c := range group {
				values[set.of(c)] = true
			}
			if len(values) < 2 {
				continue
			}
			for _, c := range group {
				v := set.of(c)
				switch {
				case set.name == "":
				case strings.HasSuffix(set.name, "="):
					v = set.name + v
				default:
					v = set.name + " " + v
				}
				parts[c.Name] = append(parts[c.Name], v)
			}
		}
		seen := map[string]int{}
		for _, c := range group {
			names[c.Name] = label
			if len(parts[c.Name]) > 0 {
				names[c.Name] = label + ", " + strings.Join(parts[c.Name], ", ")
			}
			seen[names[c.Name]]++
		}
		for _, c := range group {
			if seen[names[c.Name]] > 1 {
				names[c.Name] += " (" + c.Name + ")"
			}
		}
	}
	return names
}

// markdown renders report.md: the runs against the paper, the baselines, the NPC statistics,
// the plots and what each stage did.
func markdown(res *Results, made []figure) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n", res.Experiment)
	if res.Description != "" {
		fmt.Fprintf(&b, "%s\n\n", res.Description)
	}
	if res.Paper != "" {
		fmt.Fprintf(&b, "Reproduces: %s of Yeh et al., *Decoupled Contrastive Learning* (ECCV 2022).\n\n", res.Paper)
	}
	d := res.Dataset
	fmt.Fprintf(&b, "Dataset: %s (pretraining split %s", d.Name, cmp.Or(d.PretrainSplit, "train"))
	if d.Limit > 0 {
		fmt.Fprintf(&b, ", first %d images", d.Limit)
	}
	fmt.Fprintf(&b, "; kNN bank and linear probe on %s", cmp.Or(d.TrainSplit, "train"))
	if d.EvalLimit > 0 {
		fmt.Fprintf(&b, ", first %d images of each evaluation split", d.EvalLimit)
	}
	views := fmt.Sprintf("%d augmented pass(es)", res.Preprocess.Passes)
	if res.Preprocess.Views == "online" {
		views = "fresh views every epoch, made by the trainer"
	}
	tested := cmp.Or(d.TestSplit, "test")
	if n := testImages(res); n > 0 {
		tested += fmt.Sprintf(", %d images: one image is %s points of accuracy", n, num(100/float64(n)))
	}
	fmt.Fprintf(&b, "; tested on %s). Augmentation %s, %s, seed %d.\n\n",
		tested, res.Preprocess.Augment, views, res.Preprocess.Seed)
	if k, ok := res.Evaluate.Settings(pipelines.EvalKNN); ok {
		kText := fmt.Sprintf("k = %d", k.Int("k"))
		if used := usedK(res); used > 0 && used < k.Int("k") {
			kText += fmt.Sprintf(" (the bank holds %d images: all vote, k = %d)", used, used)
		}
		fmt.Fprintf(&b, "kNN: %s, T = %g, cosine similarity on %s features. ", kText, k.Float("temperature"), cmp.Or(res.Evaluate.Feature, "backbone"))
	}
	if res.Evaluate.Has(pipelines.EvalLinear) {
		b.WriteString("Linear probe: frozen features, SGD (OpenSelfSup protocol). ")
		if n, of := climbedProbes(res); n > 0 {
			fmt.Fprintf(&b, "In %d of %d probes the training loss rose to more than %d times its first epoch's before it fell (results.json's "+
				"linear.note says where): the protocol's large rate overshoots at first on features that are not standardised; the "+
				"accuracies are of the final classifiers. ", n, of, analysis.LinearLossClimb)
		}
	}
	b.WriteString("Accuracies are top-1 in percent; the paper's figure follows ours where it has one.")
	if res.seeded() {
		b.WriteString(" A cell is one setting trained with several training seeds (initial weights and batch order; the same augmented views): " +
			"its figures are the mean ± the sample standard deviation over its n seeds.")
	}
	b.WriteString("\n\n")
	if res.Machine != "" {
		fmt.Fprintf(&b, "Machine: %s.\n\n", res.Machine)
	}
	if len(res.Overrides) > 0 {
		fmt.Fprintf(&b, "Config keys given on the command line: `--set %s`.\n\n", strings.Join(res.Overrides, "` `--set "))
	}
	departuresSection(&b, res)
	if res.seeded() {
		b.WriteString("## Cells (mean ± standard deviation over the seeds)\n\n")
		b.WriteString(cellsTable(res).Markdown())
		b.WriteString("\n")
	}
	if len(res.Comparisons) > 0 {
		comparisonsSection(&b, res)
	}
	b.WriteString("## Runs\n\n")
	b.WriteString(runsTable(res).Markdown())
	b.WriteString("\n")
	if t, ok := sweepTable(res); ok {
		b.WriteString("## Against the paper, by batch size (top-1, kNN and linear: ours / paper)\n\n")
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
	if len(made) > 0 {
		b.WriteString("## Plots\n\n")
		for _, f := range made {
			fmt.Fprintf(&b, "![%s](%s)\n*%s*\n\n", f.Caption, f.Path, f.Caption)
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

// climbedProbes counts the linear probes (of the runs and baselines) whose loss climbed
// before it fell (analysis.LinearResult.Note), of those that ran.
func climbedProbes(res *Results) (n, of int) {
	count := func(e Evaluation) {
		if e.Linear != nil {
			of++
			if e.Linear.Note != "" {
				n++
			}
		}
	}
	for _, r := range res.Runs {
		count(r.Evaluation)
	}
	for _, b := range res.Baselines {
		count(b.Evaluation)
	}
	return n, of
}

// testImages is the number of test images the evaluations classified (0 where none ran).
func testImages(res *Results) int {
	n := 0
	use := func(e Evaluation) {
		if e.KNN != nil {
			n = max(n, e.KNN.NTest)
		}
		if e.Linear != nil {
			n = max(n, e.Linear.NTest)
		}
	}
	for _, r := range res.Runs {
		use(r.Evaluation)
	}
	for _, b := range res.Baselines {
		use(b.Evaluation)
	}
	return n
}

// usedK is the k the kNN evaluations used (the least, where they differ; 0 where none ran).
func usedK(res *Results) int {
	k := 0
	use := func(e Evaluation) {
		if e.KNN != nil && e.KNN.K > 0 && (k == 0 || e.KNN.K < k) {
			k = e.KNN.K
		}
	}
	for _, r := range res.Runs {
		use(r.Evaluation)
	}
	for _, b := range res.Baselines {
		use(b.Evaluation)
	}
	return k
}

// departuresSection lists, setting by setting in RecipeSettings' order, where the
// experiment departs from the paper's recipe or chooses what the paper leaves unstated: the
// config's own words, then the toolkit's choices that apply to it.
func departuresSection(b *strings.Builder, res *Results) {
	if len(res.Departures)+len(res.ToolkitDepartures) == 0 {
		return
	}
	b.WriteString("## Where this experiment departs from the paper's recipe, or chooses what the paper leaves unstated\n\n")
	b.WriteString("Each setting with the config's reason, and the choices of this toolkit's code that apply to it (*toolkit*).\n\n")
	keys := recipeSettingNames()
	for _, k := range slices.Sorted(maps.Keys(res.Departures)) {
		if !slices.Contains(keys, k) { // a setting of an older version's results
			keys = append(keys, k)
		}
	}
	for _, k := range keys {
		if text, ok := res.Departures[k]; ok {
			fmt.Fprintf(b, "- **%s**: %s\n", k, text)
		}
		if text, ok := res.ToolkitDepartures[k]; ok {
			fmt.Fprintf(b, "- **%s** (*toolkit*): %s\n", k, text)
		}
	}
	b.WriteString("\n")
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
	if res.Unchanged {
		fmt.Fprintf(b, "This call ran no stage: its figures are those of the last reproduction, %s/%s, and it added no history entry "+
			"(every reproduction is a file there; read them together with DuckDB's `read_parquet('%s/*.parquet')`).\n\n", HistoryDir, res.HistoryFile, HistoryDir)
	} else {
		fmt.Fprintf(b, "This one is %s/%s (every reproduction is a file there; read them together with DuckDB's `read_parquet('%s/*.parquet')`).\n\n", HistoryDir, res.HistoryFile, HistoryDir)
	}
	if len(res.Gates) > 0 {
		failed := res.FailedGates()
		fmt.Fprintf(b, "Gates: %d checked, %d failed.\n\n", len(res.Gates), len(failed))
		for _, g := range failed {
			fmt.Fprintf(b, "- **%s**\n", g)
		}
		if len(failed) > 0 {
			b.WriteString("\n")
		}
	} else if len(res.GatesNotChecked) > 0 {
		b.WriteString("Gates: **none checked**: no gate had a figure to compare with, so this reproduction passes them without a check.\n\n")
	}
	for _, n := range res.GatesNotChecked {
		fmt.Fprintf(b, "- **Not checked**: %s.\n", n)
	}
	if len(res.GatesNotChecked) > 0 {
		b.WriteString("\n")
	}
	for _, w := range res.GateWarnings {
		fmt.Fprintf(b, "- **Warning**: %s.\n", w)
	}
	if len(res.GateWarnings) > 0 {
		b.WriteString("\n")
	}
	previous := "previous"
	if p := res.Previous; p != nil && p.ConfigFingerprint != res.ConfigFingerprint {
		previous = "previous (config " + p.ConfigFingerprint + ", another)"
	}
	t := analysis.Table{Header: []string{"run", "metric", previous, "now", "change", "paper", "gates"},
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
		t.Rows = append(t.Rows, []string{c.Run, c.Metric, prev, num(c.Value), change, paper, cmp.Or(strings.Join(verdicts, "; "), "—")})
	}
	b.WriteString(t.Markdown())
	b.WriteString("\n")
}

// comparisonsSection is every cell against its InfoNCE cell, with the rule that names a
// difference a gain.
func comparisonsSection(b *strings.Builder, res *Results) {
	b.WriteString("## DCL and the other losses against InfoNCE, cell by cell\n\n")
	b.WriteString(analysis.SeedRule + "\n\n")
	t := analysis.Table{Header: []string{"cell", "against", "metric", "cell's mean", "InfoNCE's mean", "difference", "95% half-width", "verdict"},
		RightAlign: []bool{false, false, false, true, true, true, true, false}}
	for _, c := range res.Comparisons {
		a, _ := res.cellSpread(c.Baseline, c.Metric)
		bs, _ := res.cellSpread(c.Cell, c.Metric)
		half := "—"
		if c.HalfWidth > 0 {
			half = fmt.Sprintf("%.2f (ν = %d)", c.HalfWidth, int(math.Floor(c.DF)))
		}
		t.Rows = append(t.Rows, []string{c.Cell, c.Baseline, c.Metric, spreadText(bs), spreadText(a), fmt.Sprintf("%+.2f", c.Diff), half, string(c.Verdict)})
	}
	b.WriteString(t.Markdown())
	b.WriteString("\n")
}

// spreadText is a cell's figure: "79.0 ± 0.4 (n = 3)", or the one seed's figure.
func spreadText(s analysis.Spread) string {
	switch s.N {
	case 0:
		return "—"
	case 1:
		return fmt.Sprintf("%.1f (n = 1)", s.Mean)
	}
	return fmt.Sprintf("%.1f ± %.1f (n = %d)", s.Mean, s.SD, s.N)
}

// spreadShort is spreadText without n: "79.0 ± 0.4", or "79.0" for one seed.
func spreadShort(s analysis.Spread) string {
	if s.N < 2 {
		return fmt.Sprintf("%.1f", s.Mean)
	}
	return fmt.Sprintf("%.1f ± %.1f", s.Mean, s.SD)
}

// cellsTable is every cell's figures over its seeds.
func cellsTable(res *Results) analysis.Table {
	t := analysis.Table{
		Header:     []string{"cell", "loss", "batch", "seeds", "kNN top-1", "paper", "linear top-1", "paper", "final loss"},
		RightAlign: []bool{false, false, true, false, true, true, true, true, true},
	}
	for _, g := range groupCells(res.Runs) {
		c, p := g.runs[0].Config, g.runs[0].Paper
		var seeds []string
		for _, r := range g.runs {
			seeds = append(seeds, strconv.FormatUint(r.Config.Seed(), 10))
		}
		fig := func(m string) string {
			if s, ok := res.cellSpread(g.name, m); ok {
				return spreadShort(s)
			}
			return "—"
		}
		loss := "—"
		if s, ok := res.cellSpread(g.name, "train_loss"); ok {
			loss = fmt.Sprintf("%.3f", s.Mean)
			if s.N > 1 {
				loss += fmt.Sprintf(" ± %.3f", s.SD)
			}
		}
		t.Rows = append(t.Rows, []string{g.name, runLabel(c), strconv.Itoa(c.BatchSize()), strings.Join(seeds, ", "),
			fig("knn_top1"), paperFig(p.KNNTop1), fig("linear_top1"), paperFig(p.LinearTop1), loss})
	}
	return t
}

func runsTable(res *Results) analysis.Table {
	t := analysis.Table{
		Header:     []string{"run", "loss", "model", "batch", "τ", "epochs", "seed", "kNN top-1", "paper", "linear top-1", "paper", "final loss", "mean q"},
		RightAlign: []bool{false, false, false, true, true, true, true, true, true, true, true, true, true},
	}
	for _, r := range res.Runs {
		c := r.Config
		row := []string{c.Name, runLabel(c), c.Model(), strconv.Itoa(c.BatchSize()), strconv.FormatFloat(c.Temperature(), 'g', -1, 64),
			strconv.Itoa(c.Epochs()), strconv.FormatUint(c.Seed(), 10), knnTop(r.KNN, 1), paperFig(r.Paper.KNNTop1), linTop(r.Linear, 1), paperFig(r.Paper.LinearTop1)}
		if r.Train != nil {
			row = append(row, fmt.Sprintf("%.3f", r.Train.Loss), fmt.Sprintf("%.3f", r.Train.MeanQ))
		} else {
			row = append(row, "—", "—")
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

// sweepTable lays out a batch-size sweep as the paper's Table 1: a row per loss and
// protocol (kNN, linear), a column per batch size; each cell's mean (± its seeds' standard
// deviation) beside the paper's figure.
func sweepTable(res *Results) (analysis.Table, bool) {
	var batches []int
	var rows []string // loss, then protocol, in the order the runs give them
	cell := map[string]map[int]string{}
	add := func(row string, batch int, text string) {
		if cell[row] == nil {
			cell[row] = map[int]string{}
			rows = append(rows, row)
		}
		cell[row][batch] = text
	}
	for _, g := range groupCells(res.Runs) {
		knn, hasKNN := res.cellSpread(g.name, "knn_top1")
		linear, hasLinear := res.cellSpread(g.name, "linear_top1")
		if !hasKNN && !hasLinear {
			continue
		}
		c, paper := g.runs[0].Config, g.runs[0].Paper
		if !slices.Contains(batches, c.BatchSize()) {
			batches = append(batches, c.BatchSize())
		}
		if hasKNN {
			add(lossName(c.Loss())+", kNN", c.BatchSize(), spreadShort(knn)+" / "+paperFig(paper.KNNTop1))
		}
		if hasLinear {
			add(lossName(c.Loss())+", linear", c.BatchSize(), spreadShort(linear)+" / "+paperFig(paper.LinearTop1))
		}
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
	for _, row := range rows {
		line := []string{row}
		for _, bs := range batches {
			line = append(line, cmp.Or(cell[row][bs], "—"))
		}
		t.Rows = append(t.Rows, line)
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

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/analysis"
	"github.com/dcl-beam/dcl-beam/internal/docsections"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/internal/testing/testfiles"
	"github.com/dcl-beam/dcl-beam/reproduce"
	"github.com/dcl-beam/dcl-beam/verify"
)

// Every generated section of every Markdown file in the repository, and every figure drawn
// for them, is what the kept results under docs/ give: no figure in the docs is typed, and
// no section is stale, misplaced or unknown.
func TestDocsAreTheirKeptResults(t *testing.T) {
	if err := run(context.Background(), []string{"--root=../../..", "--demo=", "--check"}); err != nil {
		t.Fatal(err)
	}
}

// Where the demo's output is at hand (`make demo` ran in this checkout, or DCL_DEMO_OUT names
// one), the README's demo section and figures are its fresh results.
func TestDocsAreTheDemoAtHand(t *testing.T) {
	dir := os.Getenv("DCL_DEMO_OUT")
	if dir == "" {
		dir = filepath.Join("..", "..", "..", "demo-out")
	}
	if _, err := os.Stat(filepath.Join(dir, reproduce.ResultsName)); err != nil {
		t.Skipf("no demo results at hand (%v): run make demo, or set DCL_DEMO_OUT", err)
	}
	if err := run(context.Background(), []string{"--root=../../..", "--demo=" + dir, "--check"}); err != nil {
		t.Fatalf("%v\nThe README is not %s's results: make docs rewrites it from them.", err, dir)
	}
}

// writeDocs writes under root every file that holds a generated section, with the markers
// of its sections and nothing else, and README.md with readme's text.
func writeDocs(t *testing.T, root, readme string) {
	t.Helper()
	files := map[string]string{"README.md": readme}
	for _, s := range sections {
		if s.file != "README.md" {
			files[s.file] += "## " + s.name + "\n\n" + docsections.Begin(s.name) + "\n" + docsections.End(s.name) + "\n\n"
		}
	}
	for file, text := range files {
		write(t, filepath.Join(root, file), text)
	}
}

func write(t *testing.T, path, text string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// demoReadme is a README with the demo's section, old text in it.
var demoReadme = "# x\n\n" + docsections.Begin("demo") + "\nold\n" + docsections.End("demo") + "\n"

// seededResults is a demo-like reproduction: InfoNCE and DCL at batch 32 with two seeds each,
// the kNN monitor, a raw-pixel baseline.
func seededResults() *reproduce.Results {
	res := &reproduce.Results{Experiment: "demo-fashion-mnist", Wall: "3m10s", Machine: "a test machine", CodeVersion: "test"}
	for i, cell := range []string{"infonce-b32", "dcl-b32", "infonce-b32", "dcl-b32"} {
		seed := uint64(i/2 + 1)
		loss, _, _ := strings.Cut(cell, "-")
		top1 := 78 + float64(i)*0.7
		r := reproduce.RunResult{
			Config: reproduce.RunConfig{Name: fmt.Sprintf("%s-s%d", cell, seed)},
			Cell:   cell,
			Curves: reproduce.Curves{KNNEpoch: []float64{2, 4}, KNNTop1: []float64{top1 - 2, top1}},
			Evaluation: reproduce.Evaluation{KNN: &analysis.KNNResult{Top1: top1, Top5: 99.5},
				Linear: &analysis.LinearResult{Top1: top1 + 5, Top5: 99.8}},
		}
		for name, v := range map[string]any{"loss": loss, "batch_size": 32, "epochs": 8, "seed": seed} {
			r.Config.Set(name, v)
		}
		res.Runs = append(res.Runs, r)
	}
	res.Baselines = []reproduce.BaselineResult{{Name: reproduce.RawPixels, Evaluation: reproduce.Evaluation{KNN: &analysis.KNNResult{Top1: 78.8, Top5: 99.6}}}}
	return res
}

// make docs writes the section and the figures from a run directory's results, keeps the
// results beside the figures, and the check then passes; a figure edited in the README, or a
// figure file that is not the results', fails it.
func TestGeneratedSectionsAndTheirCheck(t *testing.T) {
	ctx := context.Background()
	root, demo := t.TempDir(), t.TempDir()
	writeDocs(t, root, demoReadme)
	if err := storage.SaveJSON(ctx, filepath.Join(demo, reproduce.ResultsName), seededResults()); err != nil {
		t.Fatal(err)
	}
	if err := run(ctx, []string{"--root=" + root, "--demo=" + demo}); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| SimCLR (InfoNCE), batch 32, 8 epochs | 1, 2", "78.7 ± 1.0", "raw pixels (baseline)",
		"within seed noise", "](docs/demo/knn-by-epoch.png)", "on a test machine: 3m10s"} {
		if !strings.Contains(string(got), want) {
			t.Errorf("the README lacks %q:\n%s", want, got)
		}
	}
	if gpu, _ := os.ReadFile(filepath.Join(root, "docs/gpu.md")); !strings.Contains(string(gpu), "No GPU run of `experiments/fashion-mnist-gpu.yaml`") {
		t.Errorf("without a GPU run, docs/gpu.md's section says:\n%s", gpu)
	}
	for _, f := range []string{"docs/demo/results.json", "docs/demo/knn-by-epoch.png"} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Errorf("make docs did not write %s: %v", f, err)
		}
	}
	for _, demoArg := range []string{"--demo=", "--demo=" + demo} {
		if err := run(ctx, []string{"--root=" + root, demoArg, "--check"}); err != nil {
			t.Errorf("check %s right after make docs: %v", demoArg, err)
		}
	}

	edited := strings.Replace(string(got), "78.7 ± 1.0", "78.9 ± 1.0", 1)
	if err := os.WriteFile(filepath.Join(root, "README.md"), []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(ctx, []string{"--root=" + root, "--check"}); !errors.Is(err, docsections.ErrStale) || !strings.Contains(err.Error(), "78.9") {
		t.Errorf("check of a README with a figure typed over: %v, want it named", err)
	}
	if err := os.WriteFile(filepath.Join(root, "README.md"), got, 0o644); err != nil {
		t.Fatal(err)
	}
	png := filepath.Join(root, "docs/demo/knn-by-epoch.png")
	drawn, err := os.ReadFile(png)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(png, []byte("not the figure"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(ctx, []string{"--root=" + root, "--check"}); err == nil || !strings.Contains(err.Error(), "knn-by-epoch.png is not the figure") {
		t.Errorf("check with a figure that is not the results': %v", err)
	}
	if err := os.WriteFile(png, drawn, 0o644); err != nil {
		t.Fatal(err)
	}

	// Fresh results with the same figures pass, whatever their wall time; fresh results
	// that differ from the README's fail.
	again := seededResults()
	again.Wall, again.CodeVersion = "3m59s", "later"
	if err := storage.SaveJSON(ctx, filepath.Join(demo, reproduce.ResultsName), again); err != nil {
		t.Fatal(err)
	}
	if err := run(ctx, []string{"--root=" + root, "--demo=" + demo, "--check"}); err != nil {
		t.Errorf("check against fresh results with the same figures: %v", err)
	}
	other := seededResults()
	other.Runs[1].KNN.Top1 += 1
	if err := storage.SaveJSON(ctx, filepath.Join(demo, reproduce.ResultsName), other); err != nil {
		t.Fatal(err)
	}
	if err := run(ctx, []string{"--root=" + root, "--demo=" + demo, "--check"}); !errors.Is(err, docsections.ErrStale) {
		t.Errorf("check against fresh results that differ: %v, want %v", err, docsections.ErrStale)
	}
}

// The kill hunt's figures are the sum of the hunts kept in docs/reliability; a count typed
// over fails the check, and so do hunts of different versions of the test kept together.
func TestKillHuntSection(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	writeDocs(t, root, demoReadme)
	if err := run(ctx, []string{"--root=" + root, "--demo="}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "docs/reliability.md")); !strings.Contains(string(got), "No kill hunt is kept yet") {
		t.Errorf("without hunts, the section says:\n%s", got)
	}
	jobs := []string{"dcl preprocess", "dcl reproduce (also in its report phase)"}
	for i, h := range []testfiles.KillHunt{
		{Seed: 14, Rounds: 20, Jobs: jobs, Runs: 100, Killed: 95, InReportPhase: 17, AfterFinalCheckpoint: 2, Machine: "m", Command: "c14"},
		{Seed: 15, Rounds: 20, Jobs: jobs, Runs: 100, Killed: 97, InReportPhase: 18, Machine: "m", Command: "c15"},
	} {
		if err := storage.SaveJSON(ctx, filepath.Join(root, killHuntDocs, fmt.Sprintf("kill-seed-%d.json", 14+i)), h); err != nil {
			t.Fatal(err)
		}
	}
	if err := run(ctx, []string{"--root=" + root, "--demo="}); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(root, "docs/reliability.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| runs killed | 192 of 200 (8 finished before their kill); 35 reproductions in their report phase, 2 trainings",
		"| records lost | 0 |", "14 (20 rounds), 15 (20 rounds)", "dcl preprocess; dcl reproduce (also in its report phase)"} {
		if !strings.Contains(string(got), want) {
			t.Errorf("docs/reliability.md lacks %q:\n%s", want, got)
		}
	}
	if err := run(ctx, []string{"--root=" + root, "--check"}); err != nil {
		t.Errorf("check right after make docs: %v", err)
	}
	edited := strings.Replace(string(got), "192 of 200", "200 of 200", 1)
	if err := os.WriteFile(filepath.Join(root, "docs/reliability.md"), []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(ctx, []string{"--root=" + root, "--check"}); !errors.Is(err, docsections.ErrStale) {
		t.Errorf("check of a README with a kill count typed over: %v, want %v", err, docsections.ErrStale)
	}
	other := testfiles.KillHunt{Seed: 16, Rounds: 1, Jobs: jobs[:1]}
	if err := storage.SaveJSON(ctx, filepath.Join(root, killHuntDocs, "kill-seed-16.json"), other); err != nil {
		t.Fatal(err)
	}
	if err := run(ctx, []string{"--root=" + root, "--check"}); err == nil || !strings.Contains(err.Error(), "one version of the test") {
		t.Errorf("hunts of two versions of the test: %v", err)
	}
}

// The GPU check's sections and the GPU stage table are rendered from the committed JSON (or
// say that none is committed), and a figure typed over in BENCHMARKS.md fails the check.
func TestGPUSections(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	writeDocs(t, root, demoReadme)
	if err := run(ctx, []string{"--root=" + root, "--demo="}); err != nil {
		t.Fatal(err)
	}
	gpu, _ := os.ReadFile(filepath.Join(root, "docs/gpu.md"))
	bench, _ := os.ReadFile(filepath.Join(root, "BENCHMARKS.md"))
	for _, want := range []string{"No GPU run of this check is committed yet"} {
		if !strings.Contains(string(gpu), want) || !strings.Contains(string(bench), want) {
			t.Errorf("without a GPU run, docs/gpu.md and BENCHMARKS.md lack %q:\n%s\n%s", want, gpu, bench)
		}
	}
	if !strings.Contains(string(bench), stagesPending) {
		t.Errorf("without stage times, BENCHMARKS.md lacks %q:\n%s", stagesPending, bench)
	}

	check := verify.CheckResult{Host: verify.Host{GPU: "NVIDIA H200", GPUMiB: 143771, Driver: "580.1", CPUs: 16}, Started: "2026-11-26T00:00:00Z",
		Agreement: &verify.AgreementResult{Precision: "float32", Pass: true, Variables: 65, FloorRatio: 1.2}}
	stages := reproduce.StageTimes{Experiment: "fashion-mnist-gpu-eval", GPU: "NVIDIA H200", Wall: 200,
		Stages: []reproduce.StageTime{{Stage: "train dcl-b32", Seconds: 100}}}
	for path, v := range map[string]any{gpuCheckResult: check, stageTimesFile: stages} {
		if err := storage.SaveJSON(ctx, filepath.Join(root, path), v); err != nil {
			t.Fatal(err)
		}
	}
	if err := run(ctx, []string{"--root=" + root, "--check"}); !errors.Is(err, docsections.ErrStale) {
		t.Errorf("check after new GPU results were committed: %v, want %v", err, docsections.ErrStale)
	}
	if err := run(ctx, []string{"--root=" + root, "--demo="}); err != nil {
		t.Fatal(err)
	}
	gpu, _ = os.ReadFile(filepath.Join(root, "docs/gpu.md"))
	bench, _ = os.ReadFile(filepath.Join(root, "BENCHMARKS.md"))
	if !strings.Contains(string(gpu), "Measured on NVIDIA H200") || !strings.Contains(string(gpu), "agreement, float32: **AGREE**") {
		t.Errorf("docs/gpu.md's summary is not the committed run's:\n%s", gpu)
	}
	if !strings.Contains(string(bench), "| train dcl-b32 | 100.0 | — |") || strings.Contains(string(bench), stagesPending) {
		t.Errorf("BENCHMARKS.md's stage table is not the committed stage times:\n%s", bench)
	}
	if err := run(ctx, []string{"--root=" + root, "--check"}); err != nil {
		t.Errorf("check right after make docs: %v", err)
	}
	write(t, filepath.Join(root, "BENCHMARKS.md"), strings.Replace(string(bench), "| 100.0 |", "| 90.0 |", 1))
	if err := run(ctx, []string{"--root=" + root, "--check"}); !errors.Is(err, docsections.ErrStale) || !strings.Contains(err.Error(), "BENCHMARKS.md") {
		t.Errorf("check of a stage time typed over: %v, want %v in BENCHMARKS.md", err, docsections.ErrStale)
	}
}

// A section that is not one of the generator's, one in another file than its own, one
// given twice and a marker of another syntax each fail the check, in any Markdown file.
func TestSectionsAreKnownAndInTheirFile(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	writeDocs(t, root, demoReadme)
	if err := run(ctx, []string{"--root=" + root, "--demo="}); err != nil {
		t.Fatal(err)
	}
	if err := run(ctx, []string{"--root=" + root, "--check"}); err != nil {
		t.Fatalf("check right after make docs: %v", err)
	}
	for what, c := range map[string]struct{ file, text, says string }{
		"unknown":      {"docs/other.md", docsections.Begin("benchmarks") + "\n" + docsections.End("benchmarks") + "\n", `no generated section is called "benchmarks"`},
		"misplaced":    {"docs/training.md", docsections.Begin("storage") + "\n" + docsections.End("storage") + "\n", `section "storage" belongs in docs/preprocessing.md`},
		"twice":        {"docs/preprocessing.md", "", `appears twice`},
		"other syntax": {"docs/gpu-notes.md", "<!-- gpu-check summary: begin -->\nx\n<!-- gpu-check summary: end -->\n", "gpu-check summary"},
		"never closed": {"docs/evaluation.md", docsections.Begin("demo") + "\n", `has no line`},
		"in a folder":  {"docs/deep/notes.md", docsections.Begin("nothing") + "\n" + docsections.End("nothing") + "\n", `"nothing"`},
	} {
		path := filepath.Join(root, c.file)
		was, had := os.ReadFile(path)
		text := c.text
		if what == "twice" {
			text = string(was) + docsections.Begin("storage") + "\n" + docsections.End("storage") + "\n"
		}
		write(t, path, text)
		if err := run(ctx, []string{"--root=" + root, "--check"}); err == nil || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: check says %v, want %q", what, err, c.says)
		}
		if had == nil {
			write(t, path, string(was))
		} else if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
	if err := run(ctx, []string{"--root=" + root, "--check"}); err != nil {
		t.Errorf("check after the files were put back: %v", err)
	}
}

// The CPU comparison's sections show the newest kept file's medians (the mean of the middle
// two for an even count), ratios that say how many times faster ours is whichever the unit,
// and the OpenBLAS row in its own table; a malformed line is refused with its file and line.
func TestCPUCompareSections(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	writeDocs(t, root, demoReadme)
	if err := run(ctx, []string{"--root=" + root, "--demo="}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "BENCHMARKS.md")); !strings.Contains(string(got), "No comparison is kept yet") {
		t.Errorf("without a comparison, the section says:\n%s", got)
	}
	line := func(row, side string, value, cpu float64, unit string, round int, extra string) string {
		return fmt.Sprintf(`{"row": %q, "side": %q, "value": %g, "cpu": %g, "unit": %q, "round": %d%s}`+"\n", row, side, value, cpu, unit, round, extra)
	}
	old := line("step", "ours", 1, 1, "ms/image", 1, "")
	write(t, filepath.Join(root, "docs/benchmarks/cpu-compare-2026-01-01.jsonl"), old)
	var kept strings.Builder
	for round, v := range []float64{10, 30, 20, 40} { // wall median 25, per CPU-second 2.5
		kept.WriteString(line("step", "ours", v, v/10, "ms/image", round+1, `, "load": "3.50 2 1"`))
		kept.WriteString(line("step", "eager", 50, 10, "ms/image", round+1, ""))
	}
	kept.WriteString(line("infer", "ours", 300, 600, "images/s", 1, `, "load": "0.25 1 1"`))
	kept.WriteString(line("infer", "compiled", 100, 150, "images/s", 1, ""))
	kept.WriteString(line("GEMM", "ours", 90, 45, "GFLOP/s", 1, ""))
	kept.WriteString(line("GEMM", "openblas", 100, 50, "GFLOP/s", 1, `, "blas": "libblas.so.3"`))
	write(t, filepath.Join(root, "docs/benchmarks/cpu-compare-2026-02-01.jsonl"), kept.String())
	if err := run(ctx, []string{"--root=" + root, "--demo="}); err != nil {
		t.Fatal(err)
	}
	bench, _ := os.ReadFile(filepath.Join(root, "BENCHMARKS.md"))
	engine, _ := os.ReadFile(filepath.Join(root, "docs/engine.md"))
	for _, want := range []string{"From `docs/benchmarks/cpu-compare-2026-02-01.jsonl`.", "wall time, medians of 4 rounds",
		"| step | ms/image | 25.00 | 50.00 |  | 2.00× |  |", "| step | ms/image | 2.50 | 10.00 |  | 4.00× |  |",
		"| infer | images/s | 300 |  | 100 |  | 3.00× |", "| what | unit | ours | OpenBLAS (libblas.so.3) | ours ÷ OpenBLAS |",
		"| GEMM | GFLOP/s | 90.00 | 100 | 0.90× |"} {
		if !strings.Contains(string(bench), want) {
			t.Errorf("BENCHMARKS.md lacks %q:\n%s", want, bench)
		}
	}
	for _, want := range []string{"load average was 0.2–3.5", "Per CPU-second: the training steps 4.00× PyTorch eager; inference 4.00× torch.compile; float32 GEMM 0.90× OpenBLAS.",
		"In wall time: the training steps 2.00× PyTorch eager"} {
		if !strings.Contains(strings.Join(strings.Fields(string(engine)), " "), want) {
			t.Errorf("docs/engine.md lacks %q:\n%s", want, engine)
		}
	}
	if err := run(ctx, []string{"--root=" + root, "--check"}); err != nil {
		t.Errorf("check right after make docs: %v", err)
	}
	// A comparison run at the highest priority leads with wall time and says so.
	var prio strings.Builder
	for _, side := range []string{"ours", "eager"} {
		prio.WriteString(line("step", side, map[string]float64{"ours": 10, "eager": 30}[side], 5, "ms/image", 1, `, "load": "6 6 6", "priority": "nice -20"`))
	}
	write(t, filepath.Join(root, "docs/benchmarks/cpu-compare-2026-02-15.jsonl"), prio.String())
	if err := run(ctx, []string{"--root=" + root, "--demo="}); err != nil {
		t.Fatal(err)
	}
	engine, _ = os.ReadFile(filepath.Join(root, "docs/engine.md"))
	flat := strings.Join(strings.Fields(string(engine)), " ")
	want := "highest scheduling priority (nice -20) with the 1-minute load average at 6.0–6.0 (the comparison's own two threads make 2)). In wall time: the training steps 3.00× PyTorch eager. Per CPU-second: the training steps 1.00× PyTorch eager."
	if !strings.Contains(flat, want) {
		t.Errorf("docs/engine.md lacks %q:\n%s", want, engine)
	}
	write(t, filepath.Join(root, "docs/benchmarks/cpu-compare-2026-03-01.jsonl"), old+`{"row": "step", "side": "ours"}`+"\n")
	if err := run(ctx, []string{"--root=" + root, "--check"}); err == nil || !strings.Contains(err.Error(), "cpu-compare-2026-03-01.jsonl:2") {
		t.Errorf("a line without its figures: %v", err)
	}
}

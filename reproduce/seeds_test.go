package reproduce

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/storage"
)

// seededTiny is tinyConfig with two training seeds per cell and a gate, without the
// baselines; its runs train one after another (pack: off), so that a kill in the last one
// leaves the others complete.
func seededTiny(s string) string {
	s = packOff(s)
	s = strings.Replace(s, "backend: cpu, checkpoint_every: 4}", "backend: cpu, checkpoint_every: 4, seeds: [1, 2]}", 1)
	s = strings.Replace(s, "  baselines: [raw-pixels, random-init]\n", "", 1)
	return s + "gates:\n  knn_top1: {max_drop_vs_previous: 0}\n"
}

// A seeded experiment runs every seed of every cell, summarises each cell over its seeds,
// computes the NPC statistics once per cell, resumes a run killed in its second seed to
// exactly the figures of an uninterrupted reproduction, and keeps its history and gates per
// run.
func TestSeededReproductionResumesAndKeepsItsHistory(t *testing.T) {
	if testing.Short() {
		t.Skip("runs three reproductions of four training runs each")
	}
	input := t.TempDir()
	writeBarsIDX(t, input)
	ctx := context.Background()
	whole, err := Run(ctx, parseTiny(t, input, seededTiny), Options{Out: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range whole.Runs {
		names = append(names, r.Config.Name)
		if wantNPC := strings.HasSuffix(r.Config.Name, "-s1"); (r.NPC != nil) != wantNPC {
			t.Errorf("run %s: NPC statistics %v, want them for the first seed of each cell only", r.Config.Name, r.NPC != nil)
		}
	}
	if got := strings.Join(names, " "); got != "infonce-s1 dcl-s1 infonce-s2 dcl-s2" {
		t.Fatalf("runs %s, want each cell's two seeds, seed by seed", got)
	}
	if len(whole.Cells) != 2 || whole.Cells[1].Name != "dcl" || whole.Cells[1].Metrics["knn_top1"].N != 2 {
		t.Fatalf("cells %+v, want infonce and dcl with kNN over 2 seeds", whole.Cells)
	}
	if len(whole.Comparisons) != 2 || whole.Comparisons[0].Cell != "dcl" || whole.Comparisons[0].Baseline != "infonce" {
		t.Errorf("comparisons %+v, want dcl against infonce on kNN and linear", whole.Comparisons)
	}
	if a, b := whole.Runs[1], whole.Runs[3]; a.Train.Loss == b.Train.Loss {
		t.Errorf("seeds 1 and 2 of dcl ended with the same loss %v: the seed changes nothing", a.Train.Loss)
	}

	// Killed in the second seed of the last cell, then run again.
	out := t.TempDir()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stderr := &cancelAtNth{marker: `"step":10,`, n: 4, cancel: cancel}
	if _, err := Run(cctx, parseTiny(t, input, seededTiny), Options{Out: out, Stderr: stderr, TrainLog: true}); !errors.Is(err, context.Canceled) {
		t.Fatalf("the interrupted reproduction returned %v, want context.Canceled", err)
	}
	resumed, err := Run(ctx, parseTiny(t, input, seededTiny), Options{Out: out})
	if err != nil {
		t.Fatal(err)
	}
	for i := range whole.Runs {
		a, b := whole.Runs[i], resumed.Runs[i]
		if a.Train.Loss != b.Train.Loss || a.KNN.Top1 != b.KNN.Top1 || a.Linear.Top1 != b.Linear.Top1 {
			t.Errorf("run %s: interrupted and resumed, loss %v kNN %v linear %v; uninterrupted %v, %v, %v", a.Config.Name,
				b.Train.Loss, b.KNN.Top1, b.Linear.Top1, a.Train.Loss, a.KNN.Top1, a.Linear.Top1)
		}
	}
	for _, s := range resumed.Stages {
		if s.Name == "train dcl-s1" && !s.Skipped {
			t.Errorf("stage %s ran again; it was complete before the interruption", s.Name)
		}
	}

	// Reproduced again (the kNN evaluations redone): a history row per run and metric, the
	// gate checked per run.
	again, err := Run(ctx, parseTiny(t, input, seededTiny), Options{Out: out, Rerun: []StageKind{StageKNN}})
	if err != nil {
		t.Fatal(err)
	}
	hist, err := ReadHistory(ctx, out)
	if err != nil {
		t.Fatal(err)
	}
	if len(hist) != 2 {
		t.Fatalf("%d reproductions in the history, want 2", len(hist))
	}
	if v, ok := hist[1].Value("dcl-s2", "knn_top1"); !ok || v != whole.Runs[3].KNN.Top1 {
		t.Errorf("history: dcl-s2's kNN = %v, %v; want %v", v, ok, whole.Runs[3].KNN.Top1)
	}
	if len(again.Gates) != 4 || len(again.FailedGates()) != 0 {
		t.Errorf("gates %+v, want 4 checks (one per run), none failed", again.Gates)
	}
	report, err := os.ReadFile(filepath.Join(out, ReportName))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Cells (mean ± standard deviation over the seeds)", "| dcl-s2 ", "| " + string(again.Comparisons[0].Verdict) + " |"} {
		if !strings.Contains(string(report), want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	var saved Results
	if err := storage.LoadJSON(ctx, filepath.Join(out, ResultsName), &saved); err != nil {
		t.Fatal(err)
	}
	if len(saved.Cells) != 2 || saved.Runs[3].Cell != "dcl" {
		t.Errorf("results.json: cells %+v, run dcl-s2's cell %q", saved.Cells, saved.Runs[3].Cell)
	}
}

// cancelAtNth cancels once marker has been written n times.
type cancelAtNth struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	marker string
	n      int
	cancel context.CancelFunc
}

func (c *cancelAtNth) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf.Write(p)
	if strings.Count(c.buf.String(), c.marker) >= c.n {
		c.cancel()
	}
	return len(p), nil
}

package reproduce

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"

	"github.com/dcl-beam/dcl-beam/internal/progress"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/internal/tensorboard"
	"github.com/dcl-beam/dcl-beam/shards"
)

func TestMain(m *testing.M) { ptest.Main(m) }

// tinyConfig is a whole experiment small enough for a test: two runs of a narrow small CNN
// on 16×16 bars, every evaluation and both baselines.
const tinyConfig = `
name: tiny
dataset: {name: idx, input: INPUT, image_size: 16}
preprocess: {augment: simclr-cifar, passes: 2, seed: 7}
train:
  defaults: {model: small-cnn, width: 4, epochs: 2, batch_size: 16, temperature: 0.2, lr: 0.3, backend: cpu, checkpoint_every: 4}
  runs:
    - {name: infonce, loss: infonce}
    - {name: dcl, loss: dcl}
evaluate:
  knn: {k: 10, temperature: 0.1}
  linear: {epochs: 5, lr: 1, batch_size: 32}
  npc: {batch_sizes: [8, 16], samples: 2}
  knn_every: 1
  baselines: [raw-pixels, random-init]
`

func parseTiny(t *testing.T, input string, edit func(string) string) *Config {
	t.Helper()
	text := strings.Replace(tinyConfig, "INPUT", input, 1)
	if edit != nil {
		text = edit(text)
	}
	cfg, err := Parse(strings.NewReader(text), "tiny.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// writeBarsIDX writes an MNIST-style dataset of 16×16 images: class 0 has horizontal bars,
// class 1 vertical ones, each with its own offset and noise.
func writeBarsIDX(t *testing.T, dir string) {
	t.Helper()
	writeBarsIDXLabelled(t, dir, func(_ string, i int) int { return i % 2 })
}

// writeBarsIDXLabelled is writeBarsIDX with the labels of labelOf(prefix, i): label 0 has
// horizontal bars, any other vertical ones.
func writeBarsIDXLabelled(t *testing.T, dir string, labelOf func(prefix string, i int) int) {
	t.Helper()
	r := rand.New(rand.NewPCG(3, 4))
	write := func(prefix string, n int) {
		const side = 16
		images := make([]byte, n*side*side)
		labels := make([]byte, n)
		for i := range n {
			label := labelOf(prefix, i)
			labels[i] = byte(label)
			offset := r.IntN(4)
			img := images[i*side*side : (i+1)*side*side]
			for y := range side {
				for x := range side {
					v := x
					if label == 0 {
						v = y
					}
					px := 30 + r.IntN(40)
					if (v+offset)%4 < 2 {
						px += 150
					}
					img[y*side+x] = byte(px)
				}
			}
		}
		var hdr bytes.Buffer
		binary.Write(&hdr, binary.BigEndian, []uint32{0x803, uint32(n), side, side})
		if err := os.WriteFile(filepath.Join(dir, prefix+"-images-idx3-ubyte"), append(hdr.Bytes(), images...), 0o644); err != nil {
			t.Fatal(err)
		}
		hdr.Reset()
		binary.Write(&hdr, binary.BigEndian, []uint32{0x801, uint32(n)})
		if err := os.WriteFile(filepath.Join(dir, prefix+"-labels-idx1-ubyte"), append(hdr.Bytes(), labels...), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("train", 128)
	write("t10k", 64)
}

// The whole experiment runs, writes its results, report and plots; run again, every stage
// is complete and skipped and the results are the same.
func TestRunWritesResultsAndIsANoOpWhenComplete(t *testing.T) {
	input, out := t.TempDir(), t.TempDir()
	writeBarsIDX(t, input)
	ctx := context.Background()
	res, err := Run(ctx, parseTiny(t, input, nil), Options{Out: out})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Runs) != 2 || len(res.Baselines) != 2 {
		t.Fatalf("%d runs and %d baselines, want 2 and 2", len(res.Runs), len(res.Baselines))
	}
	for _, r := range res.Runs {
		if r.Train == nil || !r.Train.Finished || r.KNN == nil || r.Linear == nil || r.NPC == nil {
			t.Fatalf("run %s lacks a result: %+v", r.Config.Name, r)
		}
		if r.KNN.NTest != 64 || r.KNN.NTrain != 128 {
			t.Errorf("run %s: kNN of %d queries against %d, want 64 against 128", r.Config.Name, r.KNN.NTest, r.KNN.NTrain)
		}
		if len(r.Curves.Epoch) != 2 || len(r.Curves.KNNTop1) != 2 {
			t.Errorf("run %s: curves %+v, want 2 epochs of loss and 2 kNN readings", r.Config.Name, r.Curves)
		}
		if got := len(r.NPC.Stats); got != 2 {
			t.Errorf("run %s: NPC statistics for %d batch sizes, want 2", r.Config.Name, got)
		}
	}
	if bl := res.Baselines[0]; bl.Name != RawPixels || bl.KNN == nil || bl.KNN.Top1 < 90 {
		t.Errorf("raw-pixel kNN on bars = %+v, want above 90%% (the classes differ by their pixels)", bl.KNN)
	}
	for _, s := range res.Stages {
		if s.Skipped {
			t.Errorf("stage %s was skipped on the first run", s.Name)
		}
	}
	report, err := os.ReadFile(filepath.Join(out, ReportName))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| infonce ", "| dcl ", "SimCLR (InfoNCE)", "raw-pixels", "random-init", "NPC multiplier", "plots/" + NPCPlotName, "plots/" + LossPlotName,
		"plots/" + TSNEPlotName, "](runs/dcl/npc/npc-distribution.png)"} {
		if !strings.Contains(string(report), want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	for _, p := range []string{LossPlotName, KNNPlotName, NPCPlotName, TSNEPlotName} {
		if _, err := os.Stat(filepath.Join(out, PlotsDir, p)); err != nil {
			t.Errorf("plot %s: %v", p, err)
		}
	}
	// TensorBoard takes each folder of event files for a run: one per training run.
	eventDirs := map[string]int{}
	filepath.WalkDir(out, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), tensorboard.NamePrefix) {
			rel, _ := filepath.Rel(out, filepath.Dir(p))
			eventDirs[filepath.ToSlash(rel)]++
		}
		return nil
	})
	if want := map[string]int{"runs/infonce/tensorboard": 1, "runs/dcl/tensorboard": 1}; !maps.Equal(eventDirs, want) {
		t.Errorf("TensorBoard runs (folders of event files) %v, want %v", eventDirs, want)
	}
	var saved Results
	if err := storage.LoadJSON(ctx, filepath.Join(out, ResultsName), &saved); err != nil {
		t.Fatal(err)
	}
	if saved.Runs[1].KNN.Top1 != res.Runs[1].KNN.Top1 {
		t.Errorf("results.json holds kNN %v, the run returned %v", saved.Runs[1].KNN.Top1, res.Runs[1].KNN.Top1)
	}

	again, err := Run(ctx, parseTiny(t, input, nil), Options{Out: out})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range again.Stages {
		if !s.Skipped {
			t.Errorf("stage %s ran again on a complete run directory", s.Name)
		}
	}
	for i := range res.Runs {
		if a, b := res.Runs[i], again.Runs[i]; a.KNN.Top1 != b.KNN.Top1 || a.Linear.Top1 != b.Linear.Top1 || a.Train.Loss != b.Train.Loss {
			t.Errorf("run %s: the no-op re-run reports other figures", a.Config.Name)
		}
	}
	// It is the same reproduction: no second history entry, and the report says so.
	report, err = os.ReadFile(filepath.Join(out, ReportName))
	if err != nil {
		t.Fatal(err)
	}
	if n := len(historyFiles(t, out)); n != 1 || !again.Unchanged || again.HistoryFile != res.HistoryFile || again.Previous != nil ||
		!strings.Contains(string(report), "This call ran no stage: its figures are those of the last reproduction, history/"+res.HistoryFile) {
		t.Errorf("the no-op re-run: %d history files, unchanged %v, history file %s (previous %v), want the first's %s alone, and a report that says so",
			n, again.Unchanged, again.HistoryFile, again.Previous, res.HistoryFile)
	}

	// A config that changes what a finished run trained is refused, not mixed in; its plan
	// shows the refusal where the run would stop.
	changed := parseTiny(t, input, func(s string) string { return strings.Replace(s, "epochs: 2", "epochs: 3", 1) })
	if _, err := Run(ctx, changed, Options{Out: out}); err == nil || !strings.Contains(err.Error(), "other settings") {
		t.Errorf("Run with a changed config = %v, want a refusal naming the run's settings", err)
	}
	plan, err := Plan(ctx, changed, Options{Out: out})
	if err != nil || len(plan) == 0 || !plan[len(plan)-1].Refused || !strings.Contains(plan[len(plan)-1].Reason, "epochs: 2 → 3") {
		t.Errorf("Plan of a changed config = %+v, %v; want the stages up to the refused training, with its reason", plan, err)
	}
	var printed strings.Builder
	if err := WritePlan(&printed, plan); err != nil || !strings.Contains(printed.String(), "REFUSE") || !strings.Contains(printed.String(), "A run would stop at train") {
		t.Errorf("the plan printed %q (%v), want the refusal", printed.String(), err)
	}
}

// A run killed during training continues from its checkpoint when run again, and ends with
// exactly the results of a run that was never interrupted.
func TestKilledRunContinuesWhereItStopped(t *testing.T) {
	input := t.TempDir()
	writeBarsIDX(t, input)
	oneRun := func(s string) string {
		s = strings.Replace(s, "    - {name: infonce, loss: infonce}\n", "", 1)
		return strings.Replace(s, "  baselines: [raw-pixels, random-init]\n", "", 1)
	}
	whole, err := Run(context.Background(), parseTiny(t, input, oneRun), Options{Out: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}

	out := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Cancel once the training log has reached step 10 of 16: the trainer stops after that
	// step with a checkpoint, as on Ctrl-C or SIGTERM.
	stderr := &cancelAfter{marker: `"step":10,`, cancel: cancel}
	if _, err := Run(ctx, parseTiny(t, input, oneRun), Options{Out: out, Stderr: stderr, TrainLog: true}); !errors.Is(err, context.Canceled) {
		t.Fatalf("the interrupted run returned %v, want context.Canceled", err)
	}
	if ok, _ := storage.Exists(context.Background(), filepath.Join(out, ResultsName)); ok {
		t.Fatal("an interrupted run wrote results.json")
	}
	var console bytes.Buffer
	resumed, err := Run(context.Background(), parseTiny(t, input, oneRun), Options{Out: out, Stderr: &console})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(console.String(), `"step":`) {
		t.Errorf("without TrainLog the console got training log lines: %q", console.String())
	}
	a, b := whole.Runs[0], resumed.Runs[0]
	if a.Train.StepsDone != b.Train.StepsDone || a.Train.Loss != b.Train.Loss || a.KNN.Top1 != b.KNN.Top1 || a.Linear.Top1 != b.Linear.Top1 {
		t.Errorf("interrupted and resumed: steps %d, loss %v, kNN %v, linear %v; uninterrupted: %d, %v, %v, %v",
			b.Train.StepsDone, b.Train.Loss, b.KNN.Top1, b.Linear.Top1, a.Train.StepsDone, a.Train.Loss, a.KNN.Top1, a.Linear.Top1)
	}
	for _, s := range resumed.Stages {
		if strings.HasPrefix(s.Name, "preprocess") && !s.Skipped {
			t.Errorf("stage %s ran again after the interruption; its output was complete", s.Name)
		}
	}
}

type cancelAfter struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	marker string
	cancel context.CancelFunc
}

func (c *cancelAfter) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf.Write(p)
	if strings.Contains(c.buf.String(), c.marker) {
		c.cancel()
	}
	return len(p), nil
}

// A preprocessing run killed before its manifest, by a build of another version, leaves
// shards that name that version; the next call (a rebuilt binary) redoes the stage instead of
// refusing the folder as another dataset.
func TestPartialDatasetOfAnotherBuildIsRedone(t *testing.T) {
	input, out := t.TempDir(), t.TempDir()
	writeBarsIDX(t, input)
	oneRun := func(s string) string {
		s = strings.Replace(s, "    - {name: infonce, loss: infonce}\n", "", 1)
		s = strings.Replace(s, "  baselines: [raw-pixels, random-init]\n", "", 1)
		return strings.Replace(s, "  npc: {batch_sizes: [8, 16], samples: 2}\n", "", 1)
	}
	ctx := context.Background()
	if _, err := Run(ctx, parseTiny(t, input, oneRun), Options{Out: out, CodeVersion: "v1"}); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(out, DataDir, "pretrain", shards.ManifestName)); err != nil {
		t.Fatal(err)
	}
	res, err := Run(ctx, parseTiny(t, input, oneRun), Options{Out: out, CodeVersion: "v2"})
	if err != nil {
		t.Fatalf("re-run by another build over a partial dataset: %v", err)
	}
	if res.Stages[0].Name != "preprocess pretrain" || res.Stages[0].Skipped {
		t.Errorf("first stage %+v: want the pretraining data preprocessed again", res.Stages[0])
	}
	m, err := shards.ReadManifest(ctx, filepath.Join(out, DataDir, "pretrain"))
	if err != nil || m.Config.CodeVersion != "v2" {
		t.Errorf("manifest %v, %v: want one written by v2", m, err)
	}
}

// A dataset without a class list (idx) whose evaluation training rows lack a class the
// test rows have: the class count comes from both splits' labels, not from the
// labels present in training (which gave 2 classes for labels {0, 2} and refused label 2).
func TestClassCountOfADatasetWithoutAClassList(t *testing.T) {
	input, out := t.TempDir(), t.TempDir()
	writeBarsIDXLabelled(t, input, func(prefix string, i int) int {
		if prefix == "train" {
			return 2 * (i % 2)
		}
		return i % 3
	})
	cfg := parseTiny(t, input, func(s string) string {
		s = strings.Replace(s, "    - {name: dcl, loss: dcl}\n", "", 1)
		return strings.Replace(s, "baselines: [raw-pixels, random-init]", "baselines: [raw-pixels]", 1)
	})
	if len(cfg.Runs) != 1 || len(cfg.Evaluate.Baselines) != 1 {
		t.Fatalf("the edited config has %d runs and baselines %v, want 1 run and raw-pixels", len(cfg.Runs), cfg.Evaluate.Baselines)
	}
	res, err := Run(context.Background(), cfg, Options{Out: out})
	if err != nil {
		t.Fatal(err)
	}
	bl := res.Baselines[0]
	if bl.KNN == nil || bl.KNN.NumClasses != 3 || bl.Linear == nil {
		t.Fatalf("raw-pixel baseline = %+v, want kNN and linear results over 3 classes", bl)
	}
}

// Every stage of a reproduction shows its progress: in a log, a line for each stage at least.
func TestEveryStageShowsProgress(t *testing.T) {
	input := t.TempDir()
	writeBarsIDX(t, input)
	var shown bytes.Buffer
	opts := Options{Out: t.TempDir(), Progress: progress.Options{W: &shown, Mode: progress.Lines, Interval: time.Hour}}
	oneRun := func(s string) string {
		s = strings.Replace(s, "    - {name: infonce, loss: infonce}\n", "", 1)
		return strings.Replace(s, "  baselines: [raw-pixels, random-init]\n", "", 1)
	}
	if _, err := Run(context.Background(), parseTiny(t, input, oneRun), opts); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"preprocess reading: ", "preprocess writing: ", "train: 16/16 steps (100%)", "kNN monitor after epoch 1: ",
		"embed: ", "knn: ", "linear: 5/5 epochs (100%)", "npc: "} {
		if !strings.Contains(shown.String(), want) {
			t.Errorf("no progress line %q:\n%s", want, shown.String())
		}
	}
}

// TestOnlineViewsGiveTheStoredPassesResults: the same experiment with its views made by the
// trainer (preprocess.views online) and with them stored (2 passes for 2 epochs) reports the
// same figures, to the last bit: losses, kNN, linear and NPC of every run.
func TestOnlineViewsGiveTheStoredPassesResults(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the tiny experiment twice")
	}
	input := t.TempDir()
	writeBarsIDX(t, input)
	ctx := context.Background()
	small := func(s string) string { // the baselines do not depend on the views
		return strings.Replace(s, "  baselines: [raw-pixels, random-init]\n", "", 1)
	}
	stored, err := Run(ctx, parseTiny(t, input, small), Options{Out: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	online, err := Run(ctx, parseTiny(t, input, func(s string) string {
		return strings.Replace(small(s), "passes: 2,", "views: online,", 1)
	}), Options{Out: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if len(stored.Runs) != 2 || len(online.Runs) != len(stored.Runs) {
		t.Fatalf("%d runs stored, %d online", len(stored.Runs), len(online.Runs))
	}
	for i, s := range stored.Runs {
		o := online.Runs[i]
		if o.Train == nil || s.Train == nil || o.KNN == nil || o.Linear == nil || o.NPC == nil {
			t.Fatalf("run %s lacks a result", s.Config.Name)
		}
		if o.Train.Loss != s.Train.Loss || o.KNN.Top1 != s.KNN.Top1 || o.Linear.Top1 != s.Linear.Top1 ||
			fmt.Sprint(o.Curves) != fmt.Sprint(s.Curves) || fmt.Sprint(o.NPC.Stats) != fmt.Sprint(s.NPC.Stats) {
			t.Errorf("run %s: online views give loss %v, kNN %v, linear %v, curves %+v; stored passes %v, %v, %v, %+v",
				s.Config.Name, o.Train.Loss, o.KNN.Top1, o.Linear.Top1, o.Curves, s.Train.Loss, s.KNN.Top1, s.Linear.Top1, s.Curves)
		}
	}
}

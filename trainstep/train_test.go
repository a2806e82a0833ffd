package trainstep

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dcl-beam/dcl-beam/internal/progress"
	"github.com/dcl-beam/dcl-beam/transforms"
	"github.com/dcl-beam/dcl-beam/transforms/datasets"
)

// syntheticPairs makes n view pairs of h×w×c images in `classes` classes: each example is its
// class's prototype plus noise, and each view adds its own noise, so views of one example are
// closer than views of others and a contrastive loss has something to learn.
func syntheticPairs(seed uint64, n, classes, h, w, c int) []Pair {
	r := rand.New(rand.NewPCG(seed, 99))
	protos := make([][]float64, classes)
	for k := range protos {
		protos[k] = make([]float64, h*w*c)
		for i := range protos[k] {
			protos[k][i] = r.Float64() * 255
		}
	}
	noisy := func(base []float64, sd float64) []float64 {
		out := make([]float64, len(base))
		for i := range base {
			out[i] = base[i] + r.NormFloat64()*sd
		}
		return out
	}
	toImage := func(v []float64) transforms.Image {
		img := transforms.NewImage(h, w, c)
		for i, x := range v {
			img.Pix[i] = uint8(min(255, max(0, x)))
		}
		return img
	}
	pairs := make([]Pair, n)
	for i := range pairs {
		label := i % classes
		ex := noisy(protos[label], 40)
		pairs[i] = Pair{View1: toImage(noisy(ex, 15)), View2: toImage(noisy(ex, 15)), Label: int32(label)}
	}
	return pairs
}

func testStepConfig(model string) StepConfig {
	return StepConfig{
		Model:     ModelConfig{Name: model, BaseWidth: 4, Channels: 1},
		Loss:      LossConfig{Kind: DCL, Temperature: 0.2},
		Optimizer: OptimizerConfig{Kind: SGDMomentum, Momentum: 0.9, WeightDecay: 5e-4},
		InitSeed:  7,
	}
}

func testRunConfig(t *testing.T, out string) RunConfig {
	t.Helper()
	return RunConfig{Data: "memory", Out: out, BatchSize: 4, Epochs: 2, BaseLR: 0.5, WarmupEpochs: 0.5, Seed: 11, KeepCheckpoints: 2}
}

func mustMemorySource(t *testing.T, passes ...[]Pair) *MemorySource {
	t.Helper()
	src, err := NewMemorySource(datasets.IDX, passes...) // grey images: the registry's unnamed-IDX statistics
	if err != nil {
		t.Fatal(err)
	}
	return src
}

func quietOptions(t *testing.T, src BatchSource) TrainOptions {
	return TrainOptions{Backend: newTestBackend(t), Source: src, Logger: slog.New(slog.DiscardHandler)}
}

// variableBytes reads every variable of a checkpoint as raw bytes, by scope and name.
// stoppedRun trains cfg on src twice: a whole run, and one in out stopped after 2 steps; it
// returns the whole run's summary and the stopped run's folder and configuration (no step
// limit), ready to resume.
func stoppedRun(t *testing.T, cfg StepConfig, src *MemorySource) (whole *Summary, out string, run RunConfig) {
	t.Helper()
	ctx := context.Background()
	whole, err := Train(ctx, cfg, testRunConfig(t, t.TempDir()), quietOptions(t, src))
	if err != nil {
		t.Fatal(err)
	}
	out = t.TempDir()
	run = testRunConfig(t, out)
	run.MaxSteps = 2
	if _, err := Train(ctx, cfg, run, quietOptions(t, src)); err != nil {
		t.Fatal(err)
	}
	run.MaxSteps = 0
	return whole, out, run
}

func variableBytes(t *testing.T, path string) map[string][]byte {
	t.Helper()
	c, err := ReadCheckpoint(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, e := range c.Header.Variables {
		out[e.Scope+"/"+e.Name] = c.raw(e)
	}
	return out
}

func sameBytes(t *testing.T, a, b map[string][]byte) {
	t.Helper()
	if len(a) != len(b) {
		t.Fatalf("checkpoints hold %d and %d variables", len(a), len(b))
	}
	for k, va := range a {
		if vb, ok := b[k]; !ok || !bytes.Equal(va, vb) {
			t.Errorf("variable %s differs between the uninterrupted and the resumed run", k)
		}
	}
}

// cancelAfter wraps a source and cancels a context once the trainer has asked for n batches.
type cancelAfter struct {
	BatchSource
	n      int64
	cancel context.CancelFunc
	seen   atomic.Int64
}

func (c *cancelAfter) Batches(ctx context.Context, epoch int, seed uint64, size, start int) (BatchIterator, error) {
	it, err := c.BatchSource.Batches(ctx, epoch, seed, size, start)
	return &cancelIter{BatchIterator: it, c: c}, err
}

type cancelIter struct {
	BatchIterator
	c *cancelAfter
}

func (it *cancelIter) Next() (*Batch, error) {
	if it.c.seen.Add(1) == it.c.n {
		it.c.cancel()
	}
	return it.BatchIterator.Next()
}

// TestResumeIsBitIdentical: a run stopped part-way (by max-steps, and by a cancelled context
// as Ctrl-C does) and resumed from its checkpoint ends with exactly the weights, running
// averages and momentum of a run that was never interrupted.
func TestResumeIsBitIdentical(t *testing.T) {
	pairs := syntheticPairs(1, 22, 3, 6, 6, 1) // 5 steps per epoch at batch 4, 2 left over
	src := mustMemorySource(t, pairs)
	ctx := context.Background()

	whole := t.TempDir()
	sum, err := Train(ctx, testStepConfig(MLP), testRunConfig(t, whole), quietOptions(t, src))
	if err != nil {
		t.Fatal(err)
	}
	if !sum.Finished || sum.StepsDone != 10 {
		t.Fatalf("uninterrupted run: %+v, want 10 steps, finished", sum)
	}
	want := variableBytes(t, sum.Checkpoint)

	t.Run("max-steps", func(t *testing.T) {
		out := t.TempDir()
		run := testRunConfig(t, out)
		run.MaxSteps = 3
		first, err := Train(ctx, testStepConfig(MLP), run, quietOptions(t, src))
		if err != nil {
			t.Fatal(err)
		}
		if first.Finished || first.StepsDone != 3 {
			t.Fatalf("first part: %+v, want 3 steps, not finished", first)
		}
		run.MaxSteps = 0
		opts := quietOptions(t, src)
		opts.Resume = out
		second, err := Train(ctx, testStepConfig(MLP), run, opts)
		if err != nil {
			t.Fatal(err)
		}
		if !second.Finished || second.StepsDone != 10 {
			t.Fatalf("resumed run: %+v", second)
		}
		sameBytes(t, want, variableBytes(t, second.Checkpoint))
	})

	t.Run("cancelled", func(t *testing.T) {
		out := t.TempDir()
		run := testRunConfig(t, out)
		run.CheckpointEvery = 2
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		wrapped := &cancelAfter{BatchSource: src, n: 7, cancel: cancel}
		_, err := Train(cctx, testStepConfig(MLP), run, quietOptions(t, wrapped))
		if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "--resume") {
			t.Fatalf("interrupted run: error %v, want context.Canceled and a hint to resume", err)
		}
		opts := quietOptions(t, src)
		opts.Resume = out
		second, err := Train(ctx, testStepConfig(MLP), run, opts)
		if err != nil {
			t.Fatal(err)
		}
		sameBytes(t, want, variableBytes(t, second.Checkpoint))
	})
}

func TestTrainLogsAndLearns(t *testing.T) {
	pairs := syntheticPairs(2, 64, 4, 6, 6, 3)
	out := t.TempDir()
	run := testRunConfig(t, out)
	run.BatchSize, run.Epochs, run.BaseLR = 16, 12, 1
	run.MonitorEvery = 6
	var stderr bytes.Buffer
	opts := TrainOptions{Backend: newTestBackend(t), Source: mustMemorySource(t, pairs), Log: &stderr, Logger: slog.New(slog.DiscardHandler)}
	monitored := 0
	opts.Monitor = func(_ context.Context, epoch int, s *Step, _ *progress.Reporter) (map[string]any, error) {
		monitored++
		return map[string]any{"monitor_epoch": epoch}, nil
	}
	sum, err := Train(context.Background(), testStepConfig(MLP), run, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !sum.Finished || sum.StepsDone != 48 || sum.Monitor["monitor_epoch"] != 12 { // after 12 epochs completed
		t.Errorf("summary %+v: want 48 steps, finished, the last monitor result", sum)
	}
	if monitored != 2 {
		t.Errorf("monitor ran %d times in 12 epochs at every 6, want 2", monitored)
	}
	logData, err := os.ReadFile(filepath.Join(out, LogName))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(logData, stderr.Bytes()) {
		t.Errorf("the log file and its copy differ")
	}
	lines := strings.Split(strings.TrimSpace(string(logData)), "\n")
	if len(lines) != 48+2 {
		t.Fatalf("log has %d lines, want 48 steps + 2 monitor lines", len(lines))
	}
	var first, last LogLine
	mustUnmarshal(t, lines[0], &first)
	mustUnmarshal(t, lines[len(lines)-2], &last)
	if first.Step != 1 || last.Step != 48 || first.LR <= 0 || first.MeanQ <= 0 || first.MeanQ >= 1 || first.ImagesPerSec <= 0 {
		t.Errorf("log lines look wrong: first %+v, last %+v", first, last)
	}
	if !(last.Loss < first.Loss-0.2) {
		t.Errorf("loss went from %.4f to %.4f in 48 steps: not learning", first.Loss, last.Loss)
	}
	if _, err := os.Stat(filepath.Join(out, SummaryName)); err != nil {
		t.Errorf("no summary: %v", err)
	}
	paths, _, err := ListCheckpoints(context.Background(), out)
	if err != nil || len(paths) != 1 {
		t.Errorf("checkpoints %v (%v), want just the final one", paths, err)
	}

}

// TestTrainLogOnlyInItsFile checks that without Log the JSON lines go to the run's
// train.jsonl and not to the console, where the progress shows the key metrics instead.
func TestTrainLogOnlyInItsFile(t *testing.T) {
	out := t.TempDir()
	run := testRunConfig(t, out)
	run.BatchSize, run.Epochs = 16, 1
	var stderr bytes.Buffer
	opts := TrainOptions{Backend: newTestBackend(t), Source: mustMemorySource(t, syntheticPairs(2, 32, 4, 6, 6, 3)),
		Progress: progress.Options{W: &stderr, Mode: progress.Lines, Interval: time.Hour}, Logger: slog.New(slog.DiscardHandler)}
	if _, err := Train(context.Background(), testStepConfig(MLP), run, opts); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stderr.String(), "{") {
		t.Errorf("the console got JSON: %q", stderr.String())
	}
	logData, err := os.ReadFile(filepath.Join(out, LogName))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(logData), "\n"); n != 2 {
		t.Errorf("log has %d lines, want 2 steps", n)
	}
}

type emptySource struct{ MemorySource }

func (*emptySource) Info() SourceInfo { return SourceInfo{Height: 8, Width: 8, Channels: 1, Passes: 1} }

func TestTrainRejectsBadRuns(t *testing.T) {
	pairs := syntheticPairs(3, 12, 2, 8, 8, 1)
	src := mustMemorySource(t, pairs)
	ctx := context.Background()
	// A finished MLP run to resume from.
	mlpOut := t.TempDir()
	if _, err := Train(ctx, testStepConfig(MLP), testRunConfig(t, mlpOut), quietOptions(t, src)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		model string
		edit  func(*RunConfig, *TrainOptions, *StepConfig)
		want  string
	}{
		{"batch size 1", MLP, func(r *RunConfig, _ *TrainOptions, _ *StepConfig) { r.BatchSize = 1 }, "batch-size 1: a contrastive batch"},
		{"zero temperature", MLP, func(_ *RunConfig, _ *TrainOptions, s *StepConfig) { s.Loss.Temperature = 0 }, "temperature 0"},
		{"empty dataset", MLP, func(_ *RunConfig, o *TrainOptions, _ *StepConfig) { o.Source = &emptySource{} }, "is empty"},
		{"batch larger than the data", MLP, func(r *RunConfig, _ *TrainOptions, _ *StepConfig) { r.BatchSize = 13 }, "fewer than one batch of 13"},
		{"image too small for the model", ResNet18CIFAR, func(*RunConfig, *TrainOptions, *StepConfig) {}, "expects sides of 32 to 96 px"},
		{"checkpoint of another model", SmallCNN, func(_ *RunConfig, o *TrainOptions, _ *StepConfig) { o.Resume = mlpOut }, "holds a mlp model, not small-cnn"},
		{"checkpoint of another seed", MLP, func(r *RunConfig, o *TrainOptions, _ *StepConfig) { o.Resume, r.Seed = mlpOut, 12 }, "seed 11, not 12"},
		{"no checkpoint to resume", MLP, func(_ *RunConfig, o *TrainOptions, _ *StepConfig) { o.Resume = t.TempDir() }, "no checkpoint in"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := testRunConfig(t, t.TempDir())
			opts := quietOptions(t, src)
			cfg := testStepConfig(tc.model)
			tc.edit(&run, &opts, &cfg)
			_, err := Train(ctx, cfg, run, opts)
			if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error = %v, want one line containing %q", err, tc.want)
			}
			var setup *SetupError
			if isSetup := errors.As(err, &setup); isSetup != (tc.name != "no checkpoint to resume") {
				t.Errorf("error %v is a SetupError: %v", err, isSetup)
			}
		})
	}
}

func TestCheckpointRejectsDamage(t *testing.T) {
	pairs := syntheticPairs(4, 8, 2, 4, 4, 1)
	out := t.TempDir()
	sum, err := Train(context.Background(), testStepConfig(MLP), testRunConfig(t, out), quietOptions(t, mustMemorySource(t, pairs)))
	if err != nil {
		t.Fatal(err)
	}
	good, err := os.ReadFile(sum.Checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		edit func([]byte) []byte
		want string
	}{
		{"flipped byte", func(b []byte) []byte { b[len(b)/2] ^= 1; return b }, "checksum mismatch"},
		{"truncated", func(b []byte) []byte { return b[:len(b)-100] }, "truncated or corrupt"},
		{"header cut", func(b []byte) []byte { return b[:200] }, "truncated or corrupt"},
		{"not a checkpoint", func([]byte) []byte { return []byte("PK\x03\x04 a zip file, not ours") }, "not a dcl checkpoint"},
		{"empty", func([]byte) []byte { return nil }, "not a dcl checkpoint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "bad"+CheckpointExt)
			if err := os.WriteFile(p, tc.edit(bytes.Clone(good)), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := ReadCheckpoint(context.Background(), p)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
				t.Errorf("error = %v, want it to name %s and say %q", err, p, tc.want)
			}
		})
	}
}

// TestCheckpointRoundTrip: every variable comes back with its value, shape and trainability.
func TestCheckpointRoundTrip(t *testing.T) {
	backend := newTestBackend(t)
	s, err := NewStep(backend, testStepConfig(MLP), 4, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Finalize()
	path := filepath.Join(t.TempDir(), CheckpointName(0))
	state := TrainState{StepsDone: 5, Epoch: 1, Batch: 2, Seed: 3, Data: "d", DataFingerprint: "f", ImageHeight: 4, ImageWidth: 4}
	if err := SaveCheckpoint(context.Background(), path, s, nil, state); err != nil {
		t.Fatal(err)
	}
	c, err := ReadCheckpoint(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Header.State != state {
		t.Errorf("state = %+v, want %+v", c.Header.State, state)
	}
	other, err := NewStep(backend, StepConfig{Model: testStepConfig(MLP).Model, Loss: DefaultLossConfig(),
		Optimizer: OptimizerConfig{Kind: SGDMomentum, Momentum: 0.9}, InitSeed: 99}, 4, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Finalize()
	if err := c.Restore(other); err != nil {
		t.Fatal(err)
	}
	for v := range s.Store().IterVariables() {
		o := other.Store().GetVariable(v.Path())
		if o == nil || o.Trainable != v.Trainable || !o.MustValue().Equal(v.MustValue()) {
			t.Errorf("variable %s did not come back", v.Path())
		}
	}
}

// TestProgressShowsTheRun: on a terminal the bar shows the key metrics with epochs counted
// from 1 (the log's 0-based index + 1) of the run's, a kNN evaluation shows its own progress
// after the epochs completed, and the bar reaches 100% on a line of its own; a copy of the
// log (--json) still gets the JSON lines whole.
func TestProgressShowsTheRun(t *testing.T) {
	var console, log bytes.Buffer
	opts := quietOptions(t, mustMemorySource(t, syntheticPairs(5, 8, 2, 4, 4, 1)))
	opts.Progress = progress.Options{W: &console, Mode: progress.Bar}
	opts.Log = &log
	opts.Monitor = func(_ context.Context, epoch int, _ *Step, p *progress.Reporter) (map[string]any, error) {
		sub := p.Sub(fmt.Sprintf("kNN monitor after epoch %d", epoch), 3, "images")
		sub.Add(3)
		sub.Finish()
		return map[string]any{"knn_top1": 50.0}, nil
	}
	run := testRunConfig(t, t.TempDir())
	run.MonitorEvery = 1
	if _, err := Train(context.Background(), testStepConfig(MLP), run, opts); err != nil {
		t.Fatal(err)
	}
	var lines []LogLine
	for _, l := range strings.Split(strings.TrimSpace(log.String()), "\n") {
		if strings.Contains(l, `"loss"`) {
			var line LogLine
			mustUnmarshal(t, l, &line)
			lines = append(lines, line)
		}
	}
	if len(lines) != 4 {
		t.Fatalf("the log's copy has %d step lines, want 4:\n%s", len(lines), log.String())
	}
	s := console.String()
	last := lines[len(lines)-1]
	for _, want := range []string{
		fmt.Sprintf("epoch %d/%d loss", last.Epoch+1, run.Epochs), // the log's index + 1
		"lr ", "img/s",
		"kNN monitor after epoch 1 [>", // the monitor's own bar, after the first epoch
		"knn_top1 50",                  // its result, in the training's status
		"[====================] 100% 4/4 steps",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("the console lacks %q:\n%q", want, s)
		}
	}
	if !strings.HasSuffix(s, "\n") || strings.Contains(s, "{") {
		t.Errorf("the console does not end its line, or got JSON:\n%q", s)
	}
}

// TestTrainStopsOnNaN: a learning rate that blows the weights up ends the run with an error
// that says what to do and which checkpoint to go back to (or that there is none), and no
// checkpoint of the broken state.
func TestTrainStopsOnNaN(t *testing.T) {
	for _, tc := range []struct {
		name            string
		checkpointEvery int
		want            string
	}{
		{"no checkpoint yet", 0, "no checkpoint was written before it"},
		{"a checkpoint before", 1, "step-000000001.safetensors, is from step 1, before it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			run := testRunConfig(t, out)
			run.BaseLR = 1e30
			run.CheckpointEvery = tc.checkpointEvery
			_, err := Train(context.Background(), testStepConfig(MLP), run, quietOptions(t, mustMemorySource(t, syntheticPairs(6, 12, 2, 4, 4, 1))))
			if err == nil || !strings.Contains(err.Error(), "Lower --lr") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want the NaN loss reported with %q", err, tc.want)
			}
			if paths, _, _ := ListCheckpoints(context.Background(), out); len(paths) != tc.checkpointEvery {
				t.Errorf("checkpoints %v: want only those from before the loss diverged", paths)
			}
		})
	}
}

// TestResumeAfterCrashKeepsTheLogExact: a run killed after its last checkpoint leaves log
// lines of steps it will redo; the resumed run drops them, so each step is logged once.
func TestResumeAfterCrashKeepsTheLogExact(t *testing.T) {
	src := mustMemorySource(t, syntheticPairs(7, 12, 2, 4, 4, 1))
	out := t.TempDir()
	run := testRunConfig(t, out)
	run.MaxSteps, run.CheckpointEvery, run.KeepCheckpoints = 3, 2, 0
	if _, err := Train(context.Background(), testStepConfig(MLP), run, quietOptions(t, src)); err != nil {
		t.Fatal(err)
	}
	// The crash: the checkpoint of step 3 never got written.
	if err := os.Remove(filepath.Join(out, CheckpointDir, CheckpointName(3))); err != nil {
		t.Fatal(err)
	}
	run.MaxSteps = 0
	// A fresh run into the folder is refused: it would mix two runs' checkpoints.
	_, err := Train(context.Background(), testStepConfig(MLP), run, quietOptions(t, src))
	var setup *SetupError
	if !errors.As(err, &setup) || !strings.Contains(err.Error(), "already holds checkpoints") {
		t.Fatalf("fresh run into a run's folder: %v", err)
	}
	opts := quietOptions(t, src)
	opts.Resume = out
	if _, err := Train(context.Background(), testStepConfig(MLP), run, opts); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(out, LogName))
	if err != nil {
		t.Fatal(err)
	}
	var steps []int
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var line LogLine
		mustUnmarshal(t, l, &line)
		steps = append(steps, line.Step)
	}
	if want := []int{1, 2, 3, 4, 5, 6}; !slices.Equal(steps, want) {
		t.Errorf("logged steps %v, want %v", steps, want)
	}
}

// TestLoadsGoMLXv026Checkpoint: a checkpoint written by this package on GoMLX v0.26
// (testdata: resnet18-cifar at width 1, 8×8 RGB, after two steps of RandomBatch(10) and
// RandomBatch(11) at lr 0.01) restores every variable, optimiser state included, into a step
// built on the current GoMLX: no variable is left over or created, and a third step
// (RandomBatch(12), lr 0.01, which reads the momentum buffers) gives the loss and features
// the v0.26 code gave.
func TestLoadsGoMLXv026Checkpoint(t *testing.T) {
	const path = "testdata/gomlx-v0.26-resnet18-cifar.dclckpt"
	c, err := ReadCheckpoint(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if c.Header.Step.Precision != "" {
		t.Fatalf("a v0.26 checkpoint has precision %q, want none (float32)", c.Header.Step.Precision)
	}
	s, err := NewStep(newTestBackend(t), c.Header.Step, c.Header.State.ImageHeight, c.Header.State.ImageWidth)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Finalize()
	if s.Config().Precision != Float32 {
		t.Errorf("precision %q, want %q", s.Config().Precision, Float32)
	}
	before := s.Store().NumVariables()
	if len(c.Header.Variables) != before {
		t.Errorf("checkpoint has %d variables, the step %d", len(c.Header.Variables), before)
	}
	if err := c.Restore(s); err != nil {
		t.Fatal(err)
	}
	if after := s.Store().NumVariables(); after != before {
		t.Errorf("restoring created %d variables the step does not have: their paths changed", after-before)
	}
	res, err := s.Run(RandomBatch(12, 3, 8, 8, 3), 0.01)
	if err != nil {
		t.Fatal(err)
	}
	// Printed by the v0.26 code (float32 values, shortest representation).
	const wantLoss = 1.633339762687683
	wantFeatures := [][]float32{
		{0, 0.059511248, 0.7548839, 0, 0, 0.6746236, 0.008341268, 0.52941746},
		{0, 0.04268024, 0.5765617, 0, 0, 0.68751055, 0.0058354884, 0.7653162},
	}
	wantProjection := [][]float32{
		{0.021943595, 0.763327, 0.52243006, -0.095736854},
		{-0.008178398, 0.7909602, 0.536929, -0.111503206},
	}
	if math.Abs(res.Loss-wantLoss) > 1e-5 {
		t.Errorf("third step's loss %v, v0.26 gave %v", res.Loss, wantLoss)
	}
	imgs := RandomBatch(13, 2, 8, 8, 3)
	feats, proj, err := s.Features(imgs.View1, 2, 8, 8, 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		got, want [][]float32
	}{{"feature", feats, wantFeatures}, {"projection", proj, wantProjection}} {
		for i := range tc.want {
			for j := range tc.want[i] {
				if d := math.Abs(float64(tc.got[i][j] - tc.want[i][j])); d > 1e-5 {
					t.Errorf("%s[%d][%d] = %v, v0.26 gave %v", tc.name, i, j, tc.got[i][j], tc.want[i][j])
				}
			}
		}
	}
}

// TestResumeFinishedRunChangesNothing: resuming a run that has finished is a no-op that says
// so: the summary, the log and the checkpoints stay as they were (it once rewrote
// summary.json with zeros).
func TestResumeFinishedRunChangesNothing(t *testing.T) {
	src := mustMemorySource(t, syntheticPairs(8, 12, 3, 8, 8, 1))
	out := t.TempDir()
	cfg := testStepConfig(SmallCNN)
	ctx := context.Background()
	first, err := Train(ctx, cfg, testRunConfig(t, out), quietOptions(t, src))
	if err != nil {
		t.Fatal(err)
	}
	read := func(name string) []byte {
		data, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	summary, log := read(SummaryName), read(LogName)
	paths, _, err := ListCheckpoints(ctx, out)
	if err != nil {
		t.Fatal(err)
	}
	var notices bytes.Buffer
	opts := quietOptions(t, src)
	opts.Resume = out
	opts.Logger = slog.New(slog.NewTextHandler(&notices, nil))
	again, err := Train(ctx, cfg, testRunConfig(t, out), opts)
	if err != nil {
		t.Fatal(err)
	}
	if again.Loss != first.Loss || again.StepsDone != first.StepsDone || !again.Finished || again.ImagesPerSec != first.ImagesPerSec {
		t.Errorf("resuming the finished run returned %+v, want the run's own summary %+v", again, first)
	}
	if !bytes.Equal(read(SummaryName), summary) || !bytes.Equal(read(LogName), log) {
		t.Error("resuming the finished run rewrote its summary or its log")
	}
	if now, _, _ := ListCheckpoints(ctx, out); !slices.Equal(now, paths) {
		t.Errorf("checkpoints %v became %v", paths, now)
	}
	if !strings.Contains(notices.String(), "already finished") {
		t.Errorf("no notice that the run is finished: %q", notices.String())
	}

	// Killed between its final checkpoint and its summary, before it pruned an older
	// checkpoint: resuming prunes it and writes the summary, with the run's figures (the
	// throughput aside, which only the killed process knew).
	if err := os.Remove(filepath.Join(out, SummaryName)); err != nil {
		t.Fatal(err)
	}
	run := testRunConfig(t, out)
	if len(paths) != 1 || run.KeepCheckpoints != 2 {
		t.Fatalf("the test wants one checkpoint kept of two, has %d of %d", len(paths), run.KeepCheckpoints)
	}
	var older []string
	for step := range 2 { // older than the final one, as if written by earlier checkpoints
		older = append(older, filepath.Join(out, CheckpointDir, CheckpointName(step)))
		if err := os.WriteFile(older[step], read(filepath.Join(CheckpointDir, filepath.Base(paths[0]))), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Train(ctx, cfg, run, opts); err != nil {
		t.Fatal(err)
	}
	if now, _, _ := ListCheckpoints(ctx, out); !slices.Equal(now, []string{older[1], paths[0]}) {
		t.Errorf("after a kill before the final pruning, resuming left checkpoints %v, want the two newest", now)
	}
	var rebuilt Summary
	mustUnmarshal(t, string(read(SummaryName)), &rebuilt)
	want := *first
	want.ImagesPerSec = 0
	if !reflect.DeepEqual(rebuilt, want) {
		t.Errorf("rebuilt summary %+v, want %+v", rebuilt, want)
	}
	if !bytes.Equal(read(LogName), log) {
		t.Error("rebuilding the summary changed the log")
	}
}

// TestResumeKeepsInitSeed: a resumed run keeps the initial-weight seed it started with; an
// explicit other one is refused rather than written into headers that would then lie.
func TestResumeKeepsInitSeed(t *testing.T) {
	src := mustMemorySource(t, syntheticPairs(8, 12, 3, 8, 8, 1))
	cfg := testStepConfig(SmallCNN)
	ctx := context.Background()
	_, out, run := stoppedRun(t, cfg, src)
	other := cfg
	other.InitSeed = cfg.InitSeed + 2
	var setup *SetupError
	if err := CheckRun(ctx, other, run, src.Info(), out); !errors.As(err, &setup) || !strings.Contains(err.Error(), "seed 7, not 9") {
		t.Errorf("resuming with another --init-seed: %v, want a setup error naming both seeds", err)
	}
	unset := cfg
	unset.InitSeed = 0
	opts := quietOptions(t, src)
	opts.Resume = out
	sum, err := Train(ctx, unset, run, opts)
	if err != nil {
		t.Fatal(err)
	}
	h, err := ReadCheckpointHeader(ctx, sum.Checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	if h.Step.InitSeed != cfg.InitSeed {
		t.Errorf("the resumed run's header says init seed %d, want the run's %d", h.Step.InitSeed, cfg.InitSeed)
	}
}

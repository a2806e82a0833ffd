package trainstep

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/tensorboard"
)

// packConfigs are three runs that share a model and differ in everything else a pack lets
// them: the loss (InfoNCE, DCL, DCLW), the initial weights' seed, the temperature, the
// weight decay and the momentum.
func packConfigs(model string) []StepConfig {
	var cfgs []StepConfig
	for i, loss := range []LossKind{InfoNCE, DCL, DCLW} {
		cfg := testStepConfig(model)
		cfg.Model.Channels, cfg.Model.ProjectionDim = 1, 8
		cfg.Loss = LossConfig{Kind: loss, Temperature: []float64{0.2, 0.5, 0.2}[i]}
		cfg.InitSeed = []uint64{7, 8, 8}[i]
		cfg.Optimizer.WeightDecay = []float64{5e-4, 1e-4, 5e-4}[i]
		cfg.Optimizer.Momentum = []float64{0.9, 0.9, 0.8}[i]
		cfgs = append(cfgs, cfg)
	}
	return cfgs
}

// packCompare is how a packed run's results must agree with the run's alone: bit for bit
// (nil), or within a relative tolerance.
type packCompare func(what string, packed, alone float64) error

func bitForBit(what string, packed, alone float64) error {
	if math.Float64bits(packed) != math.Float64bits(alone) {
		return fmt.Errorf("%s: packed %v, alone %v", what, packed, alone)
	}
	return nil
}

// TestPackedStepEqualsRunsAlone: three runs trained in one PackedStep (InfoNCE, DCL and DCLW;
// two initial seeds; two temperatures; their own learning rates and batches) compute at every
// step the loss and mean q each computes alone, and end with the same weights, batch-norm
// running averages and momentum, bit for bit.
func TestPackedStepEqualsRunsAlone(t *testing.T) {
	testPackedStepEqualsRunsAlone(t, bitForBit, func(t *testing.T, name string, packed, alone []byte) {
		if string(packed) != string(alone) {
			t.Errorf("%s differs between the packed run and the run alone", name)
		}
	})
}

func testPackedStepEqualsRunsAlone(t *testing.T, same packCompare, sameVariable func(t *testing.T, name string, packed, alone []byte)) {
	backend := newTestBackend(t)
	cfgs := packConfigs(SmallCNN)
	build := func(cfg StepConfig) *Step {
		s, err := NewStep(backend, cfg, 8, 8)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Finalize)
		return s
	}
	const steps = 4
	batch := func(run, step int) *Batch { return RandomBatch(uint64(100*run+step), 4, 8, 8, 1) }
	lr := func(run, step int) float64 { return 0.05 * float64(run+1) / float64(step+1) }

	var alone, packed []*Step
	for _, cfg := range cfgs {
		alone = append(alone, build(cfg))
		packed = append(packed, build(cfg))
	}
	pack, err := NewPackedStep(packed...)
	if err != nil {
		t.Fatal(err)
	}
	defer pack.Finalize()
	for step := range steps {
		batches := make([]*Batch, len(cfgs))
		lrs := make([]float64, len(cfgs))
		for k := range cfgs {
			batches[k], lrs[k] = batch(k, step), lr(k, step)
		}
		pending, err := pack.Launch(batches, lrs)
		if err != nil {
			t.Fatal(err)
		}
		for k, s := range alone {
			want, err := s.Run(batches[k], lrs[k])
			if err != nil {
				t.Fatal(err)
			}
			got, err := pending[k].Wait()
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range []error{
				same(fmt.Sprintf("run %d (%s) step %d loss", k, cfgs[k].Loss.Kind, step+1), got.Loss, want.Loss),
				same(fmt.Sprintf("run %d (%s) step %d mean q", k, cfgs[k].Loss.Kind, step+1), got.MeanQ, want.MeanQ),
			} {
				if e != nil {
					t.Error(e)
				}
			}
		}
	}
	for k := range cfgs {
		if err := pack.Sync(k); err != nil {
			t.Fatal(err)
		}
		a, p := storeBytes(t, alone[k]), storeBytes(t, packed[k])
		if len(a) != len(p) {
			t.Fatalf("run %d: %d variables alone, %d packed", k, len(a), len(p))
		}
		for name, want := range a {
			sameVariable(t, fmt.Sprintf("run %d (%s) %s", k, cfgs[k].Loss.Kind, name), p[name], want)
		}
	}
}

// TestCanPack: in-batch training packs; MoCo, whose momentum encoder is found by the model's
// paths in the store, is refused by name.
func TestCanPack(t *testing.T) {
	cfg := testStepConfig(MLP)
	if err := CanPack(cfg); err != nil {
		t.Errorf("simclr: %v", err)
	}
	cfg.Method = MoCoMethod
	if err := CanPack(cfg); err == nil {
		t.Error("moco packs; want it to train alone")
	}
}

// packRuns are three runs of packConfigs on src, each into its own folder under dir: two
// data-order seeds, a learning rate of their own, a checkpoint every 3 steps.
// Their log goes to log.
func packRuns(t *testing.T, model string, src BatchSource, dir string, log *bytes.Buffer) []PackRun {
	t.Helper()
	opts := quietOptions(t, src)
	opts.Logger = slog.New(slog.NewTextHandler(log, nil))
	var runs []PackRun
	for i, cfg := range packConfigs(model) {
		run := testRunConfig(t, filepath.Join(dir, fmt.Sprint("run", i)))
		run.Seed = []uint64{11, 12, 12}[i]
		run.BaseLR = []float64{0.5, 0.3, 0.5}[i]
		run.CheckpointEvery = 3
		runs = append(runs, PackRun{Step: cfg, Run: run, Opts: opts})
	}
	return runs
}

// trainedTogether fails t unless log says a pack of n runs trained.
func trainedTogether(t *testing.T, log *bytes.Buffer, n int) {
	t.Helper()
	if want := fmt.Sprintf("msg=\"training runs together, one compiled step for all\" runs=%d", n); !strings.Contains(log.String(), want) {
		t.Fatalf("no pack of %d runs trained; the log:\n%s", n, log)
	}
}

// stepLosses reads the loss and mean q of every step of a run's log, by step.
func stepLosses(t *testing.T, out string) map[int][2]float64 {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(out, LogName))
	if err != nil {
		t.Fatal(err)
	}
	losses := map[int][2]float64{}
	for line := range bytes.Lines(data) {
		var l LogLine
		if err := json.Unmarshal(line, &l); err != nil {
			t.Fatalf("%s: %v", out, err)
		}
		if l.Step > 0 {
			if _, twice := losses[l.Step]; twice {
				t.Errorf("%s logs step %d twice", out, l.Step)
			}
			losses[l.Step] = [2]float64{l.Loss, l.MeanQ}
		}
	}
	return losses
}

// samePackedRun compares a packed run's folder with the run's alone: every step's loss and
// mean q, the final checkpoint's variables, and the summary's figures.
func samePackedRun(t *testing.T, packed, alone string, same packCompare) {
	t.Helper()
	p, a := stepLosses(t, packed), stepLosses(t, alone)
	if len(p) != len(a) || len(a) == 0 {
		t.Fatalf("%s logs %d steps, the run alone %d", packed, len(p), len(a))
	}
	for step, want := range a {
		for i, what := range []string{"loss", "mean q"} {
			if err := same(fmt.Sprintf("%s step %d %s", packed, step, what), p[step][i], want[i]); err != nil {
				t.Error(err)
			}
		}
	}
	var ps, as Summary
	for _, s := range []struct {
		dir string
		sum *Summary
	}{{packed, &ps}, {alone, &as}} {
		data, err := os.ReadFile(filepath.Join(s.dir, SummaryName))
		if err != nil {
			t.Fatal(err)
		}
		mustUnmarshal(t, string(data), s.sum)
	}
	if ps.StepsDone != as.StepsDone || !ps.Finished || ps.Epoch != as.Epoch {
		t.Errorf("%s: summary %+v, alone %+v", packed, ps, as)
	}
	pv, av := variableBytes(t, ps.Checkpoint), variableBytes(t, as.Checkpoint)
	if len(pv) != len(av) {
		t.Fatalf("%s: %d variables, alone %d", packed, len(pv), len(av))
	}
	for name, want := range av {
		if !bytes.Equal(pv[name], want) {
			t.Errorf("%s: variable %s differs from the run alone's", packed, name)
		}
	}
	if ents, err := os.ReadDir(filepath.Join(packed, tensorboard.Dir)); err != nil || len(ents) == 0 {
		t.Errorf("%s: no TensorBoard file (%v)", packed, err)
	}
}

// TestTrainPackedEqualsTrainAlone: three runs trained by TrainPacked (InfoNCE, DCL and DCLW,
// two seeds, two temperatures, two learning rates) log every step's loss and mean q, write
// checkpoints and summaries, exactly as each trained alone by Train.
func TestTrainPackedEqualsTrainAlone(t *testing.T) {
	src := mustMemorySource(t, syntheticPairs(1, 22, 3, 8, 8, 1)) // 5 steps per epoch
	ctx := context.Background()
	alone, packed := t.TempDir(), t.TempDir()
	var log bytes.Buffer
	runs := packRuns(t, SmallCNN, src, alone, &log)
	for _, r := range runs {
		if _, err := Train(ctx, r.Step, r.Run, r.Opts); err != nil {
			t.Fatal(err)
		}
	}
	for i, res := range TrainPacked(ctx, packRuns(t, SmallCNN, src, packed, &log)) {
		if res.Err != nil || res.Summary == nil || !res.Summary.Finished {
			t.Fatalf("packed run %d: %+v", i, res)
		}
	}
	trainedTogether(t, &log, len(runs))
	for i := range runs {
		samePackedRun(t, filepath.Join(packed, fmt.Sprint("run", i)), filepath.Join(alone, fmt.Sprint("run", i)), bitForBit)
	}
}

// trainPackedOK runs TrainPacked and fails t on any run's error.
func trainPackedOK(t *testing.T, ctx context.Context, runs []PackRun) []PackResult {
	t.Helper()
	res := TrainPacked(ctx, runs)
	for i, r := range res {
		if r.Err != nil {
			t.Fatalf("packed run %d: %v", i, r.Err)
		}
	}
	return res
}

// TestTrainPackedResumes: a pack stopped part-way, by max-steps and by a cancelled context
// (Ctrl-C), resumes to the bits of an uninterrupted pack, which are those of each run alone;
// and a pack killed between two of its runs' checkpoints resumes every run from the step all
// of them have, still to the same bits.
func TestTrainPackedResumes(t *testing.T) {
	src := mustMemorySource(t, syntheticPairs(1, 22, 3, 8, 8, 1))
	ctx := context.Background()
	var log bytes.Buffer
	whole := t.TempDir()
	trainPackedOK(t, ctx, packRuns(t, SmallCNN, src, whole, &log))
	resumeAll := func(runs []PackRun) []PackRun {
		for i := range runs {
			runs[i].Run.MaxSteps = 0
			runs[i].Opts.Resume = runs[i].Run.Out
		}
		return runs
	}
	check := func(t *testing.T, dir string) {
		for i := range 3 {
			samePackedRun(t, filepath.Join(dir, fmt.Sprint("run", i)), filepath.Join(whole, fmt.Sprint("run", i)), bitForBit)
		}
	}

	t.Run("max-steps", func(t *testing.T) {
		dir := t.TempDir()
		runs := packRuns(t, SmallCNN, src, dir, &log)
		for i := range runs {
			runs[i].Run.MaxSteps = 4
		}
		for i, r := range trainPackedOK(t, ctx, runs) {
			if r.Summary.Finished || r.Summary.StepsDone != 4 {
				t.Fatalf("run %d stopped at %+v, want 4 steps", i, r.Summary)
			}
		}
		log.Reset()
		trainPackedOK(t, ctx, resumeAll(runs))
		trainedTogether(t, &log, 3)
		check(t, dir)
	})

	t.Run("cancelled", func(t *testing.T) {
		dir := t.TempDir()
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		runs := packRuns(t, SmallCNN, &cancelAfter{BatchSource: src, n: 14, cancel: cancel}, dir, &log)
		for i, r := range TrainPacked(cctx, runs) {
			if !errors.Is(r.Err, context.Canceled) || !strings.Contains(r.Err.Error(), "--resume") || r.Summary == nil || r.Summary.Checkpoint == "" {
				t.Fatalf("interrupted run %d: %+v, want context.Canceled, a checkpoint and a hint to resume", i, r)
			}
		}
		runs = resumeAll(runs)
		for i := range runs {
			runs[i].Opts.Source = src
		}
		trainPackedOK(t, ctx, runs)
		check(t, dir)
	})

	t.Run("killed between checkpoints", func(t *testing.T) {
		dir := t.TempDir()
		runs := packRuns(t, SmallCNN, src, dir, &log)
		for i := range runs {
			runs[i].Run.MaxSteps = 6 // checkpoints at steps 3 and 6
		}
		trainPackedOK(t, ctx, runs)
		// Killed after run 0 wrote its step-6 checkpoint, before run 1 wrote its.
		for _, i := range []int{1, 2} {
			if err := os.Remove(filepath.Join(runs[i].Run.Out, CheckpointDir, CheckpointName(6))); err != nil {
				t.Fatal(err)
			}
		}
		log.Reset()
		trainPackedOK(t, ctx, resumeAll(runs))
		trainedTogether(t, &log, 3)
		check(t, dir)
	})
}

// TestTrainPackedRunFailsAlone: a run of a pack whose loss diverges fails with the error it
// would have alone; the other runs finish in a pack without it, as they would alone.
func TestTrainPackedRunFailsAlone(t *testing.T) {
	src := mustMemorySource(t, syntheticPairs(1, 22, 3, 8, 8, 1))
	ctx := context.Background()
	var log bytes.Buffer
	alone, packed := t.TempDir(), t.TempDir()
	runs := packRuns(t, SmallCNN, src, alone, &log)
	for _, r := range runs[1:] {
		if _, err := Train(ctx, r.Step, r.Run, r.Opts); err != nil {
			t.Fatal(err)
		}
	}
	runs = packRuns(t, SmallCNN, src, packed, &log)
	runs[0].Run.BaseLR = 1e30
	res := TrainPacked(ctx, runs)
	if err := res[0].Err; err == nil || !strings.Contains(err.Error(), "Lower --lr") {
		t.Fatalf("diverging run: %+v, want its loss reported as not finite", res[0])
	}
	for i := 1; i < 3; i++ {
		if res[i].Err != nil {
			t.Fatalf("run %d: %v", i, res[i].Err)
		}
		samePackedRun(t, filepath.Join(packed, fmt.Sprint("run", i)), filepath.Join(alone, fmt.Sprint("run", i)), bitForBit)
	}
}

// TestTrainMemory: the estimate of a step's memory counts the weights' copies and grows with
// the batch and the image size.
func TestTrainMemory(t *testing.T) {
	cfg := testStepConfig(SmallCNN)
	small, err := TrainMemory(cfg, 8, 16, 16, 1)
	if err != nil {
		t.Fatal(err)
	}
	for what, bigger := range map[string][4]int{"batch": {16, 16, 16, 1}, "image size": {8, 32, 32, 1}, "channels": {8, 16, 16, 3}} {
		b, err := TrainMemory(cfg, bigger[0], bigger[1], bigger[2], bigger[3])
		if err != nil {
			t.Fatal(err)
		}
		if b <= small {
			t.Errorf("a larger %s takes %d bytes, the smaller %d", what, b, small)
		}
	}
	wide := cfg
	wide.Model.BaseWidth = 4 * max(cfg.Model.BaseWidth, 8)
	if w, err := TrainMemory(wide, 8, 16, 16, 1); err != nil || w <= small {
		t.Errorf("a wider model takes %d bytes (%v), the narrower %d", w, err, small)
	}
	if _, err := TrainMemory(cfg, 0, 16, 16, 1); err == nil {
		t.Error("no error for a batch of 0")
	}
}

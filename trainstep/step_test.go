package trainstep

import (
	"context"
	"math"
	"testing"
)

// TestEveryModelTrainsOneStep runs forward, backward and the update of every model at a tiny
// size and checks that the loss is finite, q in (0, 1), and every trainable variable moved.
func TestEveryModelTrainsOneStep(t *testing.T) {
	backend := newTestBackend(t)
	for _, tc := range []struct {
		model   string
		width   int
		size, c int
	}{
		{SmallCNN, 4, 8, 1},
		{ResNet18CIFAR, 2, 8, 3},
		{ResNet50, 1, 16, 3},
		{MLP, 4, 5, 3},
	} {
		t.Run(tc.model, func(t *testing.T) {
			cfg := testStepConfig(tc.model)
			cfg.Model.BaseWidth, cfg.Model.Channels, cfg.Model.ProjectionDim = tc.width, tc.c, 8
			s, err := NewStep(backend, cfg, tc.size, tc.size)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Finalize()
			before := map[string][]byte{}
			for v := range s.Store().IterVariables() {
				if v.Trainable {
					v.MustValue().ConstBytes(func(b []byte) { before[v.Path()] = append([]byte(nil), b...) })
				}
			}
			res, err := s.Run(RandomBatch(2, 4, tc.size, tc.size, tc.c), 0.1)
			if err != nil {
				t.Fatal(err)
			}
			if math.IsNaN(res.Loss) || math.IsInf(res.Loss, 0) || !(res.MeanQ > 0 && res.MeanQ < 1) {
				t.Errorf("step: %+v", res)
			}
			for v := range s.Store().IterVariables() {
				if !v.Trainable {
					continue
				}
				var same bool
				v.MustValue().ConstBytes(func(b []byte) { same = string(b) == string(before[v.Path()]) })
				if same {
					t.Errorf("variable %s did not change in a step", v.Path())
				}
			}
		})
	}
}

// TestSmallCNNResumeIsBitIdentical is the resume test on the convolutional model the demo
// trains, on the CPU backend.
func TestSmallCNNResumeIsBitIdentical(t *testing.T) {
	src := mustMemorySource(t, syntheticPairs(3, 18, 3, 8, 8, 1), syntheticPairs(4, 18, 3, 8, 8, 1))
	ctx := context.Background()
	whole := t.TempDir()
	sum, err := Train(ctx, testStepConfig(SmallCNN), testRunConfig(t, whole), quietOptions(t, src))
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	run := testRunConfig(t, out)
	run.MaxSteps = 5
	if _, err := Train(ctx, testStepConfig(SmallCNN), run, quietOptions(t, src)); err != nil {
		t.Fatal(err)
	}
	run.MaxSteps = 0
	opts := quietOptions(t, src)
	opts.Resume = out
	resumed, err := Train(ctx, testStepConfig(SmallCNN), run, opts)
	if err != nil {
		t.Fatal(err)
	}
	sameBytes(t, variableBytes(t, sum.Checkpoint), variableBytes(t, resumed.Checkpoint))
}

// TestLaunchedStepsMatchRun: steps launched ahead and read late (the training loop's order)
// give the losses and variables of steps run one at a time; a result is read once.
func TestLaunchedStepsMatchRun(t *testing.T) {
	backend := newTestBackend(t)
	cfg := testStepConfig(SmallCNN)
	cfg.Model.BaseWidth, cfg.Model.Channels, cfg.Model.ProjectionDim = 4, 1, 8
	batches := []*Batch{RandomBatch(1, 4, 8, 8, 1), RandomBatch(2, 4, 8, 8, 1), RandomBatch(3, 4, 8, 8, 1)}
	one, err := NewStep(backend, cfg, 8, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer one.Finalize()
	var want []StepResult
	for _, b := range batches {
		r, err := one.Run(b, 0.1)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, r)
	}
	ahead, err := NewStep(backend, cfg, 8, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer ahead.Finalize()
	var pending []*PendingStep
	for _, b := range batches {
		p, err := ahead.Launch(b, 0.1)
		if err != nil {
			t.Fatal(err)
		}
		pending = append(pending, p)
	}
	for i, p := range pending {
		got, err := p.Wait()
		if err != nil || got != want[i] {
			t.Errorf("step %d launched ahead: %+v, %v; one at a time: %+v", i+1, got, err, want[i])
		}
		if _, err := p.Wait(); err == nil {
			t.Errorf("step %d: a second Wait read its results again", i+1)
		}
	}
	a, b := storeBytes(t, one), storeBytes(t, ahead)
	for k := range a {
		if string(a[k]) != string(b[k]) {
			t.Errorf("variable %s differs", k)
		}
	}
}

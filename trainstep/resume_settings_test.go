package trainstep

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
)

// TestResumeRefusesChangedSettings: a resumed run with another loss, τ, reduction, lr,
// optimiser, momentum, weight decay, warm-up or fewer epochs would train a hybrid of two runs:
// each is refused before any step, naming the setting with its old and new value (all of
// them when several change).
func TestResumeRefusesChangedSettings(t *testing.T) {
	src := mustMemorySource(t, syntheticPairs(8, 12, 3, 8, 8, 1))
	cfg := testStepConfig(SmallCNN)
	_, out, run := stoppedRun(t, cfg, src)
	tests := []struct {
		name string
		edit func(*StepConfig, *RunConfig)
		want []string
	}{
		{"loss", func(c *StepConfig, _ *RunConfig) { c.Loss.Kind = InfoNCE }, []string{`loss {"kind":"dcl"`, `→{"kind":"infonce"`}},
		{"temperature", func(c *StepConfig, _ *RunConfig) { c.Loss.Temperature = 0.5 }, []string{`"temperature":0.2`, `"temperature":0.5`}},
		{"reduction", func(c *StepConfig, _ *RunConfig) { c.Loss.Reduction = Sum }, []string{`"reduction":"sum"`}},
		{"lr", func(_ *StepConfig, r *RunConfig) { r.BaseLR = 0.1 }, []string{"lr 0.5→0.1"}},
		{"optimizer", func(c *StepConfig, _ *RunConfig) { c.Optimizer.Kind = LARS }, []string{`optimizer {"kind":"sgd"`, `→{"kind":"lars"`}},
		{"weight decay", func(c *StepConfig, _ *RunConfig) { c.Optimizer.WeightDecay = 0 }, []string{`"weight_decay":0.0005`, `"weight_decay":0}`}},
		{"momentum", func(c *StepConfig, _ *RunConfig) { c.Optimizer.Momentum = 0.5 }, []string{`"momentum":0.5`}},
		{"warm-up", func(_ *StepConfig, r *RunConfig) { r.WarmupEpochs = 1 }, []string{"warmup_epochs 0.5→1"}},
		{"fewer epochs", func(_ *StepConfig, r *RunConfig) { r.Epochs = 1 }, []string{"epochs 2→1 (--epochs may only extend a run)"}},
		{"several", func(c *StepConfig, r *RunConfig) { c.Loss.Kind = InfoNCE; r.BaseLR = 0.1 }, []string{"loss", "lr 0.5→0.1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, r := cfg, run
			tt.edit(&c, &r)
			err := CheckRun(context.Background(), c, r, src.Info(), out)
			var setup *SetupError
			if !errors.As(err, &setup) || !strings.Contains(err.Error(), "was trained with other settings") {
				t.Fatalf("got %v, want a setup error", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v does not mention %q", err, w)
				}
			}
		})
	}
	// What does not change the run is free: how often to checkpoint and how many to keep.
	free := run
	free.CheckpointEvery, free.KeepCheckpoints = 1, 5
	if err := CheckRun(context.Background(), cfg, free, src.Info(), out); err != nil {
		t.Errorf("checkpoint settings: %v", err)
	}
}

// TestResumeExtendsWithMoreEpochs: more --epochs is the one change a resume takes: the run
// goes on to the new total, the log says so, and every later checkpoint's header records the
// epochs it had before (twice extended: both, oldest first).
func TestResumeExtendsWithMoreEpochs(t *testing.T) {
	src := mustMemorySource(t, syntheticPairs(8, 12, 3, 8, 8, 1))
	cfg := testStepConfig(SmallCNN)
	ctx := context.Background()
	out := t.TempDir()
	if _, err := Train(ctx, cfg, testRunConfig(t, out), quietOptions(t, src)); err != nil {
		t.Fatal(err)
	}
	for i, epochs := range []int{3, 4} {
		run := testRunConfig(t, out)
		run.Epochs = epochs
		var notices bytes.Buffer
		opts := quietOptions(t, src)
		opts.Resume = out
		opts.Logger = slog.New(slog.NewTextHandler(&notices, nil))
		sum, err := Train(ctx, cfg, run, opts)
		if err != nil {
			t.Fatal(err)
		}
		if !sum.Finished || sum.StepsDone != sum.StepsPerEpoch*epochs {
			t.Errorf("extended to %d epochs: %+v", epochs, sum)
		}
		if !strings.Contains(notices.String(), "extending the run") || !strings.Contains(notices.String(), "epochs_before="+[]string{"2", "3"}[i]) {
			t.Errorf("no notice of the extension: %q", notices.String())
		}
		h, err := ReadCheckpointHeader(ctx, sum.Checkpoint)
		if err != nil {
			t.Fatal(err)
		}
		if want := []int{2, 3}[:i+1]; h.Run == nil || h.Run.Epochs != epochs || !slices.Equal(h.Run.ExtendedFrom, want) {
			t.Errorf("header run %+v, want epochs %d extended from %v", h.Run, epochs, want)
		}
	}
}

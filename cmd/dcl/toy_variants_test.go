package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/gomlx/gomlx/core/graph"

	"github.com/dcl-beam/dcl-beam/internal/registry"
	"github.com/dcl-beam/dcl-beam/reproduce"
	"github.com/dcl-beam/dcl-beam/trainstep"
)

// This file is the whole of a loss with a parameter of its own and a method with a setting of
// its own: each is one registration, and the command line's flags, a reproduce config's keys,
// the checks and resume come from the declarations without another file knowing them.

// toyMarginLoss is DCL with a margin m on the positive: log U − (s − m).
const toyMarginLoss trainstep.LossKind = "toy-margin"

func registerToyMarginLoss(t *testing.T) {
	trainstep.RegisterLoss(trainstep.LossSpec{
		Kind: toyMarginLoss, Display: "toy margin DCL",
		Params: []registry.Param{{Name: "toy_margin", Default: 0.25, Doc: "margin subtracted from the positive's logit",
			Check: registry.InRange(0, 1)}},
		PerAnchor: func(t trainstep.AnchorTerms, cfg trainstep.LossConfig) (*Node, *Node) {
			return Sub(t.LogU, AddScalar(t.Pos, -cfg.Params.Float("toy_margin"))), nil
		},
	})
	t.Cleanup(func() { trainstep.UnregisterLoss(toyMarginLoss) })
}

// toyScaledMethod is in-batch training with the loss scaled by a setting.
const toyScaledMethod = "toy-scaled"

type toyScaled struct{ scale float64 }

func (toyScaled) Name() string                                             { return toyScaledMethod }
func (toyScaled) CreateVariables(*trainstep.MethodGraph)                   {}
func (toyScaled) AfterUpdate(*trainstep.MethodGraph, trainstep.TrainNodes) {}
func (m toyScaled) TrainGraph(g *trainstep.MethodGraph, view1, view2 *Node) trainstep.TrainNodes {
	nodes := trainstep.StackedLossGraph(g.Encode(Concatenate([]*Node{view1, view2}, 0)), g.Loss)
	return trainstep.TrainNodes{Loss: MulScalar(nodes.Loss, m.scale), Q: nodes.Q}
}

func registerToyScaledMethod(t *testing.T) {
	trainstep.RegisterMethod(trainstep.MethodSpec{
		Name: toyScaledMethod, Display: "Toy-scaled",
		Params: []registry.Param{{Name: "toy_scale", Default: 1, Doc: "factor the loss is multiplied by", Check: registry.Positive}},
		New: func(cfg trainstep.StepConfig) (trainstep.Method, error) {
			return toyScaled{scale: cfg.MethodConfig.Float("toy_scale")}, nil
		},
	})
	t.Cleanup(func() { trainstep.UnregisterMethod(toyScaledMethod) })
}

// TestToyLossAndMethodAreOneRegistrationEach: the toy loss's toy_margin and the toy method's
// toy_scale get a flag of `dcl train` (and `dcl loss`) with their doc and default, a key of a
// reproduce run, their check (a bad value refused naming it, on the command line and in a
// config), and resume: the checkpoint holds them, a resumed run without the flags continues
// with them, and one with another value is refused naming it.
func TestToyLossAndMethodAreOneRegistrationEach(t *testing.T) {
	registerToyMarginLoss(t)
	registerToyScaledMethod(t)

	// The flags, with their docs and defaults.
	for _, cmd := range []string{"train", "loss"} {
		_, help, _ := runDCL(cmd, "-h")
		if !strings.Contains(help, "--toy-margin=float") || !strings.Contains(help, "toy-margin: margin subtracted from the positive's logit (default 0.25)") {
			t.Errorf("dcl %s -h lacks --toy-margin with its doc and default:\n%s", cmd, help)
		}
	}
	if _, help, _ := runDCL("train", "-h"); !strings.Contains(help, "toy-scaled: factor the loss is multiplied by (default 1)") {
		t.Errorf("dcl train -h lacks --toy-scale:\n%s", help)
	}

	data, out := t.TempDir(), t.TempDir()
	writeTrainShards(t, data, 12, 8, 2)
	base := []string{"train", "--input", data, "--output", out, "--model", "mlp", "--width", "4", "--batch-size", "4",
		"--epochs", "2", "--backend", "cpu", "--loss", string(toyMarginLoss), "--method", toyScaledMethod}

	// Validation: out-of-range values are command-line errors naming the flag.
	for _, tc := range []struct {
		give []string
		want string
	}{
		{[]string{"--toy-margin", "1.5"}, "--toy-margin=1.5: toy margin DCL: must be in [0, 1)"},
		{[]string{"--toy-scale", "-2"}, "--toy-scale=-2: method toy-scaled: must be a positive number"},
	} {
		code, _, stderr := runDCL(append(append([]string{}, base...), tc.give...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("dcl train %q = %d, %q; want exit 2 naming %q", tc.give, code, stderr, tc.want)
		}
	}

	// Training stores the values in the checkpoint.
	run := append(append([]string{}, base...), "--toy-margin", "0.5", "--toy-scale", "3")
	if code, _, stderr := runDCL(append(run, "--max-steps", "2")...); code != exitOK {
		t.Fatalf("dcl train = %d: %s", code, stderr)
	}
	ckpt := filepath.Join(out, trainstep.CheckpointDir, trainstep.CheckpointName(2))
	h, err := trainstep.ReadCheckpointHeader(context.Background(), ckpt)
	if err != nil {
		t.Fatal(err)
	}
	if got := h.Step.Loss.Params.Float("toy_margin"); h.Step.Loss.Kind != toyMarginLoss || got != 0.5 {
		t.Errorf("checkpoint loss %+v, want %s with toy_margin 0.5", h.Step.Loss, toyMarginLoss)
	}
	if got := h.Step.MethodConfig.Float("toy_scale"); h.Step.Method != toyScaledMethod || got != 3 {
		t.Errorf("checkpoint method %s %v, want %s with toy_scale 3", h.Step.Method, h.Step.MethodConfig, toyScaledMethod)
	}

	// Resuming with another value is refused, naming the setting.
	for _, tc := range []struct {
		give []string
		want []string
	}{
		{[]string{"--toy-margin", "0.1"}, []string{`"toy_margin":0.5`, `"toy_margin":0.1`}},
		{[]string{"--toy-scale", "2"}, []string{`toy-scaled settings {"toy_scale":3}, not {"toy_scale":2}`}},
	} {
		code, _, stderr := runDCL(append(append(append([]string{}, base...), tc.give...), "--resume")...)
		if code != exitUsage {
			t.Errorf("resume with %q = %d, %q; want exit 2", tc.give, code, stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("resume with %q: %q does not name %q", tc.give, stderr, w)
			}
		}
	}

	// Resuming without the flags continues with the checkpoint's values.
	if code, _, stderr := runDCL(append(append([]string{}, base...), "--resume")...); code != exitOK || !strings.Contains(stderr, "finished after 6 of 6 steps") {
		t.Fatalf("dcl train --resume = %d: %s", code, stderr)
	}
	h, err = trainstep.ReadCheckpointHeader(context.Background(), filepath.Join(out, trainstep.CheckpointDir, trainstep.CheckpointName(6)))
	if err != nil {
		t.Fatal(err)
	}
	if h.Step.Loss.Params.Float("toy_margin") != 0.5 || h.Step.MethodConfig.Float("toy_scale") != 3 {
		t.Errorf("resumed run's checkpoint: loss %+v, method %v; want toy_margin 0.5 and toy_scale 3", h.Step.Loss, h.Step.MethodConfig)
	}

	// A reproduce run takes both as keys, checked.
	const config = `
name: toy
dataset: {name: idx, input: /data/fashion-mnist}
preprocess: {augment: simclr-cifar, passes: 1}
train:
  defaults: {model: mlp, epochs: 1, temperature: 0.1, batch_size: 4}
  runs:
    - {name: toy, loss: toy-margin, method: toy-scaled, toy_margin: 0.5, toy_scale: 3}
`
	c, err := reproduce.Parse(strings.NewReader(config), "toy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if r := c.Runs[0]; r.Setting("toy_margin") != 0.5 || r.Setting("toy_scale") != 3.0 {
		t.Errorf("run settings %v, want toy_margin 0.5 and toy_scale 3", r.Settings)
	}
	for _, tc := range []struct{ give, want string }{
		{"toy_margin: 0.5", "toy-margin 1: toy margin DCL: must be in [0, 1)"},
		{"toy_scale: 3", "toy-scale 0: method toy-scaled: must be a positive number"},
	} {
		bad := strings.Replace(config, tc.give, map[bool]string{true: "toy_margin: 1", false: "toy_scale: 0"}[strings.HasPrefix(tc.give, "toy_margin")], 1)
		if _, err := reproduce.Parse(strings.NewReader(bad), "toy.yaml"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("config with a bad %s: %v, want an error naming %q", tc.give, err, tc.want)
		}
	}
}

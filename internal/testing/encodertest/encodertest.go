// Package encodertest makes small view-pair shards and trains tiny encoders on them, for the
// tests of the packages that embed and check encoders (pipelines, verify).
package encodertest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"

	"github.com/dcl-beam/dcl-beam/gpu"
	"github.com/dcl-beam/dcl-beam/shards"
	"github.com/dcl-beam/dcl-beam/trainstep"
	"github.com/dcl-beam/dcl-beam/transforms"
)

// PairClasses is the class list of WritePairShards' datasets.
var PairClasses = []string{"zero", "one", "two"}

// WritePairShards writes n view pairs of size×size grayscale images with labels i%3, in
// passes passes of parts shards each (views 2), or n single images (views 1, one pass).
func WritePairShards(t testing.TB, dir string, n, size, views, passes, parts int) {
	t.Helper()
	ctx := context.Background()
	cfg := shards.Config{
		Dataset: "fashion-mnist", Split: "train", Preset: "test", Augment: json.RawMessage(`{}`),
		Seed: 1, Passes: passes, Parts: parts, Views: views, Encoding: shards.Raw, Height: size, Width: size, Channels: 1,
		CodeVersion: "test", SourceChecksum: "sha256:00", Classes: PairClasses,
	}
	if err := shards.Prepare(ctx, dir, cfg, false); err != nil {
		t.Fatal(err)
	}
	var infos []shards.ShardInfo
	for pass := range passes {
		for part := range parts {
			w, err := shards.NewWriter(ctx, dir, shards.ShardID{Pass: pass, Part: part, Parts: parts}, cfg, shards.WriterOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for i := part; i < n; i += parts {
				v1, v2 := PairImage(i, pass, 1, size), PairImage(i, pass, 2, size)
				if views == 1 {
					v2 = transforms.Image{}
				}
				if err := w.WriteViews(fmt.Sprintf("k%03d", i), int64(i), int32(i%3), v1, v2); err != nil {
					t.Fatal(err)
				}
			}
			info, err := w.Close()
			if err != nil {
				t.Fatal(err)
			}
			infos = append(infos, info)
		}
	}
	if _, err := shards.Commit(ctx, dir, cfg, infos, int64(n), shards.DeadLetters{}); err != nil {
		t.Fatal(err)
	}
}

// PairImage is view v of image i in pass p: a pattern that depends on all three.
func PairImage(i, pass, v, size int) transforms.Image {
	m := transforms.NewImage(size, size, 1)
	for p := range m.Pix {
		m.Pix[p] = uint8(p*(i+1) + (i%3)*40 + pass*17 + v*5)
	}
	return m
}

// TrainTinyEncoder trains an MLP for a few steps on the pairs in data and returns its run
// folder.
func TrainTinyEncoder(t testing.TB, data string) string {
	t.Helper()
	cfg := trainstep.StepConfig{
		Model:     trainstep.ModelConfig{Name: trainstep.MLP, BaseWidth: 4, ProjectionDim: 8, Channels: 1},
		Loss:      trainstep.LossConfig{Kind: trainstep.DCL, Temperature: 0.2, Reduction: trainstep.Mean},
		Optimizer: trainstep.OptimizerConfig{Kind: trainstep.SGDMomentum, Momentum: 0.9},
		InitSeed:  1,
	}
	return TrainEncoder(t, data, cfg, trainstep.RunConfig{BatchSize: 4, Epochs: 1, BaseLR: 0.1, Seed: 1, MaxSteps: 3})
}

// TrainTinyCNNEncoder is TrainTinyEncoder with a small-cnn (convolutions and batch norm, the
// operations whose arithmetic backends differ in) in place of the MLP.
func TrainTinyCNNEncoder(t testing.TB, data string) string {
	t.Helper()
	cfg := trainstep.StepConfig{
		Model:     trainstep.ModelConfig{Name: trainstep.SmallCNN, BaseWidth: 4, ProjectionDim: 8, Channels: 1},
		Loss:      trainstep.LossConfig{Kind: trainstep.DCL, Temperature: 0.2, Reduction: trainstep.Mean},
		Optimizer: trainstep.OptimizerConfig{Kind: trainstep.SGDMomentum, Momentum: 0.9},
		InitSeed:  1,
	}
	return TrainEncoder(t, data, cfg, trainstep.RunConfig{BatchSize: 4, Epochs: 1, BaseLR: 0.1, Seed: 1, MaxSteps: 3})
}

// TrainEncoder trains the step cfg on the CPU backend on the pairs in data, as run says (its
// Data and Out are set here), and returns its run folder.
func TrainEncoder(t testing.TB, data string, cfg trainstep.StepConfig, run trainstep.RunConfig) string {
	t.Helper()
	ctx := context.Background()
	backend, err := gpu.New(ctx, gpu.Options{Kind: gpu.CPU, Logger: discardLogger})
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Finalize()
	src, err := trainstep.OpenShards(ctx, data)
	if err != nil {
		t.Fatal(err)
	}
	run.Data, run.Out = data, t.TempDir()
	if _, err := trainstep.Train(ctx, cfg, run, trainstep.TrainOptions{Backend: backend, Source: src, Logger: discardLogger}); err != nil {
		t.Fatal(err)
	}
	return run.Out
}

var discardLogger = slog.New(slog.DiscardHandler)

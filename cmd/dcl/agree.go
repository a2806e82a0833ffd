package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/dcl-beam/dcl-beam/analysis"
	"github.com/dcl-beam/dcl-beam/gpu"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/trainstep"
	"github.com/dcl-beam/dcl-beam/verify"
)

func agreeCommand() *command {
	return &command{
		name:    "agree",
		summary: "check that two backends (cuda and cpu) embed alike, within the tolerance the checkpoint's error model derives",
		details: "Embeds a seeded sample of --train (the bank) and --test (the queries) with the checkpoint on --a and on --b, and prints one JSON: the per-row relative differences, the tolerance (verify/errormodel.go derives it), kNN and linear-probe accuracy on each and the most a difference of the tolerance could change them. Exit status 1 when the embeddings or the accuracies differ by more. --precision says what CUDA computes in (float32 or tf32), as dcl train's. --b=reference is the CPU backend with its sums in float64, to check the CPU against.",
		setup: func(fs *flag.FlagSet, out streams) func(context.Context, []string) error {
			checkpoint := fs.String("checkpoint", "", "checkpoint file, or a training run's folder for its newest checkpoint; required")
			train := fs.String("train", "", "labelled evaluation shards (preset none) whose sample is the kNN bank and the probe's training set; required")
			test := fs.String("test", "", "labelled evaluation shards whose sample is classified; required")
			feature := fs.String("feature", string(trainstep.Backbone), "backbone or projection")
			a := fs.String("a", "cuda", "first backend: "+gpu.BackendsHelp+", or reference (the CPU with float64 sums)")
			b := fs.String("b", "cpu", "second backend, as --a")
			precision := fs.String("precision", string(trainstep.Float32), "what CUDA embeds in: float32 (full float32: XLA precision HIGHEST) or tf32 (TF32 tensor cores); bf16 embeds as tf32 (the encoder's activations are float32). The CPU computes in float32 and the reference in float64 sums whatever it is; each side's arithmetic sets the tolerance")
			bank := fs.Int("bank", trainstep.DefaultKNNBank, "images of --train embedded on each backend (a seeded sample)")
			queries := fs.Int("queries", trainstep.DefaultKNNQueries, "images of --test embedded on each backend (a seeded sample)")
			seed := fs.Uint64("seed", 1, "seed of the samples")
			def := analysis.DefaultKNNConfig()
			k := fs.Int("k", def.K, "kNN neighbours that vote")
			probeEpochs := fs.Int("probe-epochs", analysis.DefaultLinearConfig().Epochs, "epochs of the linear probe (OpenSelfSup's protocol otherwise)")
			plugin := fs.String("plugin", "", "CUDA PJRT plugin file (.so) for cuda|auto (empty: search)")
			output := fs.String("output", "", "also write the JSON here")
			return func(ctx context.Context, args []string) error {
				if len(args) > 0 {
					return usagef("takes no positional arguments, got %q", args)
				}
				if *checkpoint == "" || *train == "" || *test == "" {
					return usagef("--checkpoint, --train and --test are required")
				}
				f, err := trainstep.ParseFeature(*feature)
				if err != nil {
					return usagef("--feature: %v", err)
				}
				if *bank <= *k || *queries < 1 || *probeEpochs < 1 {
					return usagef("--bank=%d, --queries=%d, --probe-epochs=%d: want a bank larger than --k=%d, and at least one query and one epoch", *bank, *queries, *probeEpochs, *k)
				}
				prec, err := trainstep.ParsePrecision(*precision)
				if err != nil {
					return usagef("--precision: %v", err)
				}
				knn := def
				knn.K = *k
				res, err := verify.Agree(ctx, verify.AgreeOptions{
					Checkpoint: *checkpoint, Train: *train, Test: *test, Feature: f, A: *a, B: *b, Precision: prec,
					Plugin: *plugin, Bank: *bank, Queries: *queries, Seed: *seed, KNN: knn,
					Linear: analysis.DefaultLinearConfig().WithEpochs(*probeEpochs),
				})
				if err != nil {
					return err
				}
				if *output != "" {
					if err := storage.SaveJSON(ctx, *output, res); err != nil {
						return err
					}
				}
				if err := printJSON(out, res); err != nil {
					return err
				}
				if !res.OK {
					return errors.New(agreeFailure(res))
				}
				return nil
			}
		},
	}
}

func agreeFailure(res *verify.AgreeResult) string {
	switch {
	case !res.Agree:
		return fmt.Sprintf("%s and %s disagree: rows differ by up to %.3g (bank) and %.3g (queries), over the tolerance %.3g", res.A.Backend, res.B.Backend, res.Bank.Max, res.Queries.Max, res.Tolerance)
	case !res.KNN.Within:
		return fmt.Sprintf("kNN top-1 differs by %.2f points, more than the %.2f a difference of the tolerance could make", res.KNN.Difference, res.KNN.Bound)
	}
	return fmt.Sprintf("the linear probe's top-1 differs by %.2f points, more than the %.2f a difference of the tolerance could make", res.Linear.Difference, res.Linear.Bound)
}

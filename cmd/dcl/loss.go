package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/dcl-beam/dcl-beam/gpu"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/trainstep"
)

func lossCommand() *command {
	return &command{
		name:    "loss",
		summary: "evaluate a contrastive loss, its NPC multipliers and gradients on a JSON batch",
		setup:   setupLoss,
	}
}

// lossInput is batch.json: the raw (unnormalised) projections of N view pairs and, for the
// queue form (MoCo's), the K queue rows that are every query's negatives.
type lossInput struct {
	Z1    [][]float64 `json:"z1"`
	Z2    [][]float64 `json:"z2"`
	Queue [][]float64 `json:"queue"`
}

// lossOutput is what `dcl loss` prints: q_b holds the 2N multipliers, view-1 anchors first
// (with a queue: the N multipliers of the queries).
type lossOutput struct {
	Loss   float64     `json:"loss"`
	QB     []float64   `json:"q_b"`
	GradZ1 [][]float64 `json:"grad_z1"`
	GradZ2 [][]float64 `json:"grad_z2"`
}

// registerLossFlags registers the loss's flags (trainstep.LossSettings and every parameter
// the registered losses declare); the returned function reads them into a LossConfig (call
// Validate for what the flags cannot check alone).
func registerLossFlags(fs *flag.FlagSet) func() (trainstep.LossConfig, error) {
	settings := registerSettingFlags(fs, trainstep.LossSettings(), false)
	return func() (trainstep.LossConfig, error) {
		var t trainstep.ShardTraining
		err := settings(&t)
		return t.Step.Loss, err
	}
}

func setupLoss(fs *flag.FlagSet, out streams) func(context.Context, []string) error {
	input := fs.String("input", "", `batch file {"z1": [[…]], "z2": [[…]]} (local, gs:// or "-" for stdin); with "queue": [[…]],
the queue form: z1 rows are the queries, z2 rows their keys, every queue row a negative of every query`)
	lossConfig := registerLossFlags(fs)
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("takes no positional arguments, got %q", args)
		}
		if *input == "" {
			return usagef("--input is required")
		}
		cfg, err := lossConfig()
		if err != nil {
			return err
		}
		if err := cfg.Validate(); err != nil {
			return usagef("%w", err)
		}
		batch, err := readLossInput(ctx, *input)
		if err != nil {
			return err
		}
		backend, err := gpu.New(ctx, gpu.Options{Kind: gpu.CPU})
		if err != nil {
			return err
		}
		defer backend.Finalize()
		eval, err := trainstep.NewLossEvaluator(backend, cfg)
		if err != nil {
			return err
		}
		defer eval.Finalize()
		var res *trainstep.LossResult
		if batch.Queue != nil {
			res, err = eval.EvalQueue(batch.Z1, batch.Z2, batch.Queue)
		} else {
			res, err = eval.Eval(batch.Z1, batch.Z2)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", *input, err)
		}
		enc := json.NewEncoder(out.stdout)
		return enc.Encode(lossOutput{Loss: res.Loss, QB: res.Q, GradZ1: res.Grad1, GradZ2: res.Grad2})
	}
}

// readLossInput reads and decodes batch.json strictly (storage.DecodeJSON): an unknown key
// (a typo of z1 or z2), a key given twice or data after the batch is an error.
func readLossInput(ctx context.Context, path string) (*lossInput, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(os.Stdin)
	} else {
		data, err = storage.ReadFile(ctx, path)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	var in lossInput
	if err := storage.DecodeJSON(data, &in); err != nil {
		return nil, fmt.Errorf("%s: not a batch of embeddings: %w", path, err)
	}
	if in.Z1 == nil || in.Z2 == nil {
		return nil, fmt.Errorf(`%s: want {"z1": [[…]], "z2": [[…]]}, both present`, path)
	}
	return &in, nil
}

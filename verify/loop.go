package verify

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/dcl-beam/dcl-beam/internal/progress"
	"github.com/dcl-beam/dcl-beam/shards"
	"github.com/dcl-beam/dcl-beam/trainstep"
)

// LoopResult is the training step as `dcl train` runs it: shards read, decoded and batched on
// the host, the log written every step (train.jsonl, TensorBoard, progress), a checkpoint at
// the end; against the bare step of the same model, batch and precision.
type LoopResult struct {
	Model     string `json:"model"`
	Size      int    `json:"size"`
	Batch     int    `json:"batch"`
	Precision string `json:"precision"`
	// Steps is the run's length; Skipped its first steps left out of the rate (compilation
	// and warm-up).
	Steps   int `json:"steps"`
	Skipped int `json:"skipped"`
	// ImagesPerSec is the rate over the steps after Skipped, from the log's completion times.
	ImagesPerSec float64 `json:"images_per_sec"`
	// BareImagesPerSec is the speed row's pipelined rate for the same step, Ratio this
	// loop's over it (the goal is at least 0.9).
	BareImagesPerSec float64 `json:"bare_images_per_sec,omitempty"`
	Ratio            float64 `json:"ratio,omitempty"`
	Error            string  `json:"error,omitempty"`
	Seconds          float64 `json:"seconds"`
}

// loopSkip is how many first steps the loop's rate leaves out.
const loopSkip = 20

func runLoop(ctx context.Context, p Phase) (*LoopResult, error) {
	start := time.Now()
	res := &LoopResult{Model: p.Model, Size: p.Size, Batch: p.Batch, Precision: p.Precision, Skipped: loopSkip}
	work, err := os.MkdirTemp("", "dcl-gpu-check-loop-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	steps := max(p.Steps, 1) + loopSkip
	spec := FeedSpec{Name: "loop", Size: p.Size, Channels: p.Channels, Encoding: shards.Raw, Pairs: steps * p.Batch, Batch: p.Batch, Epochs: 1}
	src, labels, source, err := sourceImages(p.Data, min(spec.Pairs, 60000), 28, spec.Channels, 1)
	if err != nil {
		return nil, err
	}
	if source == "random" {
		src, labels, _, _ = sourceImages("", min(spec.Pairs, 4096), spec.Size, spec.Channels, 1)
	}
	data := filepath.Join(work, "shards")
	if _, err := writeShards(ctx, data, spec, src, labels); err != nil {
		return nil, fmt.Errorf("writing the loop's shards: %w", err)
	}
	cfg, err := p.stepConfig()
	if err != nil {
		return nil, err
	}
	cfg.Model.Dataset = "cifar10" // an RGB normalisation for the shards' images (Fashion-MNIST in three channels)
	be, err := p.open(ctx)
	if err != nil {
		return nil, err
	}
	defer be.Finalize()
	src2, err := trainstep.OpenShards(ctx, data)
	if err != nil {
		return nil, err
	}
	out := filepath.Join(work, "run")
	run := trainstep.RunConfig{Data: data, Out: out, BatchSize: p.Batch, Epochs: 1, BaseLR: 0.03, Seed: 1, KeepCheckpoints: 1, Backend: be.Name()}
	sum, err := trainstep.Train(ctx, cfg, run, trainstep.TrainOptions{Backend: be, Source: src2,
		Progress: progress.Options{Mode: progress.Off}, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, fmt.Errorf("training: %w", err)
	}
	res.Steps = sum.StepsDone
	if res.ImagesPerSec, err = loopRate(filepath.Join(out, trainstep.LogName), loopSkip, 2*p.Batch); err != nil {
		return nil, err
	}
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

// loopRate is the images/s of a run's log over the steps after skip: the images of the steps
// after skip, over the time from step skip's completion to the last one's.
func loopRate(path string, skip, imagesPerStep int) (float64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var first, last time.Time
	steps := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l trainstep.LogLine
		if json.Unmarshal(sc.Bytes(), &l) != nil || l.Step == 0 || l.ImagesPerSec == 0 {
			continue // a monitor line
		}
		t, err := time.Parse(time.RFC3339Nano, l.Time)
		if err != nil {
			return 0, fmt.Errorf("%s: step %d's time %q: %w", path, l.Step, l.Time, err)
		}
		switch {
		case l.Step == skip:
			first = t
		case l.Step > skip:
			last = t
			steps++
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	if first.IsZero() || last.IsZero() || !last.After(first) {
		return 0, fmt.Errorf("%s: fewer than %d steps logged", path, skip+2)
	}
	return float64(steps*imagesPerStep) / last.Sub(first).Seconds(), nil
}

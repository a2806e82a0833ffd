// Package shardrun starts a pretraining run on a shard dataset the way `dcl train` and
// `dcl reproduce` both do: it opens the shards, checks the settings against the data and any
// checkpoint before a backend exists, attaches the kNN monitor, chooses the compute backend
// and trains. It is a package of its own because the monitor (trainstep/knnmonitor) imports
// trainstep.
package shardrun

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/dcl-beam/dcl-beam/gpu"
	"github.com/dcl-beam/dcl-beam/internal/progress"
	"github.com/dcl-beam/dcl-beam/trainstep"
	"github.com/dcl-beam/dcl-beam/trainstep/knnmonitor"
)

// Options is one training run.
type Options struct {
	Step trainstep.StepConfig
	// Run.Data is the shard folder; Run.MonitorEvery > 0 runs the kNN monitor on KNNData.
	Run trainstep.RunConfig
	// Backend and Plugin choose the compute backend (gpu.New).
	Backend gpu.Kind
	Plugin  string
	// Resume is a checkpoint file or run folder to continue from; "" starts afresh.
	Resume string
	// KNNData is a labelled evaluation shard folder whose backbone features vote in the kNN
	// monitor; KNNTest is the one classified ("": every 10th image of KNNData).
	KNNData, KNNTest string
	// Log gets a copy of the JSON-lines log (nil: only the run's train.jsonl); Progress
	// shows how far the run has got.
	Log      io.Writer
	Progress progress.Options
	Logger   *slog.Logger
}

// Train runs o. Settings that do not fit the data, the checkpoint or each other come back as
// a *trainstep.SetupError, before any backend is started.
func Train(ctx context.Context, o Options) (*trainstep.Summary, error) {
	if o.Run.MonitorEvery > 0 && o.KNNData == "" {
		return nil, &trainstep.SetupError{Err: fmt.Errorf("a kNN monitor every %d epochs needs labelled evaluation shards (KNNData)", o.Run.MonitorEvery)}
	}
	src, err := trainstep.OpenShards(ctx, o.Run.Data)
	if err != nil {
		return nil, err
	}
	if err := trainstep.CheckRun(ctx, o.Step, o.Run, src.Info(), o.Resume); err != nil {
		return nil, err
	}
	opts := trainstep.TrainOptions{Source: src, Resume: o.Resume, Log: o.Log, Progress: o.Progress, Logger: o.Logger}
	if o.Run.MonitorEvery > 0 {
		mon, err := knnmonitor.New(ctx, o.KNNData, o.KNNTest)
		if err != nil {
			return nil, err
		}
		mcfg := o.Step.Model
		mcfg.Channels = src.Info().Channels
		model, err := trainstep.NewModel(mcfg)
		if err != nil {
			return nil, &trainstep.SetupError{Err: err}
		}
		if err := mon.Check(model); err != nil {
			return nil, &trainstep.SetupError{Err: err}
		}
		opts.Monitor = mon.Run
	}
	prec, err := trainstep.RunPrecision(ctx, o.Step, o.Resume)
	if err != nil {
		return nil, err
	}
	backend, err := gpu.New(ctx, gpu.Options{Kind: o.Backend, Plugin: o.Plugin, TF32: prec.AllowsTF32()})
	if err != nil {
		return nil, err
	}
	defer backend.Finalize()
	o.Run.Backend = backend.Name()
	opts.Backend = backend
	return trainstep.Train(ctx, o.Step, o.Run, opts)
}

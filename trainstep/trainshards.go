package trainstep

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/dcl-beam/dcl-beam/gpu"
	"github.com/dcl-beam/dcl-beam/internal/progress"
)

// ShardTraining is one pretraining run on a shard dataset, as `dcl train` and `dcl reproduce`
// start it (TrainOnShards).
type ShardTraining struct {
	Step StepConfig
	// Run.Data is the shard folder; Run.MonitorEvery > 0 runs the kNN monitor on KNNData.
	Run RunConfig
	// Backend and Plugin choose the compute backend (gpu.New).
	Backend gpu.Kind
	Plugin  string
	// Resume is a checkpoint file or run folder to continue from; "" starts afresh.
	Resume string
	// KNNData is a labelled evaluation shard folder whose backbone features vote in the kNN
	// monitor; KNNTest is the one classified ("": every 10th image of KNNData).
	KNNData, KNNTest string
	// KNN chooses the images the monitor embeds (a fixed sample by default).
	KNN KNNMonitorOptions
	// Log gets a copy of the JSON-lines log (nil: only the run's train.jsonl); Progress
	// shows how far the run has got.
	Log      io.Writer
	Progress progress.Options
	Logger   *slog.Logger
}

// TrainOnShards opens the shards, checks the settings against the data and any checkpoint
// before a backend exists, attaches the kNN monitor, chooses the compute backend and trains.
// Settings that do not fit the data, the checkpoint or each other come back as a
// *SetupError, before any backend is started.
func TrainOnShards(ctx context.Context, o ShardTraining) (*Summary, error) {
	opts, prec, err := o.options(ctx, nil)
	if err != nil {
		return nil, err
	}
	// XLA's CPU plugin has as many (virtual) devices as its client is asked for.
	backend, err := gpu.New(ctx, gpu.Options{Kind: o.Backend, Plugin: o.Plugin, TF32: prec.AllowsTF32(), Devices: max(o.Run.Devices, 0)})
	if err != nil {
		return nil, err
	}
	defer backend.Finalize()
	o.Run.Backend = backend.Name()
	opts.Backend = backend
	return Train(ctx, o.Step, o.Run, opts)
}

// options opens the shards, checks the run against them and any checkpoint, and attaches
// the kNN monitor: the run's TrainOptions but the backend, and the precision it trains at.
// monitors, where set, holds the monitors built so far, by what they read, for runs that
// share one.
func (o ShardTraining) options(ctx context.Context, monitors map[monitorKey]*KNNMonitor) (TrainOptions, Precision, error) {
	if o.Run.MonitorEvery > 0 && o.KNNData == "" {
		return TrainOptions{}, "", &SetupError{Err: fmt.Errorf("a kNN monitor every %d epochs needs labelled evaluation shards (KNNData)", o.Run.MonitorEvery)}
	}
	src, err := OpenShards(ctx, o.Run.Data)
	if err != nil {
		return TrainOptions{}, "", err
	}
	if err := CheckRun(ctx, o.Step, o.Run, src.Info(), o.Resume); err != nil {
		return TrainOptions{}, "", err
	}
	if err := writeSettingsFile(ctx, o); err != nil {
		return TrainOptions{}, "", err
	}
	opts := TrainOptions{Source: src, Resume: o.Resume, Log: o.Log, Progress: o.Progress, Logger: o.Logger}
	if o.Run.MonitorEvery > 0 {
		key := monitorKey{o.KNNData, o.KNNTest, o.KNN}
		mon := monitors[key]
		if mon == nil {
			if mon, err = NewKNNMonitor(ctx, o.KNNData, o.KNNTest, o.KNN); err != nil {
				return TrainOptions{}, "", err
			}
			if monitors != nil {
				monitors[key] = mon
			}
		}
		mcfg := o.Step.Model
		mcfg.Channels = src.Info().Channels
		model, err := NewModel(mcfg)
		if err != nil {
			return TrainOptions{}, "", &SetupError{Err: err}
		}
		if err := mon.Check(model); err != nil {
			return TrainOptions{}, "", &SetupError{Err: err}
		}
		if n := mon.Notice(); n != "" {
			cmp.Or(o.Logger, slog.Default()).Warn("kNN monitor: " + n)
		}
		opts.Monitor, opts.MonitorImages = mon.Run, mon.Images()
	}
	prec, err := RunPrecision(ctx, o.Step, o.Resume)
	if err != nil {
		return TrainOptions{}, "", err
	}
	return opts, prec, nil
}

// monitorKey is what a kNN monitor reads.
type monitorKey struct {
	data, test string
	opts       KNNMonitorOptions
}

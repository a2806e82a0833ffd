package trainstep

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"time"

	"github.com/gomlx/compute"

	"github.com/dcl-beam/dcl-beam/internal/progress"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/internal/tensorboard"
	"github.com/dcl-beam/dcl-beam/internal/usage"
)

// RunConfig holds a training run's settings beyond the step itself (the `dcl train` flags).
type RunConfig struct {
	// Data and Out are the shard folder read and the folder written (checkpoints, log).
	Data string `json:"data"`
	Out  string `json:"out"`
	// BatchSize is N, view pairs per step (2N images through the network).
	BatchSize int `json:"batch_size"`
	Epochs    int `json:"epochs"`
	// BaseLR is the learning rate per 256 images: the peak is BaseLR·BatchSize/256.
	BaseLR       float64 `json:"base_lr"`
	WarmupEpochs float64 `json:"warmup_epochs"`
	// Seed fixes the data order (and, through StepConfig.InitSeed, usually the initial weights).
	Seed uint64 `json:"seed"`
	// CheckpointEvery writes a checkpoint every so many steps (0: only at the end and when
	// interrupted). KeepCheckpoints is how many of the newest to keep (0: all).
	CheckpointEvery int `json:"checkpoint_every"`
	KeepCheckpoints int `json:"keep_checkpoints"`
	// MonitorEvery runs the TrainOptions.Monitor every so many epochs (0: never).
	MonitorEvery int `json:"monitor_every"`
	// MaxSteps stops the run, with a checkpoint, once this many steps are done in total
	// (0: run every epoch). A later --resume continues it.
	MaxSteps int `json:"max_steps,omitempty"`
	// Backend names the compute backend, for the record.
	Backend string `json:"backend"`
	// Devices is how many of the backend's devices train data parallel, BatchSize split
	// evenly over them (0: one; AllDevices: every one). Checkpoints record it but do not
	// hold a run to it: a run may resume on another number of devices.
	Devices int `json:"devices,omitempty"`
	// ExtendedFrom lists the epochs the run was trained for before each time a resume with
	// more --epochs extended it, oldest first (set by Train; empty for a run never extended).
	ExtendedFrom []int `json:"extended_from,omitempty"`
}

// TrainOptions are the parts of a run that are not settings.
type TrainOptions struct {
	Backend compute.Backend
	Source  BatchSource
	// Resume is a checkpoint file or a run's output folder to continue from ("": start fresh).
	Resume string
	// Monitor, if set, runs after every RunConfig.MonitorEvery epochs (e.g. a kNN accuracy on
	// held-out data); what it returns is logged. epoch is the epochs completed (1 after the
	// first: text for people counts epochs from 1; the log's "epoch" is the 0-based index of
	// the epoch a line belongs to). p is the run's progress (nil when it is off): the monitor
	// shows its own as p.Sub, which has the line until it ends.
	Monitor func(ctx context.Context, epoch int, s *Step, p *progress.Reporter) (map[string]any, error)
	// MonitorImages is how many images one Monitor run embeds, for the progress ETA before
	// the first has run (see runClock).
	MonitorImages int64
	// Log, if set, gets a copy of every line of the JSON-lines log, which always goes to the
	// run's train.jsonl (dcl train --json: stdout).
	Log io.Writer
	// Progress shows the run's progress and key metrics (a bar on a terminal, a line every
	// interval in a log).
	Progress progress.Options
	// Logger gets the run's notices; nil: slog.Default().
	Logger *slog.Logger
}

// Summary is the outcome of Train.
type Summary struct {
	StepsDone  int `json:"steps_done"`
	TotalSteps int `json:"total_steps"`
	// Epoch is the epochs completed (the 0-based index of the epoch the run stopped in).
	Epoch         int            `json:"epoch"`
	Finished      bool           `json:"finished"`
	Loss          float64        `json:"loss"`
	MeanQ         float64        `json:"mean_q"`
	ImagesPerSec  float64        `json:"images_per_s"`
	Checkpoint    string         `json:"checkpoint"`
	Monitor       map[string]any `json:"monitor,omitempty"`
	Parameters    int            `json:"parameters"`
	StepsPerEpoch int            `json:"steps_per_epoch"`
	// Views is what the run trained on (SourceInfo.Views).
	Views string `json:"views,omitempty"`
}

// LogLine is one line of the training log (train.jsonl in the output folder).
type LogLine struct {
	Step  int     `json:"step"`
	Epoch int     `json:"epoch"`
	Loss  float64 `json:"loss"`
	LR    float64 `json:"lr"`
	MeanQ float64 `json:"mean_q"`
	// ImagesPerSec counts images through the network (2 per view pair) per second of wall
	// time, data loading included.
	ImagesPerSec float64 `json:"images_per_s"`
	Time         string  `json:"time"`
}

// LogName is the training log in a run's output folder.
const LogName = "train.jsonl"

// SummaryName is the summary a finished run writes in its output folder.
const SummaryName = "summary.json"

// SetupError is a run that cannot start because its settings do not fit each other, the data
// or the checkpoint it resumes from (batch size 1, a model for other image sizes, an empty
// dataset, a checkpoint of another model…): the command line is wrong, not the machine.
type SetupError struct{ Err error }

func (e *SetupError) Error() string { return e.Err.Error() }
func (e *SetupError) Unwrap() error { return e.Err }

func setupErr(err error) error {
	if err == nil {
		return nil
	}
	return &SetupError{Err: err}
}

// MaxEpochs is the most epochs a run may have: with fewer than 2³¹ steps an epoch (a
// dataset of fewer than 2³² view pairs), the run's step count stays within 2⁶².
const MaxEpochs = math.MaxInt32

// Validate checks the settings that do not depend on the data.
func (r RunConfig) Validate() error {
	switch {
	case r.BatchSize < 2:
		return usage.Value("batch-size", r.BatchSize, "a contrastive batch needs at least 2 view pairs (each image's negatives are the others)")
	case r.Epochs < 1:
		return usage.Value("epochs", r.Epochs, "want at least 1")
	case r.Epochs > MaxEpochs:
		return usage.Value("epochs", r.Epochs, "want at most %d (the run's steps, epochs times the steps of an epoch, are counted in 64 bits)", MaxEpochs)
	case !(r.BaseLR > 0) || math.IsInf(r.BaseLR, 0):
		return usage.Value("lr", r.BaseLR, "want a positive number")
	case r.BaseLR*float64(max(r.BatchSize, ReferenceBatch))/ReferenceBatch > math.MaxFloat32:
		return usage.Value("lr", r.BaseLR, "the peak learning rate, lr·batch/%d, must be a float32 number (at most %.3g)", ReferenceBatch, math.MaxFloat32)
	case r.WarmupEpochs < 0 || r.WarmupEpochs > float64(r.Epochs) || math.IsNaN(r.WarmupEpochs):
		return usage.Value("warmup-epochs", r.WarmupEpochs, "want between 0 and the %d epochs of the run", r.Epochs)
	case r.CheckpointEvery < 0:
		return usage.Value("checkpoint-every", r.CheckpointEvery, "must not be negative")
	case r.KeepCheckpoints < 0:
		return usage.Value("keep-checkpoints", r.KeepCheckpoints, "must not be negative")
	case r.MonitorEvery < 0:
		return usage.Value("knn-every", r.MonitorEvery, "must not be negative")
	case r.MaxSteps < 0:
		return usage.Value("max-steps", r.MaxSteps, "must not be negative")
	case r.Devices < AllDevices:
		return usage.Value("devices", r.Devices, "want a positive number or all")
	case r.Devices > 0 && r.BatchSize%r.Devices != 0:
		return batchSplitError(r.BatchSize, r.Devices)
	case r.Out == "":
		return fmt.Errorf("no output folder")
	}
	return nil
}

// Train pretrains the encoder of cfg on opts.Source: the loop of the paper's Section 4.1 with
// checkpoints, exact resume and a JSON-lines log. A cancelled ctx stops it after the current
// step with a checkpoint to resume from.
func Train(ctx context.Context, cfg StepConfig, run RunConfig, opts TrainOptions) (*Summary, error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}
	info := opts.Source.Info()
	plan, err := planRun(ctx, cfg, run, info, opts.Resume)
	if err != nil {
		return nil, err
	}
	run.ExtendedFrom = plan.extendedFrom
	if done, err := finishedAlready(ctx, plan, run, info, logger); done != nil || err != nil {
		return done, err
	}
	devices, err := ResolveDevices(opts.Backend, run.Devices, run.BatchSize)
	if err != nil {
		return nil, setupErr(err)
	}
	run.Devices = devices
	step, err := NewStepOn(opts.Backend, devices, plan.cfg, info.Height, info.Width)
	if err != nil {
		return nil, err
	}
	defer step.Finalize()
	l, err := startLoop(ctx, step, plan, run, opts, logger)
	if err != nil {
		return nil, err
	}
	defer l.close(ctx)
	return l.runAll(ctx)
}

// startLoop restores step from the plan's checkpoint, if any, and opens the run's log,
// TensorBoard file and progress: the loop of one run, ready to go (close ends it).
func startLoop(ctx context.Context, step *Step, plan *runPlan, run RunConfig, opts TrainOptions, logger *slog.Logger) (*loop, error) {
	cfg := step.Config()
	info := plan.info

	stepsPerEpoch := info.Examples / run.BatchSize
	total := stepsPerEpoch * run.Epochs
	warmup := int(math.Round(run.WarmupEpochs * float64(stepsPerEpoch)))
	sched, err := NewSchedule(run.BaseLR, run.BatchSize, warmup, total)
	if err != nil {
		return nil, setupErr(err)
	}
	state := plan.fresh
	if plan.checkpoint != "" {
		if state, err = resume(ctx, plan.checkpoint, plan.header, step, run, logger); err != nil {
			return nil, err
		}
	}
	if info.Passes < run.Epochs {
		logger.Info("the shards hold fewer augmented passes than epochs: epoch e reads pass e mod passes, so views repeat",
			"passes", info.Passes, "epochs", run.Epochs)
	}
	logger.Info("training", "model", cfg.Model.Name, "precision", cfg.Precision, "devices", run.Devices, "parameters", step.NumParameters(), "loss", cfg.Loss.Kind,
		"temperature", cfg.Loss.Temperature, "batch", run.BatchSize, "epochs", run.Epochs, "steps", total,
		"steps_per_epoch", stepsPerEpoch, "peak_lr", sched.Peak, "start_step", state.StepsDone, "views", info.Views)

	log, err := openRunLog(ctx, run.Out, opts.Log, state.StepsDone)
	if log != nil {
		log.logger = logger
	}
	if err != nil {
		return nil, err
	}
	tb, err := tensorboard.Create(ctx, storage.Join(run.Out, tensorboard.Dir), time.Now(), int64(state.StepsDone)+1)
	if err != nil {
		log.close()
		return nil, err
	}

	l := &loop{
		step: step, run: run, opts: opts, sched: sched, state: state, log: log, tb: tb, logger: logger,
		stepsPerEpoch: stepsPerEpoch, total: total, clock: runClock{startSteps: state.StepsDone, monitorImages: opts.MonitorImages},
		summary: &Summary{TotalSteps: total, StepsPerEpoch: stepsPerEpoch, Parameters: step.NumParameters(), Views: info.Views},
	}
	// Epochs are shown as the log numbers them: from 0, the epoch under way.
	l.bar = opts.Progress.Start("train", int64(state.StepsDone), int64(total), "steps")
	log.bar = l.bar
	return l, nil
}

// close ends the run's progress (a failed run ends the bar's line before its error is
// printed), TensorBoard file and log.
func (l *loop) close(ctx context.Context) {
	l.bar.End()
	if err := l.tb.Close(context.WithoutCancel(ctx)); err != nil {
		l.logger.Warn("closing the TensorBoard event file", "err", err)
	}
	l.log.close()
}

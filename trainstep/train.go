package trainstep

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/gomlx/compute"

	"github.com/dcl-beam/dcl-beam/internal/progress"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/internal/sysmem"
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
	// held-out data); what it returns is logged. p is the run's progress (nil when it is
	// off): the monitor shows its own as p.Sub, which has the line until it ends.
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
	StepsDone     int            `json:"steps_done"`
	TotalSteps    int            `json:"total_steps"`
	Epoch         int            `json:"epoch"`
	Finished      bool           `json:"finished"`
	Loss          float64        `json:"loss"`
	MeanQ         float64        `json:"mean_q"`
	ImagesPerSec  float64        `json:"images_per_s"`
	Checkpoint    string         `json:"checkpoint"`
	Monitor       map[string]any `json:"monitor,omitempty"`
	Parameters    int            `json:"parameters"`
	StepsPerEpoch int            `json:"steps_per_epoch"`
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

// Validate checks the settings that do not depend on the data.
func (r RunConfig) Validate() error {
	switch {
	case r.BatchSize < 2:
		return usage.Value("batch-size", r.BatchSize, "a contrastive batch needs at least 2 view pairs (each image's negatives are the others)")
	case r.Epochs < 1:
		return usage.Value("epochs", r.Epochs, "want at least 1")
	case !(r.BaseLR > 0) || math.IsInf(r.BaseLR, 0):
		return usage.Value("lr", r.BaseLR, "want a positive number")
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
	case r.Out == "":
		return fmt.Errorf("no output folder")
	}
	return nil
}

// runPlan is a run checked and ready to build.
type runPlan struct {
	cfg        StepConfig
	info       SourceInfo
	checkpoint string // the checkpoint to resume from, or ""
	fresh      TrainState
	header     *CheckpointHeader // the checkpoint's header, when resuming
	// extendedFrom is RunConfig.ExtendedFrom of the resumed run: the checkpoint's, and its
	// epochs when --epochs extends it.
	extendedFrom []int
}

// CheckRun checks that a run can start, before any compute backend exists: the settings, the
// data (its SourceInfo) and, when resuming, the checkpoint's header (same model, batch size,
// seed, data, image size and precision; an empty cfg.Precision takes the checkpoint's).
// Train does the same checks; a command line calls CheckRun first so that a wrong one fails
// at once and alone. Errors are SetupErrors, except failures to read.
func CheckRun(ctx context.Context, cfg StepConfig, run RunConfig, info SourceInfo, resumeFrom string) error {
	_, err := planRun(ctx, cfg, run, info, resumeFrom)
	return err
}

func planRun(ctx context.Context, cfg StepConfig, run RunConfig, info SourceInfo, resumeFrom string) (*runPlan, error) {
	if err := run.Validate(); err != nil {
		return nil, setupErr(err)
	}
	if info.Examples == 0 {
		return nil, setupErr(fmt.Errorf("dataset %s is empty: no view pairs to train on", run.Data))
	}
	cfg.Model.Channels = info.Channels
	if cfg.Model.Dataset == "" {
		cfg.Model.Dataset = info.Dataset
	}
	if err := cfg.Validate(); err != nil {
		return nil, setupErr(err)
	}
	model, err := NewModel(cfg.Model)
	if err != nil {
		return nil, setupErr(err)
	}
	cfg.Model = model.Config()
	if mem, ok := sysmem.Total(); ok {
		if err := checkMemory(model, cfg, run.BatchSize, mem); err != nil {
			return nil, setupErr(err)
		}
	}
	if err := model.CheckImageSize(info.Height, info.Width, info.Channels); err != nil {
		return nil, setupErr(fmt.Errorf("dataset %s: %w", run.Data, err))
	}
	switch {
	case info.Examples < run.BatchSize:
		return nil, setupErr(fmt.Errorf("dataset %s has %d view pairs, fewer than one batch of %d", run.Data, info.Examples, run.BatchSize))
	case info.Passes < 1:
		return nil, setupErr(fmt.Errorf("dataset %s has no augmented passes", run.Data))
	}
	stepsPerEpoch := info.Examples / run.BatchSize
	warmup := int(math.Round(run.WarmupEpochs * float64(stepsPerEpoch)))
	if _, err := NewSchedule(run.BaseLR, run.BatchSize, warmup, stepsPerEpoch*run.Epochs); err != nil {
		return nil, setupErr(err)
	}
	p := &runPlan{cfg: cfg, info: info,
		fresh: TrainState{Seed: run.Seed, Data: run.Data, DataFingerprint: info.Fingerprint, ImageHeight: info.Height, ImageWidth: info.Width}}
	if resumeFrom == "" {
		if p.cfg.InitSeed == 0 {
			p.cfg.InitSeed = run.Seed
		}
		if paths, _, err := ListCheckpoints(ctx, run.Out); err != nil {
			return nil, err
		} else if len(paths) > 0 {
			return nil, setupErr(fmt.Errorf("%s already holds checkpoints of a run (%s): continue it with --resume, or train into another folder", run.Out, storage.Base(paths[len(paths)-1])))
		}
		return p, nil
	}
	if p.checkpoint, err = ResolveCheckpoint(ctx, resumeFrom); err != nil {
		return nil, err
	}
	h, err := ReadCheckpointHeader(ctx, p.checkpoint)
	if err != nil {
		return nil, err
	}
	if err := checkResume(p.checkpoint, h, model, run, p.fresh); err != nil {
		return nil, setupErr(err)
	}
	cfg = cfg.withTrainedParams(h.Step)
	p.cfg.Loss, p.cfg.MethodConfig = cfg.Loss, cfg.MethodConfig
	if trained, asked := methodName(h.Step.Method), methodName(cfg.Method); trained != asked {
		return nil, setupErr(fmt.Errorf("checkpoint %s was trained with method %s, not %s: its variables are another method's", p.checkpoint, trained, asked))
	}
	if err := sameMethodSettings(p.checkpoint, h.Step, cfg); err != nil {
		return nil, setupErr(err)
	}
	if p.extendedFrom, err = sameRunSettings(p.checkpoint, h, cfg, run); err != nil {
		return nil, setupErr(err)
	}
	switch {
	case cfg.InitSeed == 0:
		p.cfg.InitSeed = h.Step.InitSeed
	case cfg.InitSeed != h.Step.InitSeed:
		return nil, setupErr(fmt.Errorf("checkpoint %s started from initial weights of seed %d, not %d: a resumed run keeps its own (leave --init-seed out)", p.checkpoint, h.Step.InitSeed, cfg.InitSeed))
	}
	p.header = h
	// A resumed run keeps its precision (a checkpoint without one was trained in float32):
	// the other would not continue the same run, nor bit for bit.
	trained := h.Step.Precision.orDefault()
	switch {
	case cfg.Precision == "":
		p.cfg.Precision = trained
	case cfg.Precision.orDefault() != trained:
		return nil, setupErr(fmt.Errorf("checkpoint %s was trained at precision %s, not %s: resume it at %s", p.checkpoint, trained, cfg.Precision, trained))
	}
	return p, nil
}

// withTrainedParams returns c with the parameters of its loss and the settings of its method
// that it leaves out taken from trained, the checkpoint's configuration, where the loss or
// method is the same: a resumed run continues with them. Those c gives stay, and must then
// equal the checkpoint's (sameRunSettings, sameMethodSettings).
func (c StepConfig) withTrainedParams(trained StepConfig) StepConfig {
	fill := func(given, was map[string]float64) map[string]float64 {
		out := maps.Clone(given)
		for k, v := range was {
			if _, ok := out[k]; !ok {
				if out == nil {
					out = map[string]float64{}
				}
				out[k] = v
			}
		}
		return out
	}
	if c.Loss.Kind == trained.Loss.Kind {
		c.Loss.Params = fill(c.Loss.Params, trained.Loss.Params)
	}
	if methodName(c.Method) == methodName(trained.Method) {
		c.MethodConfig = fill(c.MethodConfig, trained.MethodConfig)
	}
	return c
}

// RunPrecision is the precision a run of cfg will train at: cfg's, or, resuming without one,
// the checkpoint's (float32 for checkpoints from before precisions). The backend is built for
// it (gpu.Options.TF32).
func RunPrecision(ctx context.Context, cfg StepConfig, resumeFrom string) (Precision, error) {
	if cfg.Precision != "" || resumeFrom == "" {
		if err := cfg.Precision.Validate(); err != nil {
			return "", setupErr(err)
		}
		return cfg.Precision.orDefault(), nil
	}
	path, err := ResolveCheckpoint(ctx, resumeFrom)
	if err != nil {
		return "", err
	}
	h, err := ReadCheckpointHeader(ctx, path)
	if err != nil {
		return "", err
	}
	return h.Step.Precision.orDefault(), nil
}

// sameMethodSettings reports a resume whose method settings (queue size, momentum, …)
// differ from the checkpoint's: its queues would not fit, or the run would not continue the
// same training.
func sameMethodSettings(path string, trained, asked StepConfig) error {
	t, err := trained.withMethodDefaults()
	if err != nil {
		return fmt.Errorf("checkpoint %s: %w", path, err)
	}
	a, err := asked.withMethodDefaults()
	if err != nil {
		return err
	}
	if !maps.Equal(t.MethodConfig, a.MethodConfig) {
		tj, _ := json.Marshal(t.MethodConfig)
		aj, _ := json.Marshal(a.MethodConfig)
		return fmt.Errorf("checkpoint %s was trained with %s settings %s, not %s: resume it with the same", path, t.Method, tj, aj)
	}
	return nil
}

// checkResume reports a checkpoint that does not belong to this run: another model, batch
// size, seed, data or image size.
func checkResume(path string, h *CheckpointHeader, model *Model, run RunConfig, fresh TrainState) error {
	if err := model.SameVariables(h.Step.Model); err != nil {
		return fmt.Errorf("checkpoint %s does not fit: %w", path, err)
	}
	st := h.State
	switch {
	case h.Run != nil && h.Run.BatchSize != run.BatchSize:
		return fmt.Errorf("checkpoint %s was trained with batch size %d, not %d: its data position means nothing at another batch size", path, h.Run.BatchSize, run.BatchSize)
	case st.Seed != run.Seed:
		return fmt.Errorf("checkpoint %s was trained with seed %d, not %d: the data order would change", path, st.Seed, run.Seed)
	case st.DataFingerprint != fresh.DataFingerprint:
		return fmt.Errorf("checkpoint %s was trained on other data (%s, fingerprint %s) than %s (fingerprint %s)",
			path, st.Data, st.DataFingerprint, run.Data, fresh.DataFingerprint)
	case st.ImageHeight != fresh.ImageHeight || st.ImageWidth != fresh.ImageWidth:
		return fmt.Errorf("checkpoint %s was trained on %dx%d images, the data has %dx%d", path, st.ImageHeight, st.ImageWidth, fresh.ImageHeight, fresh.ImageWidth)
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
	step, err := NewStep(opts.Backend, plan.cfg, info.Height, info.Width)
	if err != nil {
		return nil, err
	}
	defer step.Finalize()
	cfg = step.Config()

	stepsPerEpoch := info.Examples / run.BatchSize
	total := stepsPerEpoch * run.Epochs
	warmup := int(math.Round(run.WarmupEpochs * float64(stepsPerEpoch)))
	sched, err := NewSchedule(run.BaseLR, run.BatchSize, warmup, total)
	if err != nil {
		return nil, setupErr(err)
	}
	state := plan.fresh
	if plan.checkpoint != "" {
		if state, err = resume(ctx, plan.checkpoint, step, run, logger); err != nil {
			return nil, err
		}
	}
	if info.Passes < run.Epochs {
		logger.Info("the shards hold fewer augmented passes than epochs: epoch e reads pass e mod passes, so views repeat",
			"passes", info.Passes, "epochs", run.Epochs)
	}
	logger.Info("training", "model", cfg.Model.Name, "precision", cfg.Precision, "parameters", step.NumParameters(), "loss", cfg.Loss.Kind,
		"temperature", cfg.Loss.Temperature, "batch", run.BatchSize, "epochs", run.Epochs, "steps", total,
		"steps_per_epoch", stepsPerEpoch, "peak_lr", sched.Peak, "start_step", state.StepsDone)

	log, err := openRunLog(ctx, run.Out, opts.Log, state.StepsDone)
	if log != nil {
		log.logger = logger
	}
	if err != nil {
		return nil, err
	}
	defer log.close()
	tb, err := tensorboard.Create(ctx, storage.Join(run.Out, tensorboard.Dir), time.Now(), int64(state.StepsDone)+1)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := tb.Close(context.WithoutCancel(ctx)); err != nil {
			logger.Warn("closing the TensorBoard event file", "err", err)
		}
	}()

	l := &loop{
		step: step, run: run, opts: opts, sched: sched, state: state, log: log, tb: tb, logger: logger,
		stepsPerEpoch: stepsPerEpoch, total: total, clock: runClock{startSteps: state.StepsDone, monitorImages: opts.MonitorImages},
		summary: &Summary{TotalSteps: total, StepsPerEpoch: stepsPerEpoch, Parameters: step.NumParameters()},
	}
	// Epochs are shown as the log numbers them: from 0, the epoch under way.
	l.bar = opts.Progress.Start("train", int64(state.StepsDone), int64(total), "steps")
	defer l.bar.End() // a failed run ends the bar's line before its error is printed
	log.bar = l.bar
	return l.runAll(ctx)
}

// finishedAlready returns the summary of a run that resumes from the end of a finished run
// with nothing left to do (the same number of epochs): resuming it changes nothing and says
// so. It returns nil when there are steps to run (a finished run given more epochs goes on).
func finishedAlready(ctx context.Context, plan *runPlan, run RunConfig, info SourceInfo, logger *slog.Logger) (*Summary, error) {
	h := plan.header
	if h == nil || !h.State.Finished {
		return nil, nil
	}
	stepsPerEpoch := info.Examples / run.BatchSize
	if h.State.StepsDone < stepsPerEpoch*run.Epochs {
		return nil, nil
	}
	summaryPath := storage.Join(run.Out, SummaryName)
	var sum Summary
	if ok, err := storage.Exists(ctx, summaryPath); err != nil {
		return nil, err
	} else if ok {
		if err := storage.LoadJSON(ctx, summaryPath, &sum); err != nil {
			return nil, err
		}
	} else {
		// Killed between its final checkpoint and its summary: the pruning of older
		// checkpoints is finished, and the summary is rebuilt from the checkpoint and the log
		// (all but the throughput, which only the killed process knew) and written, so the
		// run folder is complete.
		if err := pruneCheckpoints(ctx, run, plan.checkpoint); err != nil {
			return nil, err
		}
		if sum, err = summaryFromLog(ctx, run.Out, h, stepsPerEpoch*run.Epochs, stepsPerEpoch); err != nil {
			return nil, err
		}
		sum.Checkpoint = plan.checkpoint
		if err := writeSummary(ctx, run.Out, &sum); err != nil {
			return nil, err
		}
	}
	sum.Checkpoint = plan.checkpoint
	logger.Info("the run is already finished: nothing to do", "checkpoint", plan.checkpoint, "steps", h.State.StepsDone, "epochs", h.State.Epoch)
	return &sum, nil
}

// writeSummary writes a finished run's summary.json in out, atomically.
func writeSummary(ctx context.Context, out string, s *Summary) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return storage.WriteFile(ctx, storage.Join(out, SummaryName), append(data, '\n'))
}

// summaryFromLog rebuilds the summary of a finished run from its final checkpoint's header
// and its log: the last step's loss and mean q, the last monitor results, the parameter count
// from the header's variables. The throughput is not recorded anywhere and stays 0.
func summaryFromLog(ctx context.Context, out string, h *CheckpointHeader, total, stepsPerEpoch int) (Summary, error) {
	sum := Summary{StepsDone: h.State.StepsDone, TotalSteps: total, Epoch: h.State.Epoch, Finished: true, StepsPerEpoch: stepsPerEpoch}
	for _, v := range h.Variables {
		if v.Trainable && isModelScope(v.Scope) {
			size := 1
			for _, d := range v.Dims {
				size *= d
			}
			sum.Parameters += size
		}
	}
	log, err := storage.ReadFile(ctx, storage.Join(out, LogName))
	if err != nil {
		return sum, fmt.Errorf("rebuilding the summary of the finished run in %s: %w", out, err)
	}
	for line := range bytes.Lines(keepLogLines(log, h.State.StepsDone)) {
		var entry map[string]any
		if json.Unmarshal(line, &entry) != nil {
			continue
		}
		if _, isStep := entry["loss"]; isStep {
			var l LogLine
			if json.Unmarshal(line, &l) == nil && l.Step == h.State.StepsDone {
				sum.Loss, sum.MeanQ = l.Loss, l.MeanQ
			}
			continue
		}
		for _, k := range []string{"epoch", "step", "time"} {
			delete(entry, k)
		}
		sum.Monitor = entry
	}
	return sum, nil
}

// resume restores the checkpoint at path (checked by planRun) into step and returns its state.
func resume(ctx context.Context, path string, step *Step, run RunConfig, logger *slog.Logger) (TrainState, error) {
	ckpt, err := ReadCheckpoint(ctx, path)
	if err != nil {
		return TrainState{}, err
	}
	if err := ckpt.Restore(step); err != nil {
		return TrainState{}, setupErr(err)
	}
	if h := ckpt.Header; h.Run != nil && run.Epochs > h.Run.Epochs {
		logger.Info("extending the run: --epochs is more than it was trained for, so the cosine schedule stretches over the new total from here on",
			"checkpoint", path, "epochs_before", h.Run.Epochs, "epochs", run.Epochs, "extended_from", run.ExtendedFrom)
	}
	st := ckpt.Header.State
	logger.Info("resuming", "checkpoint", path, "steps_done", st.StepsDone, "epoch", st.Epoch, "batch", st.Batch)
	st.Data = run.Data
	st.Finished = false
	return st, nil
}

// sameRunSettings refuses to resume with settings that would make the run another one than
// the checkpoint's (the loss and its parameters, the optimiser and its, the learning rate,
// warm-up and fewer epochs), naming each, and returns the run's ExtendedFrom: more epochs
// is the one change allowed, extending the run (the cosine schedule then stretches over
// the new total from the step the run is at), and the header records it.
func sameRunSettings(path string, h *CheckpointHeader, cfg StepConfig, run RunConfig) ([]int, error) {
	diffs := configDiff(*h, cfg, run)
	if h.Run == nil {
		if len(diffs) > 0 {
			return nil, fmt.Errorf("checkpoint %s was trained with other settings: %s; resume it with the same", path, strings.Join(diffs, "; "))
		}
		return nil, nil
	}
	extended := slices.Clone(h.Run.ExtendedFrom)
	switch {
	case run.Epochs > h.Run.Epochs:
		extended = append(extended, h.Run.Epochs)
	case run.Epochs < h.Run.Epochs:
		diffs = append(diffs, fmt.Sprintf("epochs %d→%d (--epochs may only extend a run)", h.Run.Epochs, run.Epochs))
	}
	if len(diffs) > 0 {
		return nil, fmt.Errorf("checkpoint %s was trained with other settings: %s; resume it with the same", path, strings.Join(diffs, "; "))
	}
	return extended, nil
}

// configDiff lists the settings of a resumed run that differ from its checkpoint's, as
// "name old→new"; the epochs are left to sameRunSettings.
func configDiff(h CheckpointHeader, cfg StepConfig, run RunConfig) []string {
	var diffs []string
	add := func(name string, was, is any) {
		a, _ := json.Marshal(was)
		b, _ := json.Marshal(is)
		if string(a) != string(b) {
			diffs = append(diffs, fmt.Sprintf("%s %s→%s", name, a, b))
		}
	}
	add("loss", h.Step.Loss.withUsedParams(), cfg.Loss.withUsedParams())
	add("optimizer", h.Step.Optimizer, cfg.Optimizer)
	if h.Run != nil {
		add("lr", h.Run.BaseLR, run.BaseLR)
		add("warmup_epochs", h.Run.WarmupEpochs, run.WarmupEpochs)
	}
	return diffs
}

type loop struct {
	step          *Step
	run           RunConfig
	opts          TrainOptions
	sched         Schedule
	state         TrainState
	log           *runLog
	tb            *tensorboard.Writer
	logger        *slog.Logger
	bar           *progress.Reporter
	stepsPerEpoch int
	total         int
	summary       *Summary
	images        int    // images through the network since the start of this process
	monitorNote   string // the last monitor's measurements, for the progress status
	trainTime     time.Duration
	clock         runClock      // the ETA, monitor included
	inflight      *inflightStep // launched, results not read yet
}

func (l *loop) runAll(ctx context.Context) (*Summary, error) {
	for l.state.Epoch < l.run.Epochs {
		stop, err := l.runEpoch(ctx)
		if err != nil {
			return nil, err
		}
		if stop {
			sum, err := l.stop(ctx, false)
			if err == nil && ctx.Err() != nil {
				err = fmt.Errorf("interrupted after step %d of %d (checkpoint %s; continue with --resume): %w",
					sum.StepsDone, l.total, sum.Checkpoint, ctx.Err())
			}
			return sum, err
		}
	}
	return l.stop(ctx, true)
}

// stop writes the last checkpoint (and, at the end, the summary).
func (l *loop) stop(ctx context.Context, finished bool) (*Summary, error) {
	l.state.Finished = finished
	path, err := l.checkpoint(ctx)
	if err != nil {
		return nil, err
	}
	// The bar's line ends (complete, or where an interrupt stopped it) before the notices.
	if finished {
		l.bar.Finish()
	} else {
		l.bar.End()
	}
	s := l.summary
	s.StepsDone, s.Epoch, s.Finished, s.Checkpoint = l.state.StepsDone, l.state.Epoch, finished, path
	if l.trainTime > 0 {
		s.ImagesPerSec = float64(l.images) / l.trainTime.Seconds()
	}
	if finished {
		if err := writeSummary(ctx, l.run.Out, s); err != nil {
			return nil, err
		}
		l.logger.Info("training finished", "steps", s.StepsDone, "loss", s.Loss, "mean_q", s.MeanQ, "checkpoint", path)
	} else {
		l.logger.Info("training stopped; continue with --resume", "steps_done", s.StepsDone, "of", l.total, "checkpoint", path)
	}
	return s, nil
}

// prefetched is one batch read ahead of the step that will use it.
type prefetched struct {
	batch *Batch
	err   error
}

// prefetch reads the batches of one epoch in a goroutine, two ahead of the consumer, so data
// loading (Parquet reads, decoding) overlaps with the step. Cancel ctx to stop it.
func prefetch(ctx context.Context, it BatchIterator) <-chan prefetched {
	ch := make(chan prefetched, 2)
	go func() {
		defer close(ch)
		for {
			b, err := it.Next()
			if errors.Is(err, io.EOF) {
				return
			}
			select {
			case ch <- prefetched{b, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	return ch
}

// runEpoch runs the rest of the current epoch. It reports stop when the run must end early
// (MaxSteps reached, or ctx cancelled after a completed step).
func (l *loop) runEpoch(ctx context.Context) (stop bool, err error) {
	epoch := l.state.Epoch
	it, err := l.opts.Source.Batches(ctx, epoch, l.run.Seed, l.run.BatchSize, l.state.Batch)
	if err != nil {
		return false, fmt.Errorf("reading epoch %d of %s: %w", epoch, l.run.Data, err)
	}
	readCtx, cancelRead := context.WithCancel(ctx)
	ch := prefetch(readCtx, it)
	defer func() {
		cancelRead()
		for range ch { // let the reader goroutine finish before closing its iterator
		}
		if cerr := it.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("closing epoch %d of %s: %w", epoch, l.run.Data, cerr)
		}
	}()

	for l.state.Batch < l.stepsPerEpoch {
		if ctx.Err() != nil {
			return true, l.finishStep(ctx)
		}
		p, ok := <-ch
		if !ok {
			if ctx.Err() != nil {
				return true, l.finishStep(ctx)
			}
			return false, fmt.Errorf("epoch %d of %s ended after %d of %d batches", epoch, l.run.Data, l.state.Batch, l.stepsPerEpoch)
		}
		if p.err != nil {
			if ctx.Err() != nil {
				return true, l.finishStep(ctx)
			}
			return false, fmt.Errorf("reading batch %d of epoch %d of %s: %w", l.state.Batch, epoch, l.run.Data, p.err)
		}
		lr := l.sched.At(l.state.StepsDone)
		launched := time.Now()
		pending, err := l.step.Launch(p.batch, lr)
		if err != nil {
			return false, fmt.Errorf("step %d: %w", l.state.StepsDone+1, err)
		}
		// The previous step's loss is read while this one runs: no round trip to the host
		// between two steps leaves the GPU idle.
		if err := l.finishStepAt(ctx, launched); err != nil {
			return false, err
		}
		l.state.StepsDone++
		l.state.Batch++
		l.inflight = &inflightStep{pending: pending, step: l.state.StepsDone, epoch: epoch, images: 2 * p.batch.N, lr: lr, launched: launched}
		epochDone := l.state.Batch == l.stepsPerEpoch
		maxed := l.run.MaxSteps > 0 && l.state.StepsDone >= l.run.MaxSteps
		ckpt := l.run.CheckpointEvery > 0 && l.state.StepsDone%l.run.CheckpointEvery == 0 && l.state.StepsDone < l.total
		if epochDone || maxed || ckpt {
			if err := l.finishStep(ctx); err != nil {
				return false, err
			}
		}
		if epochDone {
			l.state.Epoch++
			l.state.Batch = 0
			if err := l.afterEpoch(ctx, epoch); err != nil {
				return false, err
			}
		}
		if maxed {
			return true, nil
		}
		if ckpt {
			if _, err := l.checkpoint(ctx); err != nil {
				return false, err
			}
		}
		if epochDone {
			return false, nil
		}
	}
	return false, l.finishStep(ctx)
}

// inflightStep is a launched step whose results are read when the next one is launched.
type inflightStep struct {
	pending *PendingStep
	step    int // its number, from 1
	epoch   int
	images  int
	lr      float64
	// launched is when it was launched. Its time is from then to the next launch (or, last
	// in line, to its results): a CPU backend computes in Launch, so that is the step
	// itself; a GPU one queues there, and each launch follows the read of the step two
	// before it, so in the steady state launches are one step's time apart.
	launched time.Time
}

// finishStep reads the results of the step in flight, if any, when no step follows it.
func (l *loop) finishStep(ctx context.Context) error { return l.finishStepAt(ctx, time.Time{}) }

// finishStepAt reads the results of the step in flight, if any: it checks the loss is finite,
// and logs the step (train.jsonl, TensorBoard, progress). next is when the following step was
// launched (zero: none was).
func (l *loop) finishStepAt(ctx context.Context, next time.Time) error {
	f := l.inflight
	if f == nil {
		return nil
	}
	l.inflight = nil
	res, err := f.pending.Wait()
	if err != nil {
		return fmt.Errorf("step %d: %w", f.step, err)
	}
	if math.IsNaN(res.Loss) || math.IsInf(res.Loss, 0) {
		return l.divergedError(ctx, f.step, res.Loss, f.lr)
	}
	now := time.Now()
	end := next
	if end.IsZero() {
		end = now
	}
	elapsed := end.Sub(f.launched)
	l.images += f.images
	l.trainTime += elapsed
	l.summary.Loss, l.summary.MeanQ = res.Loss, res.MeanQ
	line := LogLine{Step: f.step, Epoch: f.epoch, Loss: res.Loss, LR: f.lr, MeanQ: res.MeanQ,
		ImagesPerSec: float64(f.images) / elapsed.Seconds(), Time: now.UTC().Format(time.RFC3339Nano)}
	if err := l.log.write(line); err != nil {
		return err
	}
	if err := l.tb.Scalars(int64(line.Step), now, tensorboard.Scalar{Tag: "train/loss", Value: line.Loss},
		tensorboard.Scalar{Tag: "train/lr", Value: line.LR}, tensorboard.Scalar{Tag: "train/mean_q", Value: line.MeanQ},
		tensorboard.Scalar{Tag: "train/images_per_s", Value: line.ImagesPerSec}); err != nil {
		return err
	}
	l.bar.Status(fmt.Sprintf("epoch %d (0-%d) loss %.4f q %.3f lr %.4g %.0f img/s%s", f.epoch, l.run.Epochs-1, res.Loss, res.MeanQ, f.lr, line.ImagesPerSec, l.monitorNote))
	l.bar.Set(int64(f.step))
	if left, ok := l.clock.remaining(l); ok {
		l.bar.SetETA(left)
	}
	return nil
}

// divergedError says which step's loss is not finite, at which learning rate and
// temperature, and which checkpoint to go back to (or that there is none yet).
func (l *loop) divergedError(ctx context.Context, step int, loss, lr float64) error {
	where := "no checkpoint was written before it: the run must start again"
	if paths, steps, err := ListCheckpoints(ctx, l.run.Out); err == nil && len(paths) > 0 {
		where = fmt.Sprintf("the last checkpoint, %s, is from step %d, before it", paths[len(paths)-1], steps[len(steps)-1])
	}
	cfg := l.step.Config()
	return fmt.Errorf("step %d: the %s loss is %v (learning rate %.4g, temperature %g); %s. Lower --lr, or raise --temperature, or check the data",
		step, cfg.Loss.Kind, loss, lr, cfg.Loss.Temperature, where)
}

func (l *loop) afterEpoch(ctx context.Context, epoch int) error {
	if l.opts.Monitor == nil || l.run.MonitorEvery == 0 || (epoch+1)%l.run.MonitorEvery != 0 {
		return nil
	}
	began := time.Now()
	res, err := l.opts.Monitor(ctx, epoch, l.step, l.bar)
	if err != nil {
		return fmt.Errorf("monitor after epoch %d: %w", epoch+1, err)
	}
	l.clock.monitorRan(time.Since(began))
	l.summary.Monitor = res
	now := time.Now()
	entry := map[string]any{"epoch": epoch, "step": l.state.StepsDone, "time": now.UTC().Format(time.RFC3339Nano)}
	for k, v := range res {
		entry[k] = v
	}
	if err := l.log.write(entry); err != nil {
		return err
	}
	// Measurements (float64: the kNN accuracies) are curves; integers (kNN's k) are settings.
	var scalars []tensorboard.Scalar
	l.monitorNote = ""
	for _, k := range slices.Sorted(maps.Keys(res)) {
		if v, ok := res[k].(float64); ok {
			scalars = append(scalars, tensorboard.Scalar{Tag: monitorTag(k), Value: v})
			l.monitorNote += fmt.Sprintf(" %s %.4g", k, v)
		}
	}
	if len(scalars) == 0 {
		return nil
	}
	return l.tb.Scalars(int64(l.state.StepsDone), now, scalars...)
}

// monitorTag is the TensorBoard tag of a monitor's measurement: its name's first word is the
// group ("knn_top1" → "knn/top1"), as the step's scalars are grouped under "train/".
func monitorTag(name string) string {
	group, rest, ok := strings.Cut(name, "_")
	if !ok {
		return "monitor/" + name
	}
	return group + "/" + rest
}

// checkpoint writes the current state (a cancelled ctx still gets its checkpoint written:
// that is when it matters most) and prunes old ones.
func (l *loop) checkpoint(ctx context.Context) (string, error) {
	wctx := context.WithoutCancel(ctx)
	path := storage.Join(l.run.Out, CheckpointDir, CheckpointName(l.state.StepsDone))
	run := l.run
	if err := SaveCheckpoint(wctx, path, l.step, &run, l.state); err != nil {
		return "", err
	}
	if err := l.log.flush(wctx); err != nil {
		return "", err
	}
	if err := l.tb.Flush(wctx); err != nil {
		return "", err
	}
	if err := pruneCheckpoints(wctx, l.run, path); err != nil {
		return "", err
	}
	return path, nil
}

// pruneCheckpoints removes all but the run's KeepCheckpoints newest checkpoints (none when
// it is 0), never newest: the one just written or resumed from.
func pruneCheckpoints(ctx context.Context, run RunConfig, newest string) error {
	if run.KeepCheckpoints == 0 {
		return nil
	}
	paths, _, err := ListCheckpoints(ctx, run.Out)
	if err != nil {
		return err
	}
	for len(paths) > run.KeepCheckpoints {
		if paths[0] != newest {
			if err := storage.Remove(ctx, paths[0]); err != nil {
				return err
			}
		}
		paths = paths[1:]
	}
	return nil
}

// runLog writes JSON lines to the log in the output folder, and a copy to echo if set:
// appended as it goes for a local folder; rewritten whole at each checkpoint for remote ones
// (objects cannot be appended to).
type runLog struct {
	echo   io.Writer          // a copy of each line; nil: none (or no longer: its reader left)
	logger *slog.Logger       // says once that the copy stopped
	bar    *progress.Reporter // cleared before a copy is printed, in case both are on a terminal
	file   *os.File           // local output
	remote string             // remote output path
	lines  []byte             // the whole log, for remote output
}

// openRunLog opens the log of a run that has done stepsDone steps: lines of later steps
// (written after the checkpoint it resumes from, by a run that was then killed) are dropped,
// so the log holds every step once.
func openRunLog(ctx context.Context, out string, echo io.Writer, stepsDone int) (*runLog, error) {
	path := storage.Join(out, LogName)
	l := &runLog{echo: echo}
	var old []byte
	if ok, err := storage.Exists(ctx, path); err != nil {
		return nil, err
	} else if ok {
		if old, err = storage.ReadFile(ctx, path); err != nil {
			return nil, err
		}
	}
	kept := keepLogLines(old, stepsDone)
	if storage.Scheme(out) != "" {
		l.remote, l.lines = path, kept
		return l, nil
	}
	if len(old) > 0 && len(kept) != len(old) {
		if err := storage.WriteFile(ctx, path, kept); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, fmt.Errorf("creating output folder %s: %w", out, err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("opening log %s: %w", path, err)
	}
	l.file = f
	return l, nil
}

// keepLogLines returns the lines of a log whose step is at most stepsDone.
func keepLogLines(log []byte, stepsDone int) []byte {
	var kept []byte
	for line := range bytes.Lines(log) {
		var v struct {
			Step *int `json:"step"`
		}
		if json.Unmarshal(line, &v) == nil && v.Step != nil && *v.Step <= stepsDone {
			kept = append(kept, line...)
		}
	}
	return kept
}

func (l *runLog) write(v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	data = append(data, '\n')
	if l.echo != nil {
		l.bar.Clear()
		// The copy is a courtesy (train.jsonl is the log): a reader that went away, as
		// `| head -1` does, stops the copy, not the run.
		if _, err := l.echo.Write(data); err != nil {
			l.echo = nil
			l.logger.Warn("stopped copying the log to stdout; the run goes on, and its log stays in "+LogName, "err", err)
		}
	}
	if l.file != nil {
		if _, err := l.file.Write(data); err != nil {
			return fmt.Errorf("writing log %s: %w", l.file.Name(), err)
		}
		return nil
	}
	l.lines = append(l.lines, data...)
	return nil
}

func (l *runLog) flush(ctx context.Context) error {
	if l.remote == "" {
		return nil
	}
	return storage.WriteFile(ctx, l.remote, l.lines)
}

func (l *runLog) close() {
	if l.file != nil {
		_ = l.file.Close()
	}
}

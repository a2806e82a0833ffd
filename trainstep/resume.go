package trainstep

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/internal/sysmem"
)

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
	if err := checkResume(p.checkpoint, h, model, run, p.fresh, stepsPerEpoch); err != nil {
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
	// The number of devices may change on resume; what batch norm's statistics are taken
	// over may not: it is part of the function the run trains.
	if was, is := h.Step.BNScope.orGlobal(), cfg.BNScope.orGlobal(); was != is {
		return nil, setupErr(fmt.Errorf("checkpoint %s was trained with batch-norm scope %s, not %s: resume it with --bn-scope=%s", p.checkpoint, was, is, was))
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
func checkResume(path string, h *CheckpointHeader, model *Model, run RunConfig, fresh TrainState, stepsPerEpoch int) error {
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
	return checkPosition(path, st, stepsPerEpoch)
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
		if sum, err = summaryFromLog(ctx, run.Out, h, stepsPerEpoch*run.Epochs, stepsPerEpoch, info.Views); err != nil {
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

// resume restores the checkpoint at path (checked by planRun, whose header planned is) into
// step and returns its state.
func resume(ctx context.Context, path string, planned *CheckpointHeader, step *Step, run RunConfig, logger *slog.Logger) (TrainState, error) {
	ckpt, err := ReadCheckpoint(ctx, path)
	if err != nil {
		return TrainState{}, err
	}
	if ckpt.Header.State != planned.State {
		return TrainState{}, fmt.Errorf("checkpoint %s changed while the run started: resume again", path)
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

package reproduce

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/dcl-beam/dcl-beam/gpu"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/internal/tensorboard"
	"github.com/dcl-beam/dcl-beam/trainstep"
)

// run trains one run and evaluates it.
func (r *runner) run(ctx context.Context, run RunConfig, data dataGen) (*RunResult, error) {
	dir := runDir(r.opts.Out, run.Name)
	changed, err := r.checkRunRecord(ctx, dir, run)
	if err != nil {
		return nil, err
	}
	rr := &RunResult{Config: run, Cell: run.Cell, Paper: run.Paper}
	var sum *trainstep.Summary
	trainedFrom := 0 // the step this call's training resumed from
	trained, err := r.stage(ctx, stageSpec{kind: StageTrain, name: "train " + run.Name, up: data.pretrain,
		done: func() (outcome, error) {
			if changed != "" {
				return outcome{complete: true, stale: "its settings changed: " + changed}, nil
			}
			s, err := readSummary(ctx, dir)
			if err != nil || s == nil || !s.Finished {
				return outcome{}, err
			}
			sum = s
			return outcome{complete: true}, nil
		},
		clear: func() error {
			// The summary marks the run finished: it goes first.
			for _, p := range []string{trainstep.SummaryName, trainstep.LogName, trainstep.CheckpointDir, tensorboard.Dir} {
				if err := storage.RemoveTree(ctx, storage.Join(dir, p)); err != nil {
					return err
				}
			}
			return nil
		},
		do: func() error {
			if err := writeRunRecord(ctx, dir, run); err != nil {
				return err
			}
			s, err := r.train(ctx, run, dir, &trainedFrom)
			sum = s
			return err
		},
		images: func() int64 { return 2 * int64(run.BatchSize()) * int64(sum.StepsDone-trainedFrom) }})
	if err != nil {
		return nil, err
	}
	rr.Train = sum
	// NPC statistics describe the coupling of an encoder, not the spread of its accuracy:
	// the first seed of each cell has them.
	npc := r.firstOfCell(run)
	if err := r.evaluate(ctx, dir, run.Name, run, max(trained, data.eval), npc, &rr.Evaluation); err != nil {
		return nil, err
	}
	if rr.Curves, err = readCurves(ctx, storage.Join(dir, trainstep.LogName)); err != nil {
		return nil, err
	}
	return rr, nil
}

// firstOfCell reports whether run is the first run of its cell.
func (r *runner) firstOfCell(run RunConfig) bool {
	i := slices.IndexFunc(r.cfg.Runs, func(c RunConfig) bool { return c.Cell == run.Cell })
	return i < 0 || r.cfg.Runs[i].Name == run.Name
}

// checkRunRecord compares the settings a run folder was started with to the config's, and
// returns how they differ ("" if they do not). Other settings are refused unless
// --rerun=train retrains the run. A new run folder gets its record.
func (r *runner) checkRunRecord(ctx context.Context, dir string, run RunConfig) (string, error) {
	p := storage.Join(dir, runRecordName)
	ok, err := storage.Exists(ctx, p)
	if err != nil {
		return "", err
	}
	if !ok {
		if r.plan {
			return "", nil
		}
		return "", writeRunRecord(ctx, dir, run)
	}
	got, err := storage.ReadFile(ctx, p)
	if err != nil {
		return "", err
	}
	want, err := runRecord(run)
	if err != nil {
		return "", err
	}
	diff, err := jsonDiff(got, want)
	if err != nil {
		return "", fmt.Errorf("%s: %w", p, err)
	}
	if diff != "" && !r.rerun[StageTrain] {
		err := fmt.Errorf("%s was started with other settings than the config now gives (%s); pass --rerun=train to retrain it, remove %s or use another --output", p, diff, dir)
		if r.plan {
			return "", &planStop{stage: StageRecord{Name: "train " + run.Name, Refused: true, Reason: err.Error()}}
		}
		return "", err
	}
	return diff, nil
}

// runRecord is what run.json holds: the settings that decide what is trained.
func runRecord(run RunConfig) ([]byte, error) {
	run.Paper = PaperFigures{} // the published figures do not change what is trained
	b, err := json.MarshalIndent(run, "", "  ")
	return append(b, '\n'), err
}

func writeRunRecord(ctx context.Context, dir string, run RunConfig) error {
	b, err := runRecord(run)
	if err != nil {
		return err
	}
	return storage.WriteFile(ctx, storage.Join(dir, runRecordName), b)
}

// jsonDiff lists the top-level keys whose values differ between two JSON objects, as
// "key: old → new".
func jsonDiff(was, now []byte) (string, error) {
	var a, b map[string]any
	if err := json.Unmarshal(was, &a); err != nil {
		return "", err
	}
	if err := json.Unmarshal(now, &b); err != nil {
		return "", err
	}
	keys := map[string]bool{}
	for k := range a {
		keys[k] = true
	}
	for k := range b {
		keys[k] = true
	}
	show := func(v any, ok bool) string {
		if !ok {
			return "(default)"
		}
		j, _ := json.Marshal(v)
		return string(j)
	}
	var diffs []string
	for _, k := range sortedKeys(keys) {
		va, okA := a[k]
		vb, okB := b[k]
		if sa, sb := show(va, okA), show(vb, okB); sa != sb {
			diffs = append(diffs, fmt.Sprintf("%s: %s → %s", k, sa, sb))
		}
	}
	return strings.Join(diffs, ", "), nil
}

func (r *runner) train(ctx context.Context, run RunConfig, dir string, from *int) (*trainstep.Summary, error) {
	training, err := run.Training()
	if err != nil {
		return nil, err
	}
	if training.Backend, err = gpu.ParseKind(r.backendOf(run)); err != nil {
		return nil, err
	}
	if err := training.Step.Validate(); err != nil {
		return nil, err
	}
	training.Run.Data, training.Run.Out = r.pretrainDir(), dir
	training.Run.KeepCheckpoints, training.Run.MonitorEvery = 2, r.cfg.Evaluate.KNNEvery
	if err := training.Run.Validate(); err != nil {
		return nil, err
	}
	_, steps, err := trainstep.ListCheckpoints(ctx, dir)
	if err != nil {
		return nil, err
	}
	resume := ""
	if len(steps) > 0 {
		resume = dir
		*from = steps[len(steps)-1]
		r.log.Info("resuming", "run", run.Name, "from_step", steps[len(steps)-1])
	}
	var log io.Writer
	if r.opts.TrainLog {
		log = r.opts.Stderr
	}
	if m := r.cfg.Evaluate.KNNMonitor; m != nil {
		training.KNN = trainstep.KNNMonitorOptions{Bank: m.Bank, Queries: m.Queries, Seed: m.Seed, Full: m.Full, Linear: m.Linear}
	}
	training.Plugin, training.Resume = r.opts.Plugin, resume
	training.KNNData, training.KNNTest = r.evalTrainDir(), r.evalTestDir()
	training.Log, training.Progress, training.Logger = log, r.opts.Progress, r.log
	return trainstep.TrainOnShards(ctx, training)
}

func readSummary(ctx context.Context, dir string) (*trainstep.Summary, error) {
	p := storage.Join(dir, trainstep.SummaryName)
	ok, err := storage.Exists(ctx, p)
	if err != nil || !ok {
		return nil, err
	}
	var s trainstep.Summary
	if err := storage.LoadJSON(ctx, p, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

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

// run trains one run (its pack's training did, if it has one) and evaluates it.
func (r *runner) run(ctx context.Context, run RunConfig, data dataGen) (*RunResult, error) {
	t, err := r.trained(ctx, run, data)
	if err != nil {
		return nil, err
	}
	rr := &RunResult{Config: run, Cell: run.Cell, Paper: run.Paper, Train: t.sum}
	// NPC statistics describe the coupling of an encoder, not the spread of its accuracy:
	// the first seed of each cell has them.
	npc := r.firstOfCell(run)
	if err := r.evaluate(ctx, t.dir, run.Name, run, max(t.gen, data.eval), npc, &rr.Evaluation); err != nil {
		return nil, err
	}
	if rr.Curves, err = readCurves(ctx, storage.Join(t.dir, trainstep.LogName)); err != nil {
		return nil, err
	}
	return rr, nil
}

// runTraining is one run's train stage: its spec, and what it ends with.
type runTraining struct {
	run  RunConfig
	dir  string
	spec stageSpec
	sum  *trainstep.Summary
	from int // the step this call's training resumed from
	gen  gen // what the stages that read the run's checkpoint get
}

// newTraining prepares run's train stage; its do trains the run alone.
func (r *runner) newTraining(ctx context.Context, run RunConfig, data dataGen) (*runTraining, error) {
	t := &runTraining{run: run, dir: runDir(r.opts.Out, run.Name)}
	changed, err := r.checkRunRecord(ctx, t.dir, run)
	if err != nil {
		return nil, err
	}
	t.spec = stageSpec{kind: StageTrain, name: "train " + run.Name, up: data.pretrain,
		done: func() (outcome, error) {
			if changed != "" {
				return outcome{complete: true, stale: "its settings changed: " + changed}, nil
			}
			s, err := readSummary(ctx, t.dir)
			if err != nil || s == nil || !s.Finished {
				return outcome{}, err
			}
			t.sum = s
			return outcome{complete: true}, nil
		},
		clear: func() error {
			// The summary marks the run finished: it goes first.
			for _, p := range []string{trainstep.SummaryName, trainstep.LogName, trainstep.CheckpointDir, tensorboard.Dir} {
				if err := storage.RemoveTree(ctx, storage.Join(t.dir, p)); err != nil {
					return err
				}
			}
			return nil
		},
		do: func() error {
			training, err := r.shardTraining(ctx, t)
			if err != nil {
				return err
			}
			t.sum, err = trainstep.TrainOnShards(ctx, training)
			return err
		},
		images: func() int64 { return 2 * int64(run.BatchSize()) * int64(t.sum.StepsDone-t.from) }}
	return t, nil
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
	if diff != "" && !r.rerun[StageTrain] && !slices.Contains(r.opts.RerunStages, "train "+run.Name) {
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

// shardTraining writes the run's record and makes its training: its settings, where it
// reads and writes, and the checkpoint it resumes from (t.from: that checkpoint's step).
func (r *runner) shardTraining(ctx context.Context, t *runTraining) (trainstep.ShardTraining, error) {
	run, dir := t.run, t.dir
	if err := writeRunRecord(ctx, dir, run); err != nil {
		return trainstep.ShardTraining{}, err
	}
	training, err := run.Training()
	if err != nil {
		return training, err
	}
	if training.Backend, err = gpu.ParseKind(r.backendOf(run)); err != nil {
		return training, err
	}
	if err := training.Step.Validate(); err != nil {
		return training, err
	}
	training.Run.Data, training.Run.Out = r.pretrainDir(), dir
	training.Run.KeepCheckpoints, training.Run.MonitorEvery = 2, r.cfg.Evaluate.KNNEvery
	if err := training.Run.Validate(); err != nil {
		return training, err
	}
	_, steps, err := trainstep.ListCheckpoints(ctx, dir)
	if err != nil {
		return training, err
	}
	resume := ""
	if len(steps) > 0 {
		resume = dir
		t.from = steps[len(steps)-1]
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
	return training, nil
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

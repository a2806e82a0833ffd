package reproduce

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/dcl-beam/dcl-beam/gpu"
	"github.com/dcl-beam/dcl-beam/internal/guard"
	"github.com/dcl-beam/dcl-beam/internal/progress"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/internal/tensorboard"
	"github.com/dcl-beam/dcl-beam/pipelines"
	"github.com/dcl-beam/dcl-beam/shards"
	"github.com/dcl-beam/dcl-beam/trainstep"
	"github.com/dcl-beam/dcl-beam/trainstep/knnmonitor"
	"github.com/dcl-beam/dcl-beam/trainstep/shardrun"
	"github.com/dcl-beam/dcl-beam/transforms/augment"
	"github.com/dcl-beam/dcl-beam/transforms/datasets"
)

// Options are the parts of a reproduction that are not in its config.
type Options struct {
	// Out is the run directory (local or gs://): every stage's output, results.json,
	// report.md, plots/ and history/.
	Out string
	// Input, when set, replaces the config's dataset.input (the data lies elsewhere here).
	Input string
	// Backend, when set, replaces every run's backend (cpu, cuda, auto); Plugin is the CUDA
	// PJRT plugin.
	Backend string
	Plugin  string
	// CodeVersion is recorded in the shards, the stage ledger, the results and the history.
	CodeVersion string
	// Rerun lists the kinds of stages to recompute even where their outputs are complete;
	// what depends on them is recomputed too.
	Rerun []StageKind
	// RerunOnCodeChange recomputes every output that another code version made.
	RerunOnCodeChange bool
	// WaitLock waits for another reproduction that holds the run directory to finish,
	// instead of failing at once with ErrLocked.
	WaitLock bool
	// Stderr gets, with TrainLog, a copy of each training's JSON-lines log, which always
	// goes to its run folder's train.jsonl; the stages' notices go to Logger.
	Stderr   io.Writer
	TrainLog bool
	// Progress shows every stage's progress (preprocess, train, embed, knn, linear, npc).
	Progress progress.Options
	Logger   *slog.Logger
	// Now is the clock (tests fix it); nil: time.Now.
	Now func() time.Time
	// StageTimes, when set, is where a completed reproduction writes the time of each stage
	// that ran (StageTimes, JSON).
	StageTimes string
}

// Folders of a run directory.
const (
	DataDir      = "data"      // data/pretrain, data/eval-train, data/eval-test
	RunsDir      = "runs"      // runs/NAME: one training run and its evaluations
	BaselinesDir = "baselines" // baselines/raw-pixels, baselines/random-init
	PlotsDir     = "plots"
	// ResultsName and ReportName are written last, when every stage has succeeded.
	ResultsName = "results.json"
	ReportName  = "report.md"
	// runRecordName holds the settings a run was started with, so that a changed config
	// never reuses a run trained with other settings.
	runRecordName = "run.json"
)

// The folders of one encoder's evaluations (a run's, or a baseline's), relative to its
// folder: its embeddings of each split (test, train, pairs) and its NPC report and figures.
func embeddingsDir(dir, split string) string { return storage.Join(dir, "embeddings", split) }
func npcDir(dir string) string               { return storage.Join(dir, "npc") }

// seriesName is how plots and NPC reports name run name (seriesNames); a baseline keeps its
// name.
func (r *runner) seriesName(name string) string {
	if r.names == nil {
		r.names = seriesNames(r.cfg.Runs)
	}
	if n, ok := r.names[name]; ok {
		return n
	}
	return name
}

// runDir is run name's folder in the run directory out.
func runDir(out, name string) string { return storage.Join(out, RunsDir, name) }

// runner holds one reproduction's state as it goes through the stages.
type runner struct {
	cfg    *Config
	opts   Options
	log    *slog.Logger
	rerun  map[StageKind]bool
	ledger *ledger
	// ranNow names the stages that ran (or would, in a plan) in this call by their gen.
	ranNow map[gen]string
	// plan decides every stage without running any or writing anything.
	plan   bool
	stages []StageRecord
	times  []StageTime // of the stages that ran
	// size and classes of the data, known once the evaluation shards exist.
	numClasses int
	names      map[string]string // seriesNames of the config's runs, once asked for
	load       string            // the machine's load average when the call started
}

func newRunner(cfg *Config, opts Options, plan bool) (*runner, error) {
	if opts.Out == "" {
		return nil, errors.New("no run directory (--output)")
	}
	if opts.Input != "" {
		cfg.Dataset.Input = opts.Input
	}
	if opts.Stderr == nil {
		opts.Stderr = io.Discard
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.CodeVersion == "" {
		opts.CodeVersion = "unknown" // as the shards record it
	}
	r := &runner{cfg: cfg, opts: opts, plan: plan, log: opts.Logger.With("experiment", cfg.Name), rerun: map[StageKind]bool{}, ranNow: map[gen]string{},
		load: loadAverage()}
	for _, k := range opts.Rerun {
		r.rerun[k] = true
	}
	return r, nil
}

// Run runs every stage of cfg that is not complete yet (and those Options.Rerun and
// RerunOnCodeChange ask for, with what depends on them), then appends the figures to the
// history and writes results.json, report.md and the plots. A stage whose outputs are
// complete is skipped, unless a stage it depends on was redone since the last complete
// reproduction; a killed run continues where it stopped and a finished one is a no-op
// (apart from a history entry and the report). It returns the results only when every stage
// succeeded; the gates' verdicts are in them (Results.FailedGates), not in the error.
//
// The run directory is locked for the whole call (see ErrLocked).
func Run(ctx context.Context, cfg *Config, opts Options) (*Results, error) {
	r, err := newRunner(cfg, opts, false)
	if err != nil {
		return nil, err
	}
	unlock, err := lockRunDir(ctx, r.opts.Out, r.cfg.Dataset, r.opts.WaitLock, r.log)
	if err != nil {
		return nil, err
	}
	defer unlock()
	start := r.opts.Now()
	if r.ledger, err = loadLedger(ctx, r.opts.Out); err != nil {
		return nil, err
	}
	// Read before any stage runs, so that an unreadable history fails in seconds.
	history, err := ReadHistory(ctx, r.opts.Out)
	if err != nil {
		return nil, err
	}
	if err := sameExperiment(r.opts.Out, r.cfg.Name, history); err != nil {
		return nil, err
	}
	if res, err := r.reportedBefore(ctx, history); res != nil || err != nil {
		return res, err
	}
	res, err := r.execute(ctx)
	if err != nil {
		return nil, err
	}
	res.Time = start.UTC()
	res.Wall = r.opts.Now().Sub(start).Round(time.Second).String()
	if err := r.finish(ctx, res, history); err != nil {
		return nil, err
	}
	if r.opts.StageTimes != "" {
		if err := writeStageTimes(ctx, r.opts.StageTimes, r.stageTimes(ctx, start)); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// Plan decides every stage as Run would, with the same options, and returns what it would
// skip and run, and why, without running or writing anything.
func Plan(ctx context.Context, cfg *Config, opts Options) ([]StageRecord, error) {
	r, err := newRunner(cfg, opts, true)
	if err != nil {
		return nil, err
	}
	if err := guard.CheckOverlap(runDirClaim(r.opts.Out, r.cfg.Dataset, false, nil)); err != nil {
		return nil, err
	}
	if r.ledger, err = loadLedger(ctx, r.opts.Out); err != nil {
		return nil, err
	}
	res, err := r.execute(ctx)
	if err != nil {
		return nil, err
	}
	return res.Stages, nil
}

// finish records a completed reproduction: the comparison with the previous one and the
// gates, the plots, results.json and report.md, then its file in the history, and last the
// ledger, whose stages are then all consistent. The history file comes after the report, so
// that a reproduction killed (or out of disk) while reporting leaves no history entry that
// the next one would take for the previous reproduction.
func (r *runner) finish(ctx context.Context, res *Results, history []Reproduction) error {
	var prev *Reproduction
	if len(history) > 0 {
		prev = &history[len(history)-1]
	}
	// The line tells a user that the stages are done, and the kill test when the report
	// phase begins.
	r.log.Info("reporting: the comparison, the gates, results.json, report.md, the plots and the history", "out", r.opts.Out)
	compare(r.cfg, res, prev)
	rows := historyRows(res)
	name, err := historyName(ctx, r.opts.Out, res.Time)
	if err != nil {
		return err
	}
	res.HistoryFile = name
	history = append(history, Reproduction{File: name, Time: res.Time, CodeVersion: res.CodeVersion,
		ConfigFingerprint: res.ConfigFingerprint, Rows: rows})
	r.ledger.Reporting = name
	if err := r.saveLedger(ctx); err != nil {
		return err
	}
	if err := writeReport(ctx, r.opts.Out, res, history); err != nil {
		return err
	}
	if err := writeHistory(ctx, r.opts.Out, name, rows); err != nil {
		return err
	}
	return r.completeLedger(ctx)
}

// reportedBefore finishes the record of a reproduction that an earlier call of the same
// config and code completed up to its history entry and was stopped (killed, out of disk)
// before it recorded so in the ledger: the stages are consistent, the report and the history
// are written, and running again would add a second entry for one reproduction. It returns
// that reproduction's results, or nil when there is none to finish.
func (r *runner) reportedBefore(ctx context.Context, history []Reproduction) (*Results, error) {
	name := r.ledger.Reporting
	if name == "" || len(history) == 0 {
		return nil, nil
	}
	last := history[len(history)-1]
	if last.File != name || last.ConfigFingerprint != r.cfg.Fingerprint() || last.CodeVersion != r.opts.CodeVersion {
		return nil, nil
	}
	var res Results
	if err := storage.LoadJSON(ctx, r.path(ResultsName), &res); err != nil {
		return nil, err
	}
	if res.HistoryFile != name {
		return nil, nil
	}
	r.log.Info("the last call completed this reproduction and was stopped before it recorded so: recorded now",
		"history", storage.Join(HistoryDir, name))
	if err := r.completeLedger(ctx); err != nil {
		return nil, err
	}
	return &res, nil
}

// sameExperiment refuses a run directory whose history is another experiment's: configs
// that differ only in their names compute the same, and would share its stages and mix
// their histories and reports.
func sameExperiment(out, name string, history []Reproduction) error {
	for _, h := range history {
		if got := h.Rows[0].Experiment; got != name {
			return fmt.Errorf("%s holds the history of experiment %q (%s), not %q: give this experiment its own --output, or name it %q",
				out, got, storage.Join(HistoryDir, h.File), name, got)
		}
	}
	return nil
}

// execute goes through the stages: the data, every run, every baseline.
func (r *runner) execute(ctx context.Context) (*Results, error) {
	cfg := r.cfg
	data, err := r.prepareData(ctx)
	if err != nil {
		return nil, err
	}
	res := &Results{
		Experiment: cfg.Name, Description: cfg.Description, Paper: cfg.Paper,
		Dataset: cfg.Dataset, Preprocess: cfg.Preprocess, Evaluate: cfg.Evaluate, CodeVersion: r.opts.CodeVersion,
		ConfigFingerprint: cfg.Fingerprint(),
	}
	for _, run := range cfg.Runs {
		rr, err := r.run(ctx, run, data)
		if err != nil {
			return nil, fmt.Errorf("run %s: %w", run.Name, err)
		}
		res.Runs = append(res.Runs, *rr)
	}
	for _, name := range cfg.Evaluate.Baselines {
		b, err := r.baseline(ctx, name, data)
		if err != nil {
			return nil, fmt.Errorf("baseline %s: %w", name, err)
		}
		res.Baselines = append(res.Baselines, *b)
	}
	res.Stages = r.stages
	summarise(res)
	res.Departures = cfg.Departures
	res.Machine = machine(cfg.Runs, r.opts.Backend, r.load)
	return res, nil
}

func (r *runner) path(elem ...string) string { return storage.Join(r.opts.Out, elem...) }

// The three datasets of an experiment.
func (r *runner) pretrainDir() string  { return r.path(DataDir, "pretrain") }
func (r *runner) evalTrainDir() string { return r.path(DataDir, "eval-train") }
func (r *runner) evalTestDir() string  { return r.path(DataDir, "eval-test") }

// dataGen says which datasets were rewritten since the last complete reproduction:
// training depends on the pretraining pairs, the embeddings on the evaluation images (and
// NPC on the pairs too).
type dataGen struct{ pretrain, eval gen }

// prepareData writes the pretraining view pairs and the two evaluation datasets.
func (r *runner) prepareData(ctx context.Context) (dataGen, error) {
	d := r.cfg.Dataset
	pretrain, err := r.augmentConfig(r.cfg.Preprocess.Augment, true)
	if err != nil {
		return dataGen{}, err
	}
	eval, err := r.augmentConfig(augment.None, false)
	if err != nil {
		return dataGen{}, err
	}
	enc, err := shards.ParseEncoding(r.cfg.Preprocess.Encoding)
	if err != nil && r.cfg.Preprocess.Encoding != "" {
		return dataGen{}, err
	}
	sets := []*dataSet{
		{role: "pretrain", split: cmp.Or(d.PretrainSplit, "train"), dir: r.pretrainDir(), aug: pretrain, passes: max(1, r.cfg.Preprocess.Passes), limit: d.Limit,
			online: r.cfg.Preprocess.Views == "online"},
		{role: "eval-train", split: cmp.Or(d.TrainSplit, "train"), dir: r.evalTrainDir(), aug: eval, passes: 1, limit: d.EvalLimit},
		{role: "eval-test", split: cmp.Or(d.TestSplit, "test"), dir: r.evalTestDir(), aug: eval, passes: 1, limit: d.EvalLimit},
	}
	for _, ds := range sets {
		ds.job, err = pipelines.PlanPreprocess(ctx, pipelines.PreprocessOptions{
			Spec:   datasets.Spec{Dataset: d.Name, Input: d.SplitInput(ds.split), Split: ds.split},
			Output: ds.dir, Augment: ds.aug, Passes: ds.passes, Seed: r.cfg.Preprocess.Seed, MaxSide: r.cfg.Preprocess.MaxSide,
			Online: ds.online,
			Parts:  r.cfg.Preprocess.Shards, Encoding: enc, Limit: int64(ds.limit), CodeVersion: r.opts.CodeVersion,
			Progress: r.opts.Progress,
		})
		if err != nil {
			return dataGen{}, fmt.Errorf("preprocess %s: %w", ds.role, err)
		}
	}
	// Before anything is written: the test split must not read what the encoder trains on or
	// the kNN bank and the probe learn from.
	testSet := sets[2]
	for _, ds := range sets[:2] {
		if a, b, ok := datasets.SharedSource(testSet.job.Plan.Sources(), ds.job.Plan.Sources()); ok {
			return dataGen{}, sharedSourceError(testSet, ds, a, b, "would read")
		}
	}
	var data dataGen
	for _, ds := range sets {
		job := ds.job
		var writes int64
		if r.plan {
			if writes, err = job.StorageEstimate(ctx); err != nil {
				return dataGen{}, fmt.Errorf("preprocess %s: %w", ds.role, err)
			}
		}
		g, err := r.stage(ctx, stageSpec{kind: StagePreprocess, name: "preprocess " + ds.role, writes: writes,
			done: func() (outcome, error) { return r.sameDataset(ctx, ds.dir, job.Config) },
			do: func() error {
				// Whatever is in the folder is this run directory's own: a partial output
				// (perhaps of an earlier build, whose version its shards record), or one
				// that is being redone. Preparing the folder removes the manifest first.
				job.Overwrite = true
				res, err := pipelines.RunPreprocess(ctx, job)
				if err != nil {
					return err
				}
				if res.Manifest == nil {
					return errors.New("the preprocessing job was only submitted or translated (--async or --dry_run): reproduce needs its shards")
				}
				r.log.Info(res.Summary(ds.dir))
				return nil
			},
			digest: func() (string, error) { return datasetDigest(ctx, ds.dir) }})
		if err != nil {
			return dataGen{}, err
		}
		if ds.dir == r.pretrainDir() {
			data.pretrain = max(data.pretrain, g)
		} else {
			data.eval = max(data.eval, g)
		}
	}
	if !r.plan {
		if err := checkDisjoint(ctx, sets); err != nil {
			return dataGen{}, err
		}
	}
	if classes, err := datasets.ClassNames(d.Name, false); err == nil {
		r.numClasses = len(classes)
		return data, nil
	}
	if r.plan {
		return data, nil // the evaluations that need the class count do not run
	}
	// A dataset without a fixed class list (idx, folder): the class list its manifests carry,
	// else one more than the largest label of either evaluation split, which a class absent
	// from one split cannot shrink. (kNN and linear refuse splits whose lists differ.)
	n := 0
	for _, dir := range []string{r.evalTrainDir(), r.evalTestDir()} {
		m, err := shards.ReadManifest(ctx, dir)
		if err != nil {
			return dataGen{}, err
		}
		n = max(n, len(m.Config.Classes))
		for label := range m.Labels {
			n = max(n, int(label)+1)
		}
	}
	r.numClasses = n
	return data, nil
}

// dataSet is one of the three datasets of an experiment.
type dataSet struct {
	role, split, dir string
	aug              augment.Config
	passes, limit    int
	online           bool // base shards: the trainer makes the views (preprocess.views online)
	job              *pipelines.PreprocessJob
}

// sharedSourceError is the one line that refuses a test split sharing images with a split
// the encoder or the evaluations learn from.
func sharedSourceError(test, other *dataSet, inTest, inOther, verb string) error {
	return fmt.Errorf("dataset: the %s split (%s) %s %s, which the %s split (%s) reads too (%s): "+
		"give the dataset root that holds each split in its own place, or each split its own dataset.inputs entry",
		test.split, test.role, verb, inTest, other.split, other.role, inOther)
}

// checkDisjoint refuses to evaluate on a test set whose manifest names a file or folder
// that the pretraining or evaluation-training manifests name too (or one under it), and a
// test manifest that names none (written before manifests recorded their sources), whatever
// made the datasets: this call, an earlier one, or dcl preprocess by hand.
func checkDisjoint(ctx context.Context, sets []*dataSet) error {
	sources := make([][]string, len(sets))
	for i, ds := range sets {
		m, err := shards.ReadManifest(ctx, ds.dir)
		if err != nil {
			return err
		}
		for _, s := range m.Config.Sources {
			sources[i] = append(sources[i], s.Name)
		}
		if len(sources[i]) == 0 {
			return fmt.Errorf("%s records no sources (it was written before manifests named the files each split read), so its split cannot be checked against the others: pass --rerun=preprocess",
				storage.Join(ds.dir, shards.ManifestName))
		}
	}
	for i := range sets[:2] {
		if a, b, ok := datasets.SharedSource(sources[2], sources[i]); ok {
			return sharedSourceError(sets[2], sets[i], a, b, "read")
		}
	}
	return nil
}

// datasetDigest identifies a dataset by its shards' checksums: preprocessing is
// deterministic, so a dataset made again from the same input and settings has the same one.
func datasetDigest(ctx context.Context, dir string) (string, error) {
	m, err := shards.ReadManifest(ctx, dir)
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, sh := range m.Shards {
		fmt.Fprintf(h, "%s %d %s\n", sh.Path, sh.Rows, sh.SHA256)
	}
	fmt.Fprintf(h, "records %d dead %d\n", m.Records, m.DeadLetters.Count)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// augmentConfig builds the augmentation of the config's preset at the dataset's size;
// overrides apply to the pretraining views only.
func (r *runner) augmentConfig(preset string, overrides bool) (augment.Config, error) {
	size := r.cfg.Dataset.ImageSize
	if size == 0 {
		d, err := datasets.Lookup(r.cfg.Dataset.Name)
		if err != nil {
			return augment.Config{}, err
		}
		size = d.ViewSize
	}
	c, err := augment.Preset(preset, size)
	if err != nil {
		return augment.Config{}, err
	}
	if !overrides {
		return c, nil
	}
	params := augment.Params()
	for _, name := range sortedKeys(r.cfg.Preprocess.AugmentOverrides) {
		i := indexOf(params, func(p augment.Param) bool { return p.Name == name })
		if i < 0 {
			names := make([]string, len(params))
			for j, p := range params {
				names[j] = p.Name
			}
			return augment.Config{}, fmt.Errorf("preprocess.augment_overrides: unknown parameter %q (want one of %s)", name, strings.Join(names, ", "))
		}
		if err := params[i].Set(&c, r.cfg.Preprocess.AugmentOverrides[name]); err != nil {
			return augment.Config{}, fmt.Errorf("preprocess.augment_overrides.%s: %w", name, err)
		}
	}
	return c, c.Validate()
}

// sameDataset reports whether dir holds a complete dataset made with want (the program's
// version and the source checksums aside, which planning does not know). Another dataset
// there is an error, unless --rerun=preprocess asks to replace it.
func (r *runner) sameDataset(ctx context.Context, dir string, want shards.Config) (outcome, error) {
	m, err := shards.ReadManifest(ctx, dir)
	if errors.Is(err, shards.ErrNoManifest) {
		return outcome{}, nil
	}
	if err != nil {
		return outcome{}, err
	}
	for _, d := range m.Config.Diff(want) {
		field, _, _ := strings.Cut(d, ":")
		switch field {
		case "code_version", "source_checksum", "sources":
		default:
			diff := strings.Join(m.Config.Diff(want), "; ")
			if r.rerun[StagePreprocess] {
				return outcome{complete: true, stale: "it holds another dataset (" + diff + ")"}, nil
			}
			return outcome{}, fmt.Errorf("%s holds another dataset (%s); pass --rerun=preprocess to replace it, remove it or use another --output", dir, diff)
		}
	}
	return outcome{complete: true, version: m.Config.CodeVersion}, nil
}

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
		images: func() int64 { return 2 * int64(run.BatchSize) * int64(sum.StepsDone-trainedFrom) }})
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
		return "", fmt.Errorf("%s was started with other settings than the config now gives (%s); pass --rerun=train to retrain it, remove %s or use another --output", p, diff, dir)
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
	kind, err := gpu.ParseKind(r.backendOf(run))
	if err != nil {
		return nil, err
	}
	paper := trainstep.PaperDefaults()
	step := stepConfig(run, 3, "")
	if err := step.Validate(); err != nil {
		return nil, err
	}
	train := trainstep.RunConfig{
		Data: r.pretrainDir(), Out: dir, BatchSize: run.BatchSize, Epochs: run.Epochs,
		BaseLR: cmp.Or(run.LR, paper.BaseLR), WarmupEpochs: float64(run.WarmupEpochs), Seed: cmp.Or(run.Seed, 1),
		CheckpointEvery: cmp.Or(run.CheckpointEvery, paper.CheckpointEvery), KeepCheckpoints: 2, MonitorEvery: r.cfg.Evaluate.KNNEvery,
	}
	if err := train.Validate(); err != nil {
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
	var monitor knnmonitor.Options
	if m := r.cfg.Evaluate.KNNMonitor; m != nil {
		monitor = knnmonitor.Options{Bank: m.Bank, Queries: m.Queries, Seed: m.Seed, Full: m.Full}
	}
	return shardrun.Train(ctx, shardrun.Options{
		Step: step, Run: train, Backend: kind, Plugin: r.opts.Plugin, Resume: resume,
		KNNData: r.evalTrainDir(), KNNTest: r.evalTestDir(), KNN: monitor,
		Log: log, Progress: r.opts.Progress, Logger: r.log,
	})
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

// exists is the outcome of a stage whose output is complete when p exists.
func exists(ctx context.Context, p string) (outcome, error) {
	ok, err := storage.Exists(ctx, p)
	return outcome{complete: ok}, err
}

// loadIfExists reads the JSON at p into v; the stage is complete when it was there.
func loadIfExists(ctx context.Context, p string, v any) (outcome, error) {
	ok, err := storage.Exists(ctx, p)
	if err != nil || !ok {
		return outcome{}, err
	}
	if err := storage.LoadJSON(ctx, p, v); err != nil {
		return outcome{}, err
	}
	return outcome{complete: true}, nil
}

func deref(p *float64, def float64) float64 {
	if p == nil {
		return def
	}
	return *p
}

func indexOf[T any](s []T, f func(T) bool) int {
	for i, v := range s {
		if f(v) {
			return i
		}
	}
	return -1
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

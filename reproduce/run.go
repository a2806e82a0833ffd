package reproduce

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"time"

	"github.com/dcl-beam/dcl-beam/internal/guard"
	"github.com/dcl-beam/dcl-beam/internal/progress"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/trainstep"
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
	// Pack, when set, replaces the config's train.pack: how many runs may train together in
	// one compiled step.
	Pack *trainstep.Pack
	// CodeVersion is recorded in the shards, the stage ledger, the results and the history.
	CodeVersion string
	// Rerun lists the kinds of stages to recompute even where their outputs are complete;
	// what depends on them is recomputed too.
	Rerun []StageKind
	// RerunStages names single runs' stages to recompute, as the plan names them ("train
	// dcl"): a run of a pack retrains alone.
	RerunStages []string
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
	// groups are the runs that train together (packGroups, decided once); trainings their
	// train stages, once run or skipped; packNotes what a train stage's record adds to its
	// reason (the runs it trains with).
	groups    []PackGroup
	trainings map[string]*runTraining
	packNotes map[string]string
	// deviceMemory replaces the package's deviceMemory where set (tests).
	deviceMemory func(backend string) (int64, string)
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
		load: loadAverage(), trainings: map[string]*runTraining{}, packNotes: map[string]string{}}
	for _, k := range opts.Rerun {
		r.rerun[k] = true
	}
	if err := checkRerunStages(cfg, opts.RerunStages); err != nil {
		return nil, err
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
	// A reproduction killed while it wrote its history file left the file's temporary, under
	// a name no later reproduction writes again (each has its own): only its writer, which
	// holds the lock as this one does, could have been writing it.
	if _, err := storage.RemoveTemporaries(ctx, storage.Join(r.opts.Out, HistoryDir)); err != nil {
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
	var stop *planStop
	if errors.As(err, &stop) {
		return append(r.stages, stop.stage), nil
	}
	if err != nil {
		return nil, err
	}
	return res.Stages, nil
}

// planStop is what a plan meets where a run would stop with an error that the plan can
// name (a run folder trained with other settings): the plan ends there, with the refusal
// as its last stage.
type planStop struct{ stage StageRecord }

func (p *planStop) Error() string { return p.stage.Name + ": " + p.stage.Reason }

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
	rows := historyRows(res)
	if prev != nil && len(r.times) == 0 && prev.ConfigFingerprint == res.ConfigFingerprint && sameFigures(prev.Rows, rows) {
		return r.finishUnchanged(ctx, res, history)
	}
	compare(r.cfg, res, prev)
	name, err := historyName(ctx, r.opts.Out, res.Time)
	if err != nil {
		return err
	}
	res.HistoryFile = name
	history = append(history, Reproduction{File: name, Time: res.Time, CodeVersion: res.CodeVersion,
		ConfigFingerprint: res.ConfigFingerprint, Rows: rows})
	r.ledger.Reporting = name
	if err := reportStopped(ctx); err != nil {
		return err
	}
	if err := r.saveLedger(ctx); err != nil {
		return err
	}
	if err := writeReport(ctx, r.log, r.opts.Out, res, history); err != nil {
		return err
	}
	if err := reportStopped(ctx); err != nil {
		return err
	}
	if err := writeHistory(ctx, r.opts.Out, name, rows); err != nil {
		return err
	}
	if err := reportStopped(ctx); err != nil {
		return err
	}
	return r.completeLedger(ctx)
}

// reportStopped is the error of a report phase that a signal (ctx) stops between two of
// its writes. Local writes finish once started, so a phase that did not look would write
// everything and exit 0 after the signal; stopped at a write's end, it leaves what it wrote
// consistent (the history entry, which records a reproduction, after the report; the
// ledger last), and the same command, run again, finishes it.
func reportStopped(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("stopped while reporting (every stage is done; run the same command again to write the report): %w", err)
	}
	return nil
}

// finishUnchanged reports a call that ran no stage and found the figures of the last
// reproduction in the history with the same config: it is that reproduction again, so the
// history gets no second entry of it (a duplicate that a trend would count as a second
// measurement), and the report compares it, as before, with the one before it and says so.
func (r *runner) finishUnchanged(ctx context.Context, res *Results, history []Reproduction) error {
	last := history[len(history)-1]
	var prev *Reproduction
	if len(history) > 1 {
		prev = &history[len(history)-2]
	}
	res.Unchanged = true
	compare(r.cfg, res, prev)
	res.HistoryFile, res.CodeVersion = last.File, last.CodeVersion
	r.log.Info("no stage ran and the figures are the last reproduction's: no history entry added", "history", storage.Join(HistoryDir, last.File))
	if err := writeReport(ctx, r.log, r.opts.Out, res, history); err != nil {
		return err
	}
	if err := reportStopped(ctx); err != nil {
		return err
	}
	return r.completeLedger(ctx)
}

// sameFigures reports whether two reproductions have the same figures of the same runs.
func sameFigures(a, b []HistoryRow) bool {
	key := func(h HistoryRow) string { return h.Run + "\x00" + h.Metric }
	values := make(map[string]float64, len(a))
	for _, h := range a {
		values[key(h)] = h.Value
	}
	if len(values) != len(b) {
		return false
	}
	for _, h := range b {
		v, ok := values[key(h)]
		if !ok || math.Float64bits(v) != math.Float64bits(h.Value) {
			return false
		}
	}
	return true
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
	res.Departures, res.ToolkitDepartures, res.Overrides = cfg.Departures, cfg.ToolkitDepartures(), cfg.Overrides
	res.Machine = machine(cfg.Runs, r.opts.Backend, r.load)
	return res, nil
}

func (r *runner) path(elem ...string) string { return storage.Join(r.opts.Out, elem...) }

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

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

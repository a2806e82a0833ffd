package reproduce

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/dcl-beam/dcl-beam/analysis"
	"github.com/dcl-beam/dcl-beam/gpu"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/pipelines"
	"github.com/dcl-beam/dcl-beam/shards"
	"github.com/dcl-beam/dcl-beam/trainstep"
	"github.com/dcl-beam/dcl-beam/trainstep/shardrun"
	"github.com/dcl-beam/dcl-beam/transforms/augment"
	"github.com/dcl-beam/dcl-beam/transforms/datasets"
)

// Options are the parts of a reproduction that are not in its config.
type Options struct {
	// Out is the run directory (local or gs://): every stage's output, results.json,
	// report.md and plots/.
	Out string
	// Input, when set, replaces the config's dataset.input (the data lies elsewhere here).
	Input string
	// Backend, when set, replaces every run's backend (cpu, cuda, auto); Plugin is the CUDA
	// PJRT plugin.
	Backend string
	Plugin  string
	// CodeVersion is recorded in the shards and the results.
	CodeVersion string
	// Stderr gets the progress bars (Progress: terminals only) and, with TrainLog, a copy of
	// each training's JSON-lines log, which always goes to its run folder's train.jsonl; the
	// stages' notices go to Logger.
	Stderr   io.Writer
	Progress bool
	TrainLog bool
	Logger   *slog.Logger
	// Now is the clock (tests fix it); nil: time.Now.
	Now func() time.Time
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

// runner holds one reproduction's state as it goes through the stages.
type runner struct {
	cfg    *Config
	opts   Options
	log    *slog.Logger
	stages []StageRecord
	// size and classes of the data, known once the evaluation shards exist.
	numClasses int
}

// Run runs every stage of cfg that is not complete yet, then writes results.json, report.md
// and the plots. A stage whose outputs are complete is skipped, unless a stage it depends on
// ran in this call; a killed run continues where it stopped and a finished one is a no-op
// (apart from rewriting the report). It returns the results only when every stage succeeded.
func Run(ctx context.Context, cfg *Config, opts Options) (*Results, error) {
	if opts.Out == "" {
		return nil, errors.New("no run directory (--out)")
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
	r := &runner{cfg: cfg, opts: opts, log: opts.Logger.With("experiment", cfg.Name)}
	start := opts.Now()

	ran, err := r.prepareData(ctx)
	if err != nil {
		return nil, err
	}
	res := &Results{
		Experiment: cfg.Name, Description: cfg.Description, Paper: cfg.Paper,
		Dataset: cfg.Dataset, Preprocess: cfg.Preprocess, Evaluate: cfg.Evaluate, CodeVersion: opts.CodeVersion,
	}
	for _, run := range cfg.Runs {
		rr, err := r.run(ctx, run, ran)
		if err != nil {
			return nil, fmt.Errorf("run %s: %w", run.Name, err)
		}
		res.Runs = append(res.Runs, *rr)
	}
	for _, name := range cfg.Evaluate.Baselines {
		b, err := r.baseline(ctx, name, ran)
		if err != nil {
			return nil, fmt.Errorf("baseline %s: %w", name, err)
		}
		res.Baselines = append(res.Baselines, *b)
	}
	res.Stages = r.stages
	res.Wall = opts.Now().Sub(start).Round(time.Second).String()
	if err := writeReport(ctx, opts.Out, res); err != nil {
		return nil, err
	}
	return res, nil
}

// stage runs do unless done says the outputs are complete and no stage it depends on ran in
// this call (upstreamRan). It reports whether do ran.
func (r *runner) stage(ctx context.Context, name string, upstreamRan bool, done func() (bool, error), do func() error) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if !upstreamRan {
		ok, err := done()
		if err != nil {
			return false, fmt.Errorf("%s: %w", name, err)
		}
		if ok {
			r.log.Info("stage complete, skipped", "stage", name)
			r.stages = append(r.stages, StageRecord{Name: name, Skipped: true})
			return false, nil
		}
	}
	r.log.Info("stage starts", "stage", name)
	t0 := r.opts.Now()
	if err := do(); err != nil {
		return false, fmt.Errorf("%s: %w", name, err)
	}
	wall := r.opts.Now().Sub(t0)
	r.log.Info("stage done", "stage", name, "wall", wall.Round(time.Millisecond))
	r.stages = append(r.stages, StageRecord{Name: name, Wall: wall.Round(time.Millisecond).String()})
	return true, nil
}

func (r *runner) path(elem ...string) string { return storage.Join(r.opts.Out, elem...) }

// The three datasets of an experiment.
func (r *runner) pretrainDir() string  { return r.path(DataDir, "pretrain") }
func (r *runner) evalTrainDir() string { return r.path(DataDir, "eval-train") }
func (r *runner) evalTestDir() string  { return r.path(DataDir, "eval-test") }

// dataRan says which datasets were (re)written in this call: training depends on the
// pretraining pairs, the embeddings on the evaluation images (and NPC on the pairs too).
type dataRan struct{ pretrain, eval bool }

// prepareData writes the pretraining view pairs and the two evaluation datasets.
func (r *runner) prepareData(ctx context.Context) (dataRan, error) {
	d := r.cfg.Dataset
	pretrain, err := r.augmentConfig(r.cfg.Preprocess.Augment, true)
	if err != nil {
		return dataRan{}, err
	}
	eval, err := r.augmentConfig(augment.None, false)
	if err != nil {
		return dataRan{}, err
	}
	var ran dataRan
	for _, ds := range []struct {
		name, split, dir string
		aug              augment.Config
		passes           int
		limit            int
	}{
		{"preprocess pretrain", orDefault(d.PretrainSplit, "train"), r.pretrainDir(), pretrain, r.cfg.Preprocess.Passes, d.Limit},
		{"preprocess eval-train", orDefault(d.TrainSplit, "train"), r.evalTrainDir(), eval, 1, d.EvalLimit},
		{"preprocess eval-test", orDefault(d.TestSplit, "test"), r.evalTestDir(), eval, 1, d.EvalLimit},
	} {
		enc, err := shards.ParseEncoding(r.cfg.Preprocess.Encoding)
		if err != nil && r.cfg.Preprocess.Encoding != "" {
			return dataRan{}, err
		}
		job, err := pipelines.PlanPreprocess(ctx, pipelines.PreprocessOptions{
			Spec:   datasets.Spec{Dataset: d.Name, Input: d.Input, Split: ds.split},
			Output: ds.dir, Augment: ds.aug, Passes: ds.passes, Seed: r.cfg.Preprocess.Seed,
			Parts: r.cfg.Preprocess.Shards, Encoding: enc, Limit: int64(ds.limit), CodeVersion: r.opts.CodeVersion,
		})
		if err != nil {
			return dataRan{}, fmt.Errorf("%s: %w", ds.name, err)
		}
		did, err := r.stage(ctx, ds.name, false,
			func() (bool, error) { return sameDataset(ctx, ds.dir, job.Config) },
			func() error {
				// No manifest: whatever is in the folder is this run directory's own partial
				// output (perhaps of an earlier build, whose version its shards record).
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
			})
		if err != nil {
			return dataRan{}, err
		}
		if ds.dir == r.pretrainDir() {
			ran.pretrain = ran.pretrain || did
		} else {
			ran.eval = ran.eval || did
		}
	}
	if classes, err := datasets.ClassNames(d.Name, false); err == nil {
		r.numClasses = len(classes)
		return ran, nil
	}
	// A dataset without a fixed class list (idx, folder): the class list its manifests carry,
	// else one more than the largest label of either evaluation split, which a class absent
	// from one split cannot shrink. (kNN and linear refuse splits whose lists differ.)
	n := 0
	for _, dir := range []string{r.evalTrainDir(), r.evalTestDir()} {
		m, err := shards.ReadManifest(ctx, dir)
		if err != nil {
			return dataRan{}, err
		}
		n = max(n, len(m.Config.Classes))
		for label := range m.Labels {
			n = max(n, int(label)+1)
		}
	}
	r.numClasses = n
	return ran, nil
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
// version and the source checksums aside, which planning does not know).
func sameDataset(ctx context.Context, dir string, want shards.Config) (bool, error) {
	m, err := shards.ReadManifest(ctx, dir)
	if errors.Is(err, shards.ErrNoManifest) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for _, d := range m.Config.Diff(want) {
		field, _, _ := strings.Cut(d, ":")
		switch field {
		case "code_version", "source_checksum", "sources":
		default:
			return false, fmt.Errorf("%s holds another dataset (%s); remove it or use another --out", dir, strings.Join(m.Config.Diff(want), "; "))
		}
	}
	return true, nil
}

// run trains one run and evaluates it.
func (r *runner) run(ctx context.Context, run RunConfig, ran dataRan) (*RunResult, error) {
	dir := r.path(RunsDir, run.Name)
	if err := r.checkRunRecord(ctx, dir, run); err != nil {
		return nil, err
	}
	rr := &RunResult{Config: run, Paper: run.Paper}
	var sum *trainstep.Summary
	trained, err := r.stage(ctx, "train "+run.Name, ran.pretrain,
		func() (bool, error) {
			s, err := readSummary(ctx, dir)
			if err != nil || s == nil || !s.Finished {
				return false, err
			}
			sum = s
			return true, nil
		},
		func() error {
			if ran.pretrain {
				// The checkpoints of this run, if any, were trained on data that has just
				// been rewritten: the run starts afresh.
				for _, p := range []string{trainstep.CheckpointDir, trainstep.LogName, trainstep.SummaryName} {
					if err := storage.RemoveTree(ctx, storage.Join(dir, p)); err != nil {
						return err
					}
				}
			}
			s, err := r.train(ctx, run, dir)
			sum = s
			return err
		})
	if err != nil {
		return nil, err
	}
	rr.Train = sum
	if err := r.evaluate(ctx, dir, run.Name, run.Temperature, trained || ran.eval, true, &rr.Evaluation); err != nil {
		return nil, err
	}
	if rr.Curves, err = readCurves(ctx, storage.Join(dir, trainstep.LogName)); err != nil {
		return nil, err
	}
	return rr, nil
}

// checkRunRecord refuses a run folder started with other settings, and records the settings
// of a new one.
func (r *runner) checkRunRecord(ctx context.Context, dir string, run RunConfig) error {
	p := storage.Join(dir, runRecordName)
	run.Paper = PaperFigures{} // the published figures do not change what is trained
	want, err := json.MarshalIndent(run, "", "  ")
	if err != nil {
		return err
	}
	ok, err := storage.Exists(ctx, p)
	if err != nil {
		return err
	}
	if ok {
		got, err := storage.ReadFile(ctx, p)
		if err != nil {
			return err
		}
		if strings.TrimSpace(string(got)) != strings.TrimSpace(string(want)) {
			return fmt.Errorf("%s was started with other settings than the config now gives; remove %s or use another --out", p, dir)
		}
		return nil
	}
	return storage.WriteFile(ctx, p, append(want, '\n'))
}

func (r *runner) train(ctx context.Context, run RunConfig, dir string) (*trainstep.Summary, error) {
	backend := run.Backend
	if r.opts.Backend != "" {
		backend = r.opts.Backend
	}
	kind, err := gpu.ParseKind(orDefault(backend, "auto"))
	if err != nil {
		return nil, err
	}
	paper := trainstep.PaperDefaults()
	step := trainstep.StepConfig{
		Model: trainstep.ModelConfig{Name: run.Model, BaseWidth: run.Width, Channels: 3},
		Loss: trainstep.LossConfig{Kind: trainstep.LossKind(run.Loss), Temperature: run.Temperature,
			Sigma: orDefaultF(run.Sigma, paper.Sigma), Reduction: trainstep.Mean},
		Optimizer: trainstep.OptimizerConfig{Kind: trainstep.OptimizerKind(orDefault(run.Optimizer, string(paper.Optimizer))),
			Momentum: deref(run.Momentum, paper.Momentum), WeightDecay: deref(run.WeightDecay, paper.WeightDecay)},
		InitSeed: orDefaultU(run.Seed, 1),
	}
	if err := step.Validate(); err != nil {
		return nil, err
	}
	train := trainstep.RunConfig{
		Data: r.pretrainDir(), Out: dir, BatchSize: run.BatchSize, Epochs: run.Epochs,
		BaseLR: orDefaultF(run.LR, paper.BaseLR), WarmupEpochs: float64(run.WarmupEpochs), Seed: orDefaultU(run.Seed, 1),
		CheckpointEvery: orDefaultI(run.CheckpointEvery, paper.CheckpointEvery), KeepCheckpoints: 2, MonitorEvery: r.cfg.Evaluate.KNNEvery,
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
		r.log.Info("resuming", "run", run.Name, "from_step", steps[len(steps)-1])
	}
	return shardrun.Train(ctx, shardrun.Options{
		Step: step, Run: train, Backend: kind, Plugin: r.opts.Plugin, Resume: resume,
		KNNData: r.evalTrainDir(), KNNTest: r.evalTestDir(),
		Stderr: r.opts.Stderr, Progress: r.opts.Progress, QuietLog: !r.opts.TrainLog, Logger: r.log,
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

// evaluate embeds the evaluation shards with the checkpoint in dir (a training run or a
// baseline's random encoder) and runs the evaluations the config asks for.
func (r *runner) evaluate(ctx context.Context, dir, name string, temperature float64, upstreamRan, npc bool, ev *Evaluation) error {
	embTrain, embTest := storage.Join(dir, "embeddings", "train"), storage.Join(dir, "embeddings", "test")
	feature := trainstep.Feature(orDefault(r.cfg.Evaluate.Feature, string(trainstep.Backbone)))
	embedded := false
	for _, e := range []struct{ data, out string }{{r.evalTrainDir(), embTrain}, {r.evalTestDir(), embTest}} {
		did, err := r.stage(ctx, "embed "+name+" "+storage.Base(e.out), upstreamRan,
			func() (bool, error) { return storage.Exists(ctx, storage.Join(e.out, shards.EmbeddingsManifestName)) },
			func() error {
				return r.embed(ctx, pipelines.EmbedOptions{Checkpoint: dir, Data: e.data, Output: e.out, Feature: feature, Views: 1})
			})
		if err != nil {
			return err
		}
		embedded = embedded || did
	}
	return r.evaluateEmbeddings(ctx, dir, name, embTrain, embTest, upstreamRan || embedded, temperature, npc, ev)
}

func (r *runner) embed(ctx context.Context, o pipelines.EmbedOptions) error {
	if err := storage.RemoveTree(ctx, o.Output); err != nil {
		return err
	}
	job, err := pipelines.PlanEmbed(ctx, o)
	if err != nil {
		return err
	}
	_, err = pipelines.RunEmbed(ctx, job)
	return err
}

// evaluateEmbeddings runs kNN, the linear probe and (for trained encoders) the NPC
// statistics on embeddings that exist.
func (r *runner) evaluateEmbeddings(ctx context.Context, dir, name, embTrain, embTest string, upstreamRan bool, temperature float64, npc bool, ev *Evaluation) error {
	if k := r.cfg.Evaluate.KNN; k != nil {
		out := storage.Join(dir, "knn.json")
		ev.KNN = new(analysis.KNNResult)
		_, err := r.stage(ctx, "knn "+name, upstreamRan,
			func() (bool, error) { return loadIfExists(ctx, out, ev.KNN) },
			func() error {
				job, err := pipelines.PlanKNN(ctx, pipelines.KNNOptions{Train: embTrain, Test: embTest, K: k.K,
					Temperature: k.Temperature, NumClasses: r.numClasses, Output: out, PerClass: true})
				if err != nil {
					return err
				}
				res, err := pipelines.RunKNN(ctx, job)
				if err == nil && res != nil {
					*ev.KNN = *res
				}
				return err
			})
		if err != nil {
			return err
		}
	}
	if l := r.cfg.Evaluate.Linear; l != nil {
		out := storage.Join(dir, "linear.json")
		ev.Linear = new(analysis.LinearResult)
		_, err := r.stage(ctx, "linear "+name, upstreamRan,
			func() (bool, error) { return loadIfExists(ctx, out, ev.Linear) },
			func() error {
				cfg := analysis.DefaultLinearConfig()
				if l.Optimizer == string(analysis.LARS) {
					cfg = analysis.LARSLinearConfig()
				}
				if l.Epochs > 0 {
					cfg = cfg.WithEpochs(l.Epochs)
				}
				if l.LR > 0 {
					cfg.LR = l.LR
				}
				if l.BatchSize > 0 {
					cfg.BatchSize = l.BatchSize
				}
				cfg.NumClasses = r.numClasses
				job, err := pipelines.PlanLinear(ctx, pipelines.LinearOptions{Train: embTrain, Test: embTest, Config: cfg, Output: out, PerClass: true})
				if err != nil {
					return err
				}
				res, err := pipelines.RunLinear(ctx, job)
				if err == nil && res != nil {
					*ev.Linear = *res
				}
				return err
			})
		if err != nil {
			return err
		}
	}
	if n := r.cfg.Evaluate.NPC; n != nil && npc {
		pairs, out := storage.Join(dir, "embeddings", "pairs"), storage.Join(dir, "npc")
		ev.NPC = new(analysis.NPCReport)
		_, err := r.stage(ctx, "npc "+name, upstreamRan,
			func() (bool, error) { return loadIfExists(ctx, storage.Join(out, pipelines.NPCReportName), ev.NPC) },
			func() error {
				if err := r.embed(ctx, pipelines.EmbedOptions{Checkpoint: dir, Data: r.pretrainDir(), Output: pairs,
					Feature: trainstep.Projection, Views: 2, Pass: 0}); err != nil {
					return err
				}
				job, err := pipelines.PlanNPC(ctx, pipelines.NPCOptions{Embeddings: pairs, BatchSizes: n.BatchSizes,
					Temperature: temperature, Seed: r.cfg.Preprocess.Seed, MaxBatches: n.Samples, Name: name, Output: out})
				if err != nil {
					return err
				}
				res, err := pipelines.RunNPC(ctx, job)
				if err == nil && res != nil {
					*ev.NPC = *res
				}
				return err
			})
		if err != nil {
			return err
		}
	}
	return nil
}

// loadIfExists reads the JSON at p into v and reports whether it was there.
func loadIfExists(ctx context.Context, p string, v any) (bool, error) {
	ok, err := storage.Exists(ctx, p)
	if err != nil || !ok {
		return false, err
	}
	if err := storage.LoadJSON(ctx, p, v); err != nil {
		return false, err
	}
	return true, nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func orDefaultF(v, def float64) float64 {
	if v == 0 {
		return def
	}
	return v
}

func orDefaultI(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

func orDefaultU(v, def uint64) uint64 {
	if v == 0 {
		return def
	}
	return v
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

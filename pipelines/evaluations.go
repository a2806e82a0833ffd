package pipelines

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/dcl-beam/dcl-beam/analysis"
	"github.com/dcl-beam/dcl-beam/analysis/figures"
	"github.com/dcl-beam/dcl-beam/gpu"
	"github.com/dcl-beam/dcl-beam/internal/progress"
	"github.com/dcl-beam/dcl-beam/internal/registry"
	"github.com/dcl-beam/dcl-beam/internal/usage"
	"github.com/dcl-beam/dcl-beam/trainstep"
)

// Evaluation is one registered evaluation: its parameters, declared once, and how it runs
// as a command (`dcl NAME`) and, where it evaluates an encoder's embeddings, in a
// reproduction (evaluate.NAME of a config). The command's flags and help and the config's
// keys derive from Params; adding an evaluation is one RegisterEvaluation call.
type Evaluation struct {
	// Name is the subcommand and the config's key (evaluate.NAME).
	Name string
	// Summary is the command's line in `dcl help`; Details more for its -h.
	Summary, Details string
	// Beam says the command builds Beam pipelines: it takes Beam's flags and shows progress.
	Beam bool
	// Params are every flag of the command: the paths it reads and writes (command-only)
	// and the protocol's settings, which a config's evaluate.NAME section also gives.
	Params []registry.Param
	// Run runs the command with its flags' settings and returns what it prints as JSON; nil
	// without an error when the job was only translated or submitted (--dry_run, --async).
	Run func(ctx context.Context, s registry.Settings, env Env) (any, error)
	// Encoder runs the evaluation on an encoder's embeddings in a reproduction; nil for an
	// evaluation a config cannot ask for.
	Encoder *EncoderEvaluation
}

// Env is what a command gives an evaluation beyond its settings.
type Env struct {
	Progress progress.Options
	// Stderr takes notices (the batch sizes NPC leaves out).
	Stderr io.Writer
	// CodeVersion is the program's version, recorded beside what it writes.
	CodeVersion string
}

// EncoderEvaluation is how a reproduction runs an evaluation on one encoder's embeddings.
type EncoderEvaluation struct {
	// Output is what the evaluation writes, under the encoder's folder: a file, or a folder.
	Output string
	// Result is the file, under the encoder's folder, that holds the result once complete.
	Result string
	// Pairs says it reads the projections of both views of the pretraining pairs, which only
	// a trained encoder's first run of a cell embeds, rather than the evaluation splits'.
	Pairs bool
	// CropPasses, where set, says how many passes of augmented crops of the train split
	// (preset crop-flip) the evaluation trains on with the settings s: 0 for none. A
	// reproduction then makes them, embeds them and gives them as Encoder.TrainCrops.
	CropPasses func(s registry.Settings) int
	// New returns the value a result is read into (a pointer).
	New func() any
	// Images counts the images behind a result, for the stage's timing (nil: none).
	Images func(result any) int64
	// Run evaluates and returns the result (a pointer of New's type).
	Run func(ctx context.Context, e Encoder, s registry.Settings) (any, error)
	// Metrics are the figures a result gives: a reproduction keeps them per run (results,
	// history), lists them in its report and lets a config gate on them (gates.NAME).
	Metrics []Metric
}

// Metric is one figure an evaluation's result gives for an encoder.
type Metric struct {
	// Name is the figure's key in results, the history and a config's gates: "knn_top1".
	Name string
	// Description says what it is, with its unit: "kNN top-1 accuracy (%)".
	Description string
	// HigherIsBetter says which way is a drop: accuracy falls, a loss rises.
	HigherIsBetter bool
	// Accuracy says the figure is a percentage of test images (plots span a fixed range).
	Accuracy bool
	// Of reads the figure from a result (a pointer of New's type); false where it has none.
	Of func(result any) (float64, bool)
}

// accuracy is a Metric of a result of type *T read by top (top-1 or top-5, in percent).
func accuracy[T any](name, description string, top func(*T) float64) Metric {
	return Metric{Name: name, Description: description, HigherIsBetter: true, Accuracy: true, Of: func(r any) (float64, bool) {
		v, ok := r.(*T)
		if !ok || v == nil {
			return 0, false
		}
		return top(v), true
	}}
}

// Encoder is one encoder's embeddings and context, as a reproduction gives them.
type Encoder struct {
	// Train and Test are the evaluation splits' embeddings; Pairs the pretraining pairs'
	// projections (where EncoderEvaluation.Pairs asks for them).
	Train, Test, Pairs string
	// TrainCrops are the embeddings of the train split's augmented crops, every pass
	// (where EncoderEvaluation.CropPasses asks for them).
	TrainCrops string
	// Output is where the evaluation writes (EncoderEvaluation.Output resolved).
	Output     string
	NumClasses int
	// Temperature is τ of the encoder's training (0 for an untrained one).
	Temperature float64
	// Seed is the experiment's seed; Series names the encoder in tables and plots.
	Seed     uint64
	Series   string
	Progress progress.Options
}

var evaluations = registry.New[Evaluation]("evaluation")

// RegisterEvaluation adds an evaluation; it panics on one without a name or Run, or with a
// name taken (programming errors, found when the binary starts).
func RegisterEvaluation(e Evaluation) {
	if e.Name == "" || e.Run == nil || e.Summary == "" {
		panic(fmt.Sprintf("pipelines.RegisterEvaluation: %q needs a name, a summary and Run", e.Name))
	}
	if e.Encoder != nil && (e.Encoder.Run == nil || e.Encoder.New == nil || e.Encoder.Result == "") {
		panic(fmt.Sprintf("pipelines.RegisterEvaluation: %s's Encoder needs Run, New and Result", e.Name))
	}
	registry.Merge([]registry.Variant{{Name: e.Name, Params: e.Params}}) // one declaration per name
	if e.Encoder != nil {
		for _, m := range e.Encoder.Metrics {
			if m.Name == "" || m.Of == nil {
				panic(fmt.Sprintf("pipelines.RegisterEvaluation: a metric of %s needs a name and Of", e.Name))
			}
			for _, other := range EncoderEvaluations() {
				if slices.ContainsFunc(other.Encoder.Metrics, func(o Metric) bool { return o.Name == m.Name }) {
					panic(fmt.Sprintf("pipelines.RegisterEvaluation: metric %s of %s is %s's", m.Name, e.Name, other.Name))
				}
			}
		}
	}
	evaluations.Register(e.Name, e)
}

// UnregisterEvaluation removes an evaluation (tests that register one for their duration).
func UnregisterEvaluation(name string) { evaluations.Unregister(name) }

// Evaluations are the registered evaluations, in registration order.
func Evaluations() []Evaluation { return evaluations.Values() }

// LookupEvaluation finds an evaluation by name.
func LookupEvaluation(name string) (Evaluation, bool) { return evaluations.Lookup(name) }

// EncoderEvaluations are the evaluations a config may ask for (evaluate.NAME), in order.
func EncoderEvaluations() []Evaluation {
	var out []Evaluation
	for _, e := range evaluations.Values() {
		if e.Encoder != nil {
			out = append(out, e)
		}
	}
	return out
}

// The built-in evaluations, by name.
const (
	EvalEmbed  = "embed"
	EvalKNN    = "knn"
	EvalLinear = "linear"
	EvalNPC    = "npc"
	EvalTSNE   = "tsne"
)

// Parameters several evaluations declare alike.
func pathParam(name, doc string, required bool) registry.Param {
	return registry.Param{Name: name, Value: registry.Text(""), Doc: doc, Surface: registry.CommandOnly, Required: required}
}

func resultParam() registry.Param {
	return pathParam("output", "also write the result JSON here (needed, on shared storage, with remote runners)", false)
}

func classParams() []registry.Param {
	return []registry.Param{
		{Name: "num_classes", Type: registry.Int, Doc: "class count (0: from the embeddings' dataset, else the largest label + 1)", Surface: registry.CommandOnly},
		{Name: "per_class", Type: registry.Bool, Doc: "include per-class accuracies in the result", Surface: registry.CommandOnly},
	}
}

func nonNegative(v float64) string {
	if v >= 0 {
		return ""
	}
	return "must not be negative"
}

func init() {
	registerEmbed()
	registerKNN()
	registerLinear()
	registerNPC()
	registerTSNE()
}

func registerEmbed() {
	RegisterEvaluation(Evaluation{
		Name: EvalEmbed, Summary: "compute embeddings of a dataset with a trained encoder (Beam)", Beam: true,
		Params: []registry.Param{
			pathParam("checkpoint", "checkpoint file, or a training run's folder for its newest checkpoint (local or gs://); required", true),
			{Name: "input", Value: registry.Text(""), Doc: "shard folder written by 'dcl preprocess' (--augment=none for evaluation); required",
				Surface: registry.CommandOnly, Required: true, Renamed: "data"},
			pathParam("output", "embeddings to write: a folder (part files and embeddings.json) or one .parquet file; required", true),
			{Name: "feature", Value: registry.Word(trainstep.Backbone, trainstep.ParseFeature), Doc: "backbone (kNN, linear probe) or projection (NPC statistics)"},
			{Name: "views", Type: registry.Int, Default: 1, Doc: "1: view 1 of each row; 2: both views of pair shards, concatenated (the input of 'dcl npc')"},
			{Name: "pass", Type: registry.Int, Doc: "augmented pass of the shards to embed; -1: every pass"},
			{Name: "batch_size", Type: registry.Int, Doc: "images read at once (0: 256 on the CPU; on a GPU 1,024 images of 32 px, fewer of larger ones)",
				Check: func(v float64) string {
					if v >= 0 {
						return ""
					}
					return "want a positive number, or 0 to choose"
				}},
			{Name: "parts", Type: registry.Int, Doc: "embedding files to write (0: about one per 16,384 rows)"},
			{Name: "threads", Type: registry.Int, Doc: "goroutines of each worker's CPU encoder (0: all cores)"},
			{Name: "backend", Value: registry.Word(gpu.Auto, gpu.ParseKind), Doc: "compute backend of the encoder: " + gpu.BackendsHelp + "; workers outside this process (Dataflow, a job server's own) always use the CPU"},
			{Name: "plugin", Value: registry.Text(""), Doc: gpu.PluginHelp},
			{Name: "precision", Value: registry.Word(trainstep.Float32, trainstep.ParsePrecision), Doc: "what CUDA embeds in: float32 (full float32) or tf32 (TF32 tensor cores; bf16 embeds as tf32), as dcl train's; the CPU always computes in float32"},
		},
		Run: func(ctx context.Context, s registry.Settings, env Env) (any, error) {
			job, err := PlanEmbed(ctx, EmbedOptions{
				Checkpoint: s.String("checkpoint"), Data: s.String("input"), Output: s.String("output"),
				Feature: s.Get("feature").(trainstep.Feature), Views: s.Int("views"), Pass: s.Int("pass"),
				BatchSize: s.Int("batch_size"), Parts: s.Int("parts"), Threads: s.Int("threads"),
				Backend: s.Get("backend").(gpu.Kind), Plugin: s.String("plugin"),
				Precision: s.Get("precision").(trainstep.Precision), CodeVersion: env.CodeVersion,
			})
			if err != nil {
				return nil, err
			}
			job.Display = env.Progress
			return nilIfNone(RunEmbed(ctx, job))
		},
	})
}

// nilIfNone passes a job's result on as any, nil where it has none (a typed nil pointer
// would not compare equal to nil).
func nilIfNone[T any](res *T, err error) (any, error) {
	if res == nil {
		return nil, err
	}
	return res, err
}

func registerKNN() {
	def := analysis.DefaultKNNConfig()
	options := func(s registry.Settings) KNNOptions {
		return KNNOptions{K: s.Int("k"), Temperature: s.Float("temperature"), Metric: s.Get("metric").(analysis.Metric),
			QueryBlock: s.Int("query_block"), BankGroups: s.Int("bank_groups"), BankBlock: s.Int("bank_block")}
	}
	run := func(ctx context.Context, o KNNOptions, display progress.Options) (*analysis.KNNResult, error) {
		job, err := PlanKNN(ctx, o)
		if err != nil {
			return nil, err
		}
		job.Display = display
		return RunKNN(ctx, job)
	}
	RegisterEvaluation(Evaluation{
		Name: EvalKNN, Summary: "weighted kNN accuracy of test embeddings against train embeddings (Beam)", Beam: true,
		Params: append([]registry.Param{
			pathParam("train", "training embeddings (the bank): a .parquet file or a 'dcl embed' folder; required", true),
			pathParam("test", "test embeddings (the queries); required", true),
			{Name: "k", Type: registry.Int, Default: float64(def.K), Doc: "neighbours that vote", Check: registry.AtLeast(1)},
			{Name: "temperature", Default: def.Temperature, Doc: "vote weight exp(similarity/T)", Check: func(v float64) string {
				if v > 0 {
					return ""
				}
				return "must be positive"
			}},
			{Name: "metric", Value: registry.Of(def.Metric, "string", analysis.ParseMetric, analysis.Metric.String), Doc: "similarity: cosine, dot or euclidean (-|a-b|²)"},
			{Name: "query_block", Type: registry.Int, Default: DefaultQueryBlock, Doc: "test queries per work item (each reads its bank group once, with every core of its worker)"},
			{Name: "bank_groups", Type: registry.Int, Default: 1, Doc: "split the training files into this many groups searched in parallel per query block"},
			{Name: "bank_block", Type: registry.Int, Default: DefaultBankBlock, Doc: "training rows read and searched at once"},
			resultParam(),
		}, classParams()...),
		Run: func(ctx context.Context, s registry.Settings, env Env) (any, error) {
			o := options(s)
			o.Train, o.Test, o.Output = s.String("train"), s.String("test"), s.String("output")
			o.NumClasses, o.PerClass = s.Int("num_classes"), s.Bool("per_class")
			return nilIfNone(run(ctx, o, env.Progress))
		},
		Encoder: &EncoderEvaluation{Output: "knn.json", Result: "knn.json",
			New:    func() any { return new(analysis.KNNResult) },
			Images: func(r any) int64 { return int64(r.(*analysis.KNNResult).NTest) },
			Metrics: []Metric{
				accuracy("knn_top1", "kNN top-1 accuracy (%)", func(r *analysis.KNNResult) float64 { return r.Top1 }),
				accuracy("knn_top5", "kNN top-5 accuracy (%)", func(r *analysis.KNNResult) float64 { return r.Top5 }),
			},
			Run: func(ctx context.Context, e Encoder, s registry.Settings) (any, error) {
				o := options(s)
				o.Train, o.Test, o.Output, o.NumClasses, o.PerClass = e.Train, e.Test, e.Output, e.NumClasses, true
				return nilIfNone(run(ctx, o, e.Progress))
			}},
	})
}

func registerLinear() {
	def, lars := analysis.DefaultLinearConfig(), analysis.LARSLinearConfig()
	// config is the probe's protocol: the optimiser's, with the settings given over it.
	config := func(s registry.Settings, numClasses int) (analysis.LinearConfig, error) {
		cfg := def
		if s.Get("optimizer").(analysis.Optimizer) == analysis.LARS {
			cfg = lars
		}
		given := func(name string) bool { _, ok := s.Given(name); return ok }
		// A size, rate or length of 0 is the protocol's (a config's way to leave it).
		positive := func(name string) bool { return given(name) && s.Float(name) > 0 }
		if positive("epochs") {
			cfg = cfg.WithEpochs(s.Int("epochs"))
		}
		if positive("batch_size") {
			cfg.BatchSize = s.Int("batch_size")
		}
		if positive("lr") {
			cfg.LR = s.Float("lr")
		}
		if given("momentum") {
			cfg.Momentum = s.Float("momentum")
		}
		if given("weight_decay") {
			cfg.WeightDecay = s.Float("weight_decay")
		}
		if given("schedule") {
			cfg.Schedule = s.Get("schedule").(analysis.Schedule)
		}
		if given("milestones") {
			cfg.Milestones = s.IntList("milestones")
		}
		if given("gamma") {
			cfg.Gamma = s.Float("gamma")
		}
		if given("trust") {
			cfg.TrustCoefficient = s.Float("trust")
		}
		cfg.Standardize, cfg.Seed, cfg.NumClasses = s.Bool("standardize"), s.Uint("seed"), numClasses
		if s.Int("crop_passes") < 0 {
			return cfg, usage.Errorf("crop_passes %d: want 0 (one pass per epoch) or more", s.Int("crop_passes"))
		}
		if err := cfg.Validate(); err != nil {
			return cfg, usage.Errorf("%w", err)
		}
		return cfg, nil
	}
	// cropPassesOf is how many passes of augmented crops the probe trains on (0: fixed crops).
	cropPassesOf := func(s registry.Settings) int {
		if s.Get("crops").(LinearCrops) != AugmentedCrops {
			return 0
		}
		if n := s.Int("crop_passes"); n > 0 {
			return n
		}
		cfg, err := config(s, 0)
		if err != nil {
			return 1 // the probe's own run reports the error
		}
		return cfg.Epochs
	}
	run := func(ctx context.Context, o LinearOptions, display progress.Options) (*analysis.LinearResult, error) {
		job, err := PlanLinear(ctx, o)
		if err != nil {
			return nil, err
		}
		job.Display = display
		return RunLinear(ctx, job)
	}
	RegisterEvaluation(Evaluation{
		Name: EvalLinear, Summary: "linear-probe accuracy on frozen embeddings (Beam, one worker)", Beam: true,
		// The config's keys in the order its JSON (fingerprints, results) has always had them.
		Params: append([]registry.Param{
			pathParam("train", "training embeddings: a .parquet file or a 'dcl embed' folder; required", true),
			pathParam("test", "test embeddings; required", true),
			{Name: "epochs", FlagName: "probe-epochs", Renamed: "epochs", Type: registry.Int, Default: float64(def.Epochs),
				Doc: fmt.Sprintf("epochs of the probe's training (lars: %d)", lars.Epochs), Check: nonNegative},
			{Name: "lr", Default: def.LR, Doc: fmt.Sprintf("learning rate (lars: %g)", lars.LR), Check: nonNegative},
			{Name: "batch_size", Type: registry.Int, Default: float64(def.BatchSize), Doc: fmt.Sprintf("batch size (lars: %d)", lars.BatchSize), Check: nonNegative},
			{Name: "optimizer", Value: registry.Word(analysis.SGD, analysis.ParseOptimizer), Doc: "sgd: the OpenSelfSup protocol; lars: the SimSiam-style one (its own defaults below)"},
			{Name: "momentum", Default: def.Momentum, Doc: "momentum"},
			{Name: "weight_decay", Default: def.WeightDecay, Doc: "weight decay (weights only)"},
			{Name: "schedule", Value: registry.Word[analysis.Schedule](def.Schedule, nil), Doc: "step (×gamma at each milestone) or cosine (lars: cosine)"},
			{Name: "milestones", Value: registry.Ints(def.Milestones, nil), Doc: "epochs of the step schedule's decays (with --probe-epochs alone: scaled to the same fractions)"},
			{Name: "gamma", Default: def.Gamma, Doc: "the step schedule's factor"},
			{Name: "trust", Default: lars.TrustCoefficient, Doc: "LARS trust coefficient η"},
			{Name: "standardize", Type: registry.Bool, Doc: "scale features to zero mean and unit variance with the training set's statistics (not the protocol's default)"},
			{Name: "seed", Value: registry.Uint(0), Doc: "seed of the initial weights and the shuffles (same seed, same result)"},
			{Name: "crops", Value: registry.Word(FixedCrops, parseLinearCrops),
				Doc: "what the classifier trains on: fixed (each training image's centre crop embedded once: the fast probe) or augmented " +
					"(OpenSelfSup's protocol: RandomResizedCrop and flip, fresh crops each epoch; the train embeddings hold every pass " +
					"of an augmented dataset, 'dcl embed --pass=-1' (--views=2: each pair two passes), and epoch e trains on pass e mod passes)"},
			{Name: "crop_passes", Type: registry.Int,
				Doc: "passes of augmented crops the probe trains on with crops: augmented, the first of those the embeddings hold (0: one per epoch, OpenSelfSup's; fewer repeat every that many epochs)"},
			pathParam("model", "write the trained classifier (JSON) here", false),
			resultParam(),
		}, classParams()...),
		Run: func(ctx context.Context, s registry.Settings, env Env) (any, error) {
			cfg, err := config(s, s.Int("num_classes"))
			if err != nil {
				return nil, err
			}
			return nilIfNone(run(ctx, LinearOptions{Train: s.String("train"), Test: s.String("test"), Config: cfg,
				Output: s.String("output"), Model: s.String("model"), PerClass: s.Bool("per_class"),
				Crops: s.Get("crops").(LinearCrops) == AugmentedCrops, CropPasses: s.Int("crop_passes")}, env.Progress))
		},
		Encoder: &EncoderEvaluation{Output: "linear.json", Result: "linear.json",
			New:        func() any { return new(analysis.LinearResult) },
			CropPasses: func(s registry.Settings) int { return cropPassesOf(s) },
			Metrics: []Metric{
				accuracy("linear_top1", "linear-probe top-1 accuracy (%)", func(r *analysis.LinearResult) float64 { return r.Top1 }),
				accuracy("linear_top5", "linear-probe top-5 accuracy (%)", func(r *analysis.LinearResult) float64 { return r.Top5 }),
			},
			Run: func(ctx context.Context, e Encoder, s registry.Settings) (any, error) {
				cfg, err := config(s, e.NumClasses)
				if err != nil {
					return nil, err
				}
				o := LinearOptions{Train: e.Train, Test: e.Test, Config: cfg, Output: e.Output, PerClass: true}
				if passes := cropPassesOf(s); passes > 0 {
					o.Train, o.Crops, o.CropPasses = e.TrainCrops, true, passes
				}
				return nilIfNone(run(ctx, o, e.Progress))
			}},
	})
}

// NPCSummary is what `dcl npc` prints: the headline numbers; the report files hold the rest.
type NPCSummary struct {
	Output      string          `json:"output"`
	Name        string          `json:"name"`
	Temperature float64         `json:"temperature"`
	Pairs       int             `json:"pairs"`
	Stats       []NPCSummaryRow `json:"stats"`
}

// NPCSummaryRow is one batch size of NPCSummary.
type NPCSummaryRow struct {
	BatchSize int     `json:"batch_size"`
	Anchors   int64   `json:"anchors"`
	Mean      float64 `json:"mean"`
	Std       float64 `json:"std"`
	CV        float64 `json:"cv"`
}

func registerNPC() {
	batchSizes := func(sizes []int) string {
		for _, b := range sizes {
			if b < 2 {
				return fmt.Sprintf("batch size %d: want at least 2", b)
			}
		}
		return ""
	}
	options := func(s registry.Settings) NPCOptions {
		return NPCOptions{BatchSizes: s.IntList("batch_sizes"), Passes: s.Int("passes"), MaxBatches: s.Int("samples"), Bins: s.Int("bins")}
	}
	RegisterEvaluation(Evaluation{
		Name: EvalNPC, Summary: "negative-positive coupling statistics over batch sizes, the paper's Fig. 1 (Beam)", Beam: true,
		Params: []registry.Param{
			{Name: "input", Value: registry.Text(""), Surface: registry.CommandOnly, Required: true, Renamed: "embeddings",
				Doc: "projection embeddings of view pairs ('dcl embed --feature=projection --views=2' over augmented shards); required"},
			{Name: "batch_sizes", Value: registry.Ints(nil, batchSizes), Doc: "batch sizes to sample (default: those of " + joinInts(analysis.DefaultNPCBatchSizes()) +
				" the view pairs allow, saying which it leaves out; a size given here that is larger than the pairs fails)"},
			{Name: "temperature", Surface: registry.CommandOnly, Doc: "τ of the loss (0: the one the encoder was trained with, from the embeddings' metadata)"},
			{Name: "seed", Value: registry.Uint(1), Surface: registry.CommandOnly, Doc: "seed of the batches"},
			{Name: "passes", Type: registry.Int, Default: 1, Doc: "shuffled passes over the pairs per batch size"},
			{Name: "samples", FlagName: "max-batches", Type: registry.Int, Doc: "at most this many batches per batch size (0: all)", Check: nonNegative},
			{Name: "bins", Type: registry.Int, Default: analysis.DefaultHistogramBins, Doc: "histogram bins on [0, 1]"},
			{Name: "name", Value: registry.Text(""), Surface: registry.CommandOnly, Doc: "series name in the table and plots (default τ=…)"},
			{Name: "concatenated", Type: registry.Bool, Surface: registry.CommandOnly, Doc: "accept a file without dcl metadata whose rows are view 1's vector followed by view 2's"},
			pathParam("output", "folder for npc.json, npc.md and the PNG figures (local or gs://); required", true),
		},
		Run: func(ctx context.Context, s registry.Settings, env Env) (any, error) {
			o := options(s)
			o.Embeddings, o.Concatenated, o.Temperature = s.String("input"), s.Bool("concatenated"), s.Float("temperature")
			o.Seed, o.Name, o.Output = s.Uint("seed"), s.String("name"), s.String("output")
			job, err := PlanNPC(ctx, o)
			if err != nil {
				return nil, err
			}
			job.Display = env.Progress
			if len(job.LeftOut) > 0 && env.Stderr != nil {
				fmt.Fprintf(env.Stderr, "dcl npc: left out the default batch sizes %s: %s holds %d view pairs (--batch-sizes chooses)\n",
					joinInts(job.LeftOut), o.Embeddings, job.Pairs)
			}
			rep, err := RunNPC(ctx, job)
			if err != nil || rep == nil {
				return nil, err
			}
			sum := NPCSummary{Output: o.Output, Name: rep.Name, Temperature: rep.Temperature, Pairs: rep.Pairs}
			for _, st := range rep.Stats {
				sum.Stats = append(sum.Stats, NPCSummaryRow{BatchSize: st.BatchSize, Anchors: st.Anchors, Mean: st.Mean, Std: st.Std, CV: st.CV})
			}
			return sum, nil
		},
		Encoder: &EncoderEvaluation{Output: "npc", Result: "npc/" + NPCReportName, Pairs: true,
			New: func() any { return new(analysis.NPCReport) },
			Run: func(ctx context.Context, e Encoder, s registry.Settings) (any, error) {
				o := options(s)
				o.Embeddings, o.Temperature, o.Seed, o.Name, o.Output = e.Pairs, e.Temperature, e.Seed, e.Series, e.Output
				job, err := PlanNPC(ctx, o)
				if err != nil {
					return nil, err
				}
				job.Display = e.Progress
				return nilIfNone(RunNPC(ctx, job))
			}},
	})
}

// joinInts writes sizes as a --batch-sizes value: 32,64,128.
func joinInts(sizes []int) string {
	parts := make([]string, len(sizes))
	for i, s := range sizes {
		parts[i] = strconv.Itoa(s)
	}
	return strings.Join(parts, ",")
}

func registerTSNE() {
	def := analysis.DefaultTSNEConfig()
	RegisterEvaluation(Evaluation{
		Name: EvalTSNE, Summary: "t-SNE of embeddings coloured by class, one panel per run side by side (the paper's Fig. 4c)",
		Details: "Samples --per-class rows of each class from each embedding set (the same rows of sets embedded from the same shards), lays each sample out with exact t-SNE and writes one PNG.",
		Params: []registry.Param{
			{Name: "input", Value: registry.Strings(true), Surface: registry.CommandOnly, Required: true, Renamed: "embeddings",
				Doc: "`paths` of the embeddings to lay out, each a .parquet file or a 'dcl embed' folder; repeat the flag or give a comma-separated list for side-by-side panels (required)"},
			{Name: "label", Value: registry.Strings(false), Surface: registry.CommandOnly,
				Doc: "`title` of each panel, in the order of --input (repeat the flag, or one comma-separated list); default: the paths"},
			pathParam("output", "the PNG to write, local or gs:// (required)", true),
			{Name: "per_class", Type: registry.Int, Default: figures.DefaultTSNEPerClass, Doc: "rows sampled from each class of each set"},
			{Name: "classes", Type: registry.Int, Default: figures.DefaultTSNEClasses, Doc: "lay out the first N classes only (0: every class; beyond about 20, colours and markers cannot be told apart)"},
			{Name: "seed", Value: registry.Uint(def.Seed), Doc: "seed of the sample and of t-SNE's initial layout (same seed, same figure)"},
			{Name: "perplexity", Default: def.Perplexity, Doc: "t-SNE perplexity: the effective number of neighbours", Check: registry.Positive},
			{Name: "iterations", Type: registry.Int, Default: float64(def.Iterations), Doc: "gradient-descent iterations (the first 250 with early exaggeration)", Check: registry.AtLeast(1)},
			{Name: "normalize", Type: registry.Bool, Default: 1, Doc: "L2-normalise the embeddings first (distances of the cosine similarity that kNN uses)"},
			{Name: "width", Type: registry.Int, Default: 640, Doc: "width of one panel in pixels"},
			{Name: "height", Type: registry.Int, Default: 520, Doc: "height of one panel in pixels"},
			{Name: "cols", Type: registry.Int, Doc: "panels per row (0: all in one row)"},
		},
		Run: func(ctx context.Context, s registry.Settings, env Env) (any, error) {
			inputs, names := s.StringList("input"), s.StringList("label")
			if len(names) == 1 && len(inputs) > 1 {
				var split []string
				for _, n := range strings.Split(names[0], ",") {
					if n = strings.TrimSpace(n); n != "" {
						split = append(split, n)
					}
				}
				names = split
			}
			cfg := def
			cfg.Seed, cfg.Perplexity, cfg.Iterations, cfg.Normalize = s.Uint("seed"), s.Float("perplexity"), s.Int("iterations"), s.Bool("normalize")
			cfg.ExaggerationIters = min(cfg.ExaggerationIters, cfg.Iterations)
			return nilIfNone(figures.TSNE(ctx, figures.TSNEOptions{
				Embeddings: inputs, Labels: names, PerClass: s.Int("per_class"), Classes: s.Int("classes"), Config: cfg,
				Output: s.String("output"), Width: s.Int("width"), Height: s.Int("height"), Cols: s.Int("cols"),
			}))
		},
	})
}

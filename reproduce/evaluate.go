package reproduce

import (
	"cmp"
	"context"
	"encoding/json"
	"slices"

	"github.com/dcl-beam/dcl-beam/analysis"
	"github.com/dcl-beam/dcl-beam/gpu"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/pipelines"
	"github.com/dcl-beam/dcl-beam/shards/embeddings"
	"github.com/dcl-beam/dcl-beam/trainstep"
)

// The evaluations of one encoder (a training run's, or a baseline's): one embedding stage
// that computes, in one pipeline with one encoder, every embedding the evaluations read,
// then the evaluations the config asks for (kNN, the linear probe, the NPC statistics, any
// other registered in package pipelines), which read them and embed nothing.

// The embedding sets of an encoder (embeddingsDir): the evaluation splits' images and the
// pretraining pairs' first pass, both views (NPC's input).
const (
	trainSplit = "train"
	testSplit  = "test"
	pairsSplit = "pairs"
	// cropsSplit: every pass of the train split's augmented crops (evalTrainCropsDir).
	cropsSplit = "train-crops"
)

// embedding is one embedding set the stage writes.
type embedding struct {
	data, out string
	feature   trainstep.Feature
	views     int
	// allPasses embeds every pass of the data (augmented crops), not the first.
	allPasses bool
}

// evaluate embeds what the evaluations of the encoder in dir (a training run, or a
// baseline's random encoder) read, on run's backend and in its precision where the Beam
// workers run here, and runs the
// evaluations the config asks for. The embedding stage writes the evaluation shards' train
// and test splits (the config's feature) and, where npc allows an evaluation of the pairs
// (EncoderEvaluation.Pairs: the NPC statistics) and the config asks for one, the
// projections of both views of the pretraining pairs' first pass: computed once, read by
// the evaluations and the report's t-SNE.
func (r *runner) evaluate(ctx context.Context, dir, name string, run RunConfig, up gen, npc bool, ev *Evaluation) error {
	feature := trainstep.Feature(cmp.Or(r.cfg.Evaluate.Feature, string(trainstep.Backbone)))
	sets := []embedding{
		{r.evalTrainDir(), embeddingsDir(dir, trainSplit), feature, 1, false},
		{r.evalTestDir(), embeddingsDir(dir, testSplit), feature, 1, false},
	}
	npc = npc && r.pairsEvaluated()
	if npc {
		sets = append(sets, embedding{r.pretrainDir(), embeddingsDir(dir, pairsSplit), trainstep.Projection, 2, false})
	}
	if r.cropPasses() > 0 {
		sets = append(sets, embedding{r.evalTrainCropsDir(), embeddingsDir(dir, cropsSplit), feature, 2, true})
	}
	var images int64
	embedded, err := r.stage(ctx, stageSpec{kind: StageEmbed, name: "embed " + name, up: up,
		done: func() (outcome, error) { return allEmbedded(ctx, sets) },
		clear: func() error {
			for _, e := range sets {
				if err := storage.RemoveTree(ctx, e.out); err != nil {
					return err
				}
			}
			return nil
		},
		do: func() error {
			n, err := r.embed(ctx, dir, r.backendOf(run), run.Precision(), sets)
			images = n
			return err
		},
		images: func() int64 { return images },
		needed: func() (bool, error) { return r.evaluationsNeeded(ctx, dir, npc) }})
	if err != nil {
		return err
	}
	return r.evaluateEmbeddings(ctx, dir, name, sets[0].out, sets[1].out, max(up, embedded), run.Temperature(), npc, ev)
}

// evaluationsNeeded reports whether an evaluation of the encoder in dir that reads its
// embeddings lacks its output or is asked for again (--rerun): embeddings removed after
// their evaluations need not be made again.
func (r *runner) evaluationsNeeded(ctx context.Context, dir string, npc bool) (bool, error) {
	evs := r.evaluations(npc)
	for _, ev := range evs {
		if r.rerun[StageKind(ev.Name)] {
			return true, nil
		}
	}
	for _, ev := range evs {
		if ok, err := storage.Exists(ctx, storage.Join(dir, ev.Encoder.Result)); err != nil || !ok {
			return true, err
		}
	}
	return false, nil
}

// evaluations are the evaluations of an encoder the config asks for, in registration
// order; those of the pretraining pairs only where pairs (a trained encoder's first run of
// its cell).
func (r *runner) evaluations(pairs bool) []pipelines.Evaluation {
	var out []pipelines.Evaluation
	for _, ev := range pipelines.EncoderEvaluations() {
		if r.cfg.Evaluate.Has(ev.Name) && (pairs || !ev.Encoder.Pairs) {
			out = append(out, ev)
		}
	}
	return out
}

// pairsEvaluated reports whether the config asks for an evaluation of the pretraining pairs.
func (r *runner) pairsEvaluated() bool {
	return slices.ContainsFunc(r.evaluations(true), func(ev pipelines.Evaluation) bool { return ev.Encoder.Pairs })
}

// allEmbedded is complete when every set has its manifest.
func allEmbedded(ctx context.Context, sets []embedding) (outcome, error) {
	for _, e := range sets {
		o, err := exists(ctx, storage.Join(e.out, embeddings.ManifestName))
		if err != nil || !o.complete {
			return o, err
		}
	}
	return outcome{complete: true}, nil
}

// embed writes the sets that are not complete with the checkpoint in dir, as one pipeline,
// and returns the number of images the encoder saw.
func (r *runner) embed(ctx context.Context, dir, backend string, precision trainstep.Precision, sets []embedding) (int64, error) {
	kind, err := gpu.ParseKind(cmp.Or(backend, string(gpu.Auto)))
	if err != nil {
		return 0, err
	}
	var jobs []*pipelines.EmbedJob
	defer func() {
		for _, job := range jobs {
			job.Close() // the ones not run
		}
	}()
	for _, e := range sets {
		if o, err := allEmbedded(ctx, []embedding{e}); err != nil || o.complete {
			if err != nil {
				return 0, err
			}
			continue // written by an earlier call that did not complete
		}
		// What a killed call left of it.
		if err := storage.RemoveTree(ctx, e.out); err != nil {
			return 0, err
		}
		pass := 0
		if e.allPasses {
			pass = -1
		}
		job, err := pipelines.PlanEmbed(ctx, pipelines.EmbedOptions{Checkpoint: dir, Data: e.data, Output: e.out,
			Feature: e.feature, Views: e.views, Pass: pass, Backend: kind, Precision: precision, Plugin: r.opts.Plugin, LenientBackend: true,
			Logger: r.log, CodeVersion: r.opts.CodeVersion})
		if err != nil {
			return 0, err
		}
		job.Display = r.opts.Progress
		jobs = append(jobs, job)
	}
	var images int64
	for _, job := range jobs {
		images += job.Images
	}
	run := jobs
	jobs = nil // RunEmbeds closes them
	_, err = pipelines.RunEmbeds(ctx, run...)
	return images, err
}

// backendOf is the compute backend of a run: --backend, else the run's own.
func (r *runner) backendOf(run RunConfig) string {
	return cmp.Or(r.opts.Backend, run.Backend())
}

// evaluateEmbeddings runs the evaluations the config asks for (those of the pretraining
// pairs only for trained encoders: npc) on embeddings that exist, each as a stage of its
// own, and keeps their results in ev.
func (r *runner) evaluateEmbeddings(ctx context.Context, dir, name, embTrain, embTest string, up gen, temperature float64, npc bool, ev *Evaluation) error {
	for _, e := range r.evaluations(npc) {
		enc, settings := e.Encoder, r.cfg.Evaluate.Evaluations[e.Name]
		result := storage.Join(dir, enc.Result)
		res := enc.New()
		spec := stageSpec{kind: StageKind(e.Name), name: e.Name + " " + name, up: up,
			done: func() (outcome, error) { return loadIfExists(ctx, result, res) },
			do: func() error {
				got, err := enc.Run(ctx, pipelines.Encoder{Train: embTrain, Test: embTest, Pairs: embeddingsDir(dir, pairsSplit), TrainCrops: embeddingsDir(dir, cropsSplit),
					Output: storage.Join(dir, enc.Output), NumClasses: r.numClasses, Temperature: temperature,
					Seed: r.cfg.Preprocess.Seed, Series: r.seriesName(name), Progress: r.opts.Progress}, settings)
				if err == nil && got != nil {
					res = got
				}
				return err
			}}
		if enc.Images != nil {
			spec.images = func() int64 { return enc.Images(res) }
		}
		_, err := r.stage(ctx, spec)
		ev.keep(e.Name, res)
		if err != nil {
			return err
		}
	}
	return nil
}

// result is the result of evaluation name, as its registration's New reads it; false where
// there is none.
func (ev *Evaluation) result(name string) (any, bool) {
	switch name {
	case pipelines.EvalKNN:
		return ev.KNN, ev.KNN != nil
	case pipelines.EvalLinear:
		return ev.Linear, ev.Linear != nil
	case pipelines.EvalNPC:
		return ev.NPC, ev.NPC != nil
	}
	raw, ok := ev.Others[name]
	e, registered := pipelines.LookupEvaluation(name)
	if !ok || !registered || e.Encoder == nil {
		return nil, false
	}
	res := e.Encoder.New()
	if err := json.Unmarshal(raw, res); err != nil {
		return nil, false
	}
	return res, true
}

// keep holds an evaluation's result: in the field the report reads it from, or in Others.
func (ev *Evaluation) keep(name string, res any) {
	switch v := res.(type) {
	case *analysis.KNNResult:
		if name == pipelines.EvalKNN {
			ev.KNN = v
			return
		}
	case *analysis.LinearResult:
		if name == pipelines.EvalLinear {
			ev.Linear = v
			return
		}
	case *analysis.NPCReport:
		if name == pipelines.EvalNPC {
			ev.NPC = v
			return
		}
	}
	raw, err := json.Marshal(res)
	if err != nil {
		raw, _ = json.Marshal(err.Error())
	}
	if ev.Others == nil {
		ev.Others = map[string]json.RawMessage{}
	}
	ev.Others[name] = raw
}

package reproduce

import (
	"cmp"
	"context"

	"github.com/dcl-beam/dcl-beam/analysis"
	"github.com/dcl-beam/dcl-beam/gpu"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/pipelines"
	"github.com/dcl-beam/dcl-beam/shards/embeddings"
	"github.com/dcl-beam/dcl-beam/trainstep"
)

// The evaluations of one encoder (a training run's, or a baseline's): one embedding stage
// that computes, in one pipeline with one encoder, every embedding the evaluations read,
// then kNN, the linear probe and the NPC statistics, which read them and embed nothing.

// The embedding sets of an encoder (embeddingsDir): the evaluation splits' images and the
// pretraining pairs' first pass, both views (NPC's input).
const (
	trainSplit = "train"
	testSplit  = "test"
	pairsSplit = "pairs"
)

// embedding is one embedding set the stage writes.
type embedding struct {
	data, out string
	feature   trainstep.Feature
	views     int
}

// evaluate embeds what the evaluations of the encoder in dir (a training run, or a
// baseline's random encoder) read, on run's backend and in its precision where the Beam
// workers run here, and runs the
// evaluations the config asks for. The embedding stage writes the evaluation shards' train
// and test splits (the config's feature) and, where npc asks for the NPC statistics, the
// projections of both views of the pretraining pairs' first pass: computed once, read by
// kNN, the linear probe, NPC and the report's t-SNE.
func (r *runner) evaluate(ctx context.Context, dir, name string, run RunConfig, up gen, npc bool, ev *Evaluation) error {
	feature := trainstep.Feature(cmp.Or(r.cfg.Evaluate.Feature, string(trainstep.Backbone)))
	sets := []embedding{
		{r.evalTrainDir(), embeddingsDir(dir, trainSplit), feature, 1},
		{r.evalTestDir(), embeddingsDir(dir, testSplit), feature, 1},
	}
	npc = npc && r.cfg.Evaluate.NPC != nil
	if npc {
		sets = append(sets, embedding{r.pretrainDir(), embeddingsDir(dir, pairsSplit), trainstep.Projection, 2})
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
			n, err := r.embed(ctx, dir, r.backendOf(run), trainstep.Precision(run.Precision), sets)
			images = n
			return err
		},
		images: func() int64 { return images },
		needed: func() (bool, error) { return r.evaluationsNeeded(ctx, dir, npc) }})
	if err != nil {
		return err
	}
	return r.evaluateEmbeddings(ctx, dir, name, sets[0].out, sets[1].out, max(up, embedded), run.Temperature, npc, ev)
}

// evaluationsNeeded reports whether an evaluation of the encoder in dir that reads its
// embeddings lacks its output or is asked for again (--rerun): embeddings removed after
// their evaluations need not be made again.
func (r *runner) evaluationsNeeded(ctx context.Context, dir string, npc bool) (bool, error) {
	var outputs []string
	if r.cfg.Evaluate.KNN != nil {
		outputs = append(outputs, storage.Join(dir, "knn.json"))
	}
	if r.cfg.Evaluate.Linear != nil {
		outputs = append(outputs, storage.Join(dir, "linear.json"))
	}
	if r.cfg.Evaluate.NPC != nil && npc {
		outputs = append(outputs, storage.Join(npcDir(dir), pipelines.NPCReportName))
	}
	for _, k := range []StageKind{StageKNN, StageLinear, StageNPC} {
		if r.rerun[k] {
			return true, nil
		}
	}
	for _, p := range outputs {
		if ok, err := storage.Exists(ctx, p); err != nil || !ok {
			return true, err
		}
	}
	return false, nil
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
		job, err := pipelines.PlanEmbed(ctx, pipelines.EmbedOptions{Checkpoint: dir, Data: e.data, Output: e.out,
			Feature: e.feature, Views: e.views, Backend: kind, Precision: precision, Plugin: r.opts.Plugin, LenientBackend: true,
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

// backendOf is the compute backend of a run: --backend, else the run's own, else auto.
func (r *runner) backendOf(run RunConfig) string {
	return cmp.Or(r.opts.Backend, run.Backend, string(gpu.Auto))
}

// evaluateEmbeddings runs kNN, the linear probe and (for trained encoders) the NPC
// statistics on embeddings that exist.
func (r *runner) evaluateEmbeddings(ctx context.Context, dir, name, embTrain, embTest string, up gen, temperature float64, npc bool, ev *Evaluation) error {
	if k := r.cfg.Evaluate.KNN; k != nil {
		out := storage.Join(dir, "knn.json")
		ev.KNN = new(analysis.KNNResult)
		_, err := r.stage(ctx, stageSpec{kind: StageKNN, name: "knn " + name, up: up,
			done:   func() (outcome, error) { return loadIfExists(ctx, out, ev.KNN) },
			images: func() int64 { return int64(ev.KNN.NTest) },
			do: func() error {
				job, err := pipelines.PlanKNN(ctx, pipelines.KNNOptions{Train: embTrain, Test: embTest, K: k.K,
					Temperature: k.Temperature, NumClasses: r.numClasses, Output: out, PerClass: true})
				if err != nil {
					return err
				}
				job.Display = r.opts.Progress
				res, err := pipelines.RunKNN(ctx, job)
				if err == nil && res != nil {
					*ev.KNN = *res
				}
				return err
			}})
		if err != nil {
			return err
		}
	}
	if l := r.cfg.Evaluate.Linear; l != nil {
		out := storage.Join(dir, "linear.json")
		ev.Linear = new(analysis.LinearResult)
		_, err := r.stage(ctx, stageSpec{kind: StageLinear, name: "linear " + name, up: up,
			done: func() (outcome, error) { return loadIfExists(ctx, out, ev.Linear) },
			do: func() error {
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
				job.Display = r.opts.Progress
				res, err := pipelines.RunLinear(ctx, job)
				if err == nil && res != nil {
					*ev.Linear = *res
				}
				return err
			}})
		if err != nil {
			return err
		}
	}
	if n := r.cfg.Evaluate.NPC; n != nil && npc {
		pairs, out := embeddingsDir(dir, pairsSplit), npcDir(dir)
		ev.NPC = new(analysis.NPCReport)
		_, err := r.stage(ctx, stageSpec{kind: StageNPC, name: "npc " + name, up: up,
			done: func() (outcome, error) { return loadIfExists(ctx, storage.Join(out, pipelines.NPCReportName), ev.NPC) },
			do: func() error {
				job, err := pipelines.PlanNPC(ctx, pipelines.NPCOptions{Embeddings: pairs, BatchSizes: n.BatchSizes,
					Temperature: temperature, Seed: r.cfg.Preprocess.Seed, MaxBatches: n.Samples, Name: r.seriesName(name), Output: out})
				if err != nil {
					return err
				}
				job.Display = r.opts.Progress
				res, err := pipelines.RunNPC(ctx, job)
				if err == nil && res != nil {
					*ev.NPC = *res
				}
				return err
			}})
		if err != nil {
			return err
		}
	}
	return nil
}

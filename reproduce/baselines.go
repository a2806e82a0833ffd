package reproduce

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/dcl-beam/dcl-beam/gpu"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/shards"
	"github.com/dcl-beam/dcl-beam/shards/embeddings"
	"github.com/dcl-beam/dcl-beam/trainstep"
)

// Baselines the report can show beside the trained encoders.
const (
	// RawPixels classifies the images by their pixels (scaled to [0, 1]): what the encoders
	// must beat to have learnt anything.
	RawPixels = "raw-pixels"
	// RandomInit is the first run's encoder with its initial, untrained weights: random
	// convolutional features are far better than chance, and training must beat them too.
	RandomInit = "random-init"
)

var baselineDescriptions = map[string]string{
	RawPixels:  "kNN and linear probe on the raw pixels, scaled to [0, 1]",
	RandomInit: "the first run's encoder with its initial (untrained) weights",
}

func (r *runner) baseline(ctx context.Context, name string, data dataGen) (*BaselineResult, error) {
	dir := r.path(BaselinesDir, name)
	b := &BaselineResult{Name: name, Description: baselineDescriptions[name]}
	switch name {
	case RawPixels:
		embTrain, embTest := embeddingsDir(dir, "train"), embeddingsDir(dir, "test")
		var embedded gen
		sets := []struct{ data, out string }{{r.evalTrainDir(), embTrain}, {r.evalTestDir(), embTest}}
		if r.cropPasses() > 0 {
			sets = append(sets, struct{ data, out string }{r.evalTrainCropsDir(), embeddingsDir(dir, cropsSplit)})
		}
		for _, e := range sets {
			g, err := r.stage(ctx, stageSpec{kind: StageEmbed, name: "embed " + name + " " + storage.Base(e.out), up: data.eval,
				done:   func() (outcome, error) { return exists(ctx, storage.Join(e.out, embeddings.ManifestName)) },
				do:     func() error { return writePixelEmbeddings(ctx, e.data, e.out) },
				needed: func() (bool, error) { return r.evaluationsNeeded(ctx, dir, false) }})
			if err != nil {
				return nil, err
			}
			embedded = max(embedded, g)
		}
		return b, r.evaluateEmbeddings(ctx, dir, name, embTrain, embTest, max(data.eval, embedded), 0, false, &b.Evaluation)
	case RandomInit:
		run := r.cfg.Runs[0]
		made, err := r.stage(ctx, stageSpec{kind: StageTrain, name: "initialise " + name,
			done: func() (outcome, error) {
				_, steps, err := trainstep.ListCheckpoints(ctx, dir)
				return outcome{complete: len(steps) > 0}, err
			},
			do:     func() error { return r.writeInitialCheckpoint(ctx, run, dir) },
			needed: func() (bool, error) { return r.evaluationsNeeded(ctx, dir, false) }})
		if err != nil {
			return nil, err
		}
		return b, r.evaluate(ctx, dir, name, run, max(data.eval, made), false, &b.Evaluation)
	}
	return nil, fmt.Errorf("unknown baseline %q: want %s or %s", name, RawPixels, RandomInit)
}

// writeInitialCheckpoint saves the untrained encoder of run (its model and initial-weight
// seed) as a checkpoint the evaluations can load like a trained one.
func (r *runner) writeInitialCheckpoint(ctx context.Context, run RunConfig, dir string) error {
	m, err := shards.ReadManifest(ctx, r.evalTrainDir())
	if err != nil {
		return err
	}
	backend, err := gpu.New(ctx, gpu.Options{Kind: gpu.CPU})
	if err != nil {
		return err
	}
	defer backend.Finalize()
	training, err := run.Training()
	if err != nil {
		return err
	}
	step := training.Step
	step.Model.Channels = m.Config.Channels
	if step.Model.Dataset == "" {
		step.Model.Dataset = m.Config.Dataset
	}
	// The untrained encoder is the one the run would start from: its seed's weights.
	step.InitSeed = training.Run.Seed
	s, err := trainstep.NewStep(backend, step, m.Config.Height, m.Config.Width)
	if err != nil {
		return err
	}
	defer s.Finalize()
	cfg := trainstep.RunConfig{Data: r.pretrainDir(), Out: dir, BatchSize: training.Run.BatchSize, Epochs: training.Run.Epochs,
		BaseLR: training.Run.BaseLR, Seed: training.Run.Seed, Backend: backend.Name()}
	state := trainstep.TrainState{Seed: cfg.Seed, Data: cfg.Data, ImageHeight: m.Config.Height, ImageWidth: m.Config.Width}
	return trainstep.SaveCheckpoint(ctx, storage.Join(dir, trainstep.CheckpointDir, trainstep.CheckpointName(0)), s, &cfg, state)
}

// writePixelEmbeddings writes every image of an evaluation dataset as its pixels scaled to
// [0, 1], in the embedding format the evaluations read; a dataset of view pairs (the linear
// probe's augmented crops) as view 1's pixels followed by view 2's, as 'dcl embed --views=2'
// writes them.
func writePixelEmbeddings(ctx context.Context, data, out string) error {
	if err := storage.RemoveTree(ctx, out); err != nil {
		return err
	}
	rd, err := shards.NewSequentialReader(ctx, data, 1024)
	if err != nil {
		return err
	}
	defer rd.Close()
	m := rd.Manifest()
	size := m.Config.Height * m.Config.Width * m.Config.Channels
	views := max(1, m.Config.Views)
	dim := size * views
	meta := map[string]string{
		embeddings.MetaDataset: m.Config.Dataset, embeddings.MetaSplit: m.Config.Split, embeddings.MetaFeature: "pixels",
	}
	if views == 2 {
		meta[embeddings.MetaViews] = "2"
	}
	if len(m.Config.Classes) > 0 {
		meta[embeddings.ClassesKey] = embeddings.ClassesMeta(m.Config.Classes)
	}
	w, err := embeddings.NewWriter(ctx, storage.Join(out, embeddings.FileName(0, 1)), dim, meta)
	if err != nil {
		return err
	}
	defer w.Abort()
	vec := make([]float32, dim)
	for {
		b, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		for i := range b.Len {
			for j, p := range b.View1[i*size : (i+1)*size] {
				vec[j] = float32(p) / 255
			}
			if views == 2 {
				for j, p := range b.View2[i*size : (i+1)*size] {
					vec[size+j] = float32(p) / 255
				}
			}
			if err := w.WriteKey(b.Indices[i], b.Keys[i], b.Labels[i], vec); err != nil {
				return err
			}
		}
		rd.Release(b)
	}
	info, err := w.Close()
	if err != nil {
		return err
	}
	_, err = embeddings.Commit(ctx, out, dim, []embeddings.FileInfo{info}, meta)
	return err
}

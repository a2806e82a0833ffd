package pipelines

import (
	"context"
	"errors"
	"fmt"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"

	"github.com/dcl-beam/dcl-beam/analysis"
	"github.com/dcl-beam/dcl-beam/internal/progress"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/shards/embeddings"
)

// The linear-probe pipeline (Linear) is one step: Impulse ─ TrainProbe. Mini-batch SGD is
// sequential, so the probe trains on one worker; the pipeline is what lets that worker be
// a large machine next to the embeddings (Dataflow) rather than the one running dcl. The
// worker reads both embedding sets, trains with analysis.LinearProbe and writes the result
// JSON (and the model, when asked).

// LinearOptions is what a linear probe is asked to do: `dcl linear` fills it from its flags.
type LinearOptions struct {
	Train, Test string
	// Config is the probe's protocol (analysis.DefaultLinearConfig or LARSLinearConfig, with
	// overrides). Its NumClasses of 0 takes the class count from the embeddings' dataset, or
	// else from the largest label.
	Config analysis.LinearConfig
	// Output is where the result JSON goes; Model, when set, where the trained model goes.
	Output, Model string
	PerClass      bool
	// Crops says Train holds every pass of augmented crops of the training images (each
	// image once per pass): epoch e trains on pass e mod passes (analysis.LinearProbeCrops).
	Crops bool
	// CropPasses, where positive, is how many passes of crops the probe trains on, the
	// first of those Train holds (fewer is an error).
	CropPasses int
}

// LinearCrops is what the linear probe's classifier trains on.
type LinearCrops string

const (
	// FixedCrops: each training image's centre crop, embedded once (the fast probe).
	FixedCrops LinearCrops = "fixed"
	// AugmentedCrops: passes of RandomResizedCrop and flip, OpenSelfSup's protocol.
	AugmentedCrops LinearCrops = "augmented"
)

func parseLinearCrops(s string) (LinearCrops, error) {
	switch c := LinearCrops(s); c {
	case FixedCrops, AugmentedCrops:
		return c, nil
	}
	return "", fmt.Errorf("crops %q: want fixed or augmented", s)
}

// cropPasses splits embeddings of every pass of augmented crops into one set per pass: the
// k-th row of an image (its id) belongs to pass k, or with views 2 (view pairs embedded
// together, 'dcl embed --views=2') its two halves to passes 2k and 2k+1. Every image must
// have as many rows as the others.
func cropPasses(all analysis.LabeledVectors, ids []int64, views int) ([]analysis.LabeledVectors, error) {
	if views == 2 {
		dim := all.Vectors.Dim / 2
		if dim*2 != all.Vectors.Dim {
			return nil, fmt.Errorf("%s: view pairs of %d values, not two halves", all.Source, all.Vectors.Dim)
		}
		n := all.Vectors.Len()
		split := analysis.LabeledVectors{Source: all.Source, Classes: all.Classes, Vectors: analysis.Vectors{Dim: dim, Data: make([]float32, 0, len(all.Vectors.Data))},
			Labels: make([]int32, 0, 2*n)}
		splitIDs := make([]int64, 0, 2*n)
		for i := range n {
			row := all.Vectors.Row(i)
			split.Vectors.Data = append(split.Vectors.Data, row[:dim]...)
			split.Vectors.Data = append(split.Vectors.Data, row[dim:]...)
			split.Labels = append(split.Labels, all.Labels[i], all.Labels[i])
			splitIDs = append(splitIDs, ids[i], ids[i])
		}
		all, ids = split, splitIDs
	}
	seen := map[int64]int{}
	passes := 0
	for _, id := range ids {
		seen[id]++
		passes = max(passes, seen[id])
	}
	for id, n := range seen {
		if n != passes {
			return nil, fmt.Errorf("%s: image %d has %d crops, others %d: not every pass of one augmented dataset", all.Source, id, n, passes)
		}
	}
	if passes < 2 {
		return nil, fmt.Errorf("%s holds one crop of each image: crops=augmented needs the embeddings of every pass of an augmented dataset "+
			"(dcl preprocess --augment=crop-flip --passes=N, then dcl embed --pass=-1)", all.Source)
	}
	dim, n := all.Vectors.Dim, len(seen)
	out := make([]analysis.LabeledVectors, passes)
	for p := range out {
		out[p] = analysis.LabeledVectors{Source: all.Source, Classes: all.Classes, Vectors: analysis.Vectors{Dim: dim, Data: make([]float32, 0, n*dim)},
			Labels: make([]int32, 0, n)}
	}
	clear(seen)
	for i, id := range ids {
		p := seen[id]
		seen[id]++
		out[p].Vectors.Data = append(out[p].Vectors.Data, all.Vectors.Row(i)...)
		out[p].Labels = append(out[p].Labels, all.Labels[i])
	}
	return out, nil
}

// LinearJob is a planned linear probe.
type LinearJob struct {
	Opts   LinearOptions
	NTrain int64
	NTest  int64
	// Display shows the job's progress while it runs in this process (set it after
	// planning; see watch).
	Display  progress.Options
	progress *Progress
}

// PlanLinear checks the options against the embedding files.
func PlanLinear(ctx context.Context, o LinearOptions) (*LinearJob, error) {
	if o.Train == "" || o.Test == "" {
		return nil, errors.New("both the training and the test embeddings are needed")
	}
	train, err := inspectEmbeddings(ctx, o.Train)
	if err != nil {
		return nil, err
	}
	test, err := inspectEmbeddings(ctx, o.Test)
	if err != nil {
		return nil, err
	}
	switch {
	case train.Rows == 0:
		return nil, fmt.Errorf("%s: no training embeddings", o.Train)
	case test.Rows == 0:
		return nil, fmt.Errorf("%s: no test embeddings", o.Test)
	case train.Dim/embeddingViews(train) != test.Dim || !o.Crops && train.Dim != test.Dim:
		return nil, fmt.Errorf("%s has %d-dimensional vectors, %s %d-dimensional", o.Train, train.Dim, o.Test, test.Dim)
	}
	if o.Config.NumClasses, err = resolveNumClasses(ctx, o.Config.NumClasses, train, test); err != nil {
		return nil, err
	}
	if err := o.Config.Validate(); err != nil {
		return nil, err
	}
	return &LinearJob{Opts: o, NTrain: train.Rows, NTest: test.Rows}, nil
}

func init() {
	register.DoFn2x1[context.Context, []byte, error](&trainProbeFn{})
}

// Linear adds the linear-probe pipeline of job to s.
func Linear(s beam.Scope, job *LinearJob) {
	s = s.Scope("Linear")
	beam.ParDo0(s.Scope("TrainProbe"), &trainProbeFn{Opts: job.Opts, ProgressID: job.progress.id()}, beam.Impulse(s))
}

// trainProbeFn reads the embeddings, trains the probe and writes the result.
type trainProbeFn struct {
	Opts       LinearOptions
	ProgressID string

	progress *Progress
}

func (f *trainProbeFn) Setup() { f.progress = lookupProgress(f.ProgressID) }

func (f *trainProbeFn) ProcessElement(ctx context.Context, _ []byte) error {
	o := f.Opts
	train, ids, err := LoadEmbeddings(ctx, o.Train)
	if err != nil {
		return err
	}
	crops := []analysis.LabeledVectors{train}
	if o.Crops {
		set, err := inspectEmbeddings(ctx, o.Train)
		if err != nil {
			return err
		}
		if crops, err = cropPasses(train, ids, embeddingViews(set)); err != nil {
			return err
		}
		if o.CropPasses > len(crops) {
			return fmt.Errorf("%s holds %d passes of crops, fewer than the %d asked for", o.Train, len(crops), o.CropPasses)
		}
		if o.CropPasses > 0 {
			crops = crops[:o.CropPasses]
		}
	}
	test, _, err := LoadEmbeddings(ctx, o.Test)
	if err != nil {
		return err
	}
	res, model, err := analysis.LinearProbeCrops(crops, test, o.Config, func() { f.progress.addDone(1) })
	if err != nil {
		return err
	}
	if !o.PerClass {
		res.PerClass = nil
	}
	if o.Model != "" {
		if err := storage.SaveJSON(ctx, o.Model, model); err != nil {
			return err
		}
	}
	return storage.SaveJSON(ctx, o.Output, res)
}

// RunLinear builds the linear-probe pipeline and runs it on the runner the Beam flags
// select, then reads back the result (see RunKNN about Output).
func RunLinear(ctx context.Context, job *LinearJob) (*analysis.LinearResult, error) {
	var res analysis.LinearResult
	var end func(bool)
	job.progress, end = watch(job.Display, "linear", int64(job.Opts.Config.Epochs), "epochs", "")
	ok, err := runForResult(ctx, "linear", &job.Opts.Output, func(s beam.Scope) { Linear(s, job) }, &res)
	end(err == nil)
	if !ok {
		return nil, err
	}
	return &res, nil
}

// embeddingViews is 2 for embeddings of view pairs (each vector view 1's then view 2's), else 1.
func embeddingViews(set *embeddingSet) int {
	if set.Meta[embeddings.MetaViews] == "2" {
		return 2
	}
	return 1
}

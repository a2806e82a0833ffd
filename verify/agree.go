package verify

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/dcl-beam/dcl-beam/analysis"
	"github.com/dcl-beam/dcl-beam/gpu"
	"github.com/dcl-beam/dcl-beam/trainstep"
	"github.com/dcl-beam/dcl-beam/transforms"
)

// The agreement check (dcl agree), not a Beam job: it embeds a seeded sample of the
// evaluation splits with one checkpoint on two backends, in this process, and says whether
// the embeddings agree within the tolerance the checkpoint's error model derives
// (ErrorModel), and whether kNN and the linear probe on them differ by no more
// than that tolerance allows (KNNUnstable, LinearUnstable).

// Reference is the backend name of the CPU encoder whose sums run in float64
// (trainstep.EncoderOptions.Float64): the reference the CPU backend is checked against.
const Reference = "reference"

// AgreeOptions configure Agree.
type AgreeOptions struct {
	Checkpoint string
	// Train and Test are labelled evaluation shards (preset none): the bank and the queries.
	Train, Test string
	Feature     trainstep.Feature
	// A and B are the backends compared: cpu, cuda, auto or Reference.
	A, B string
	// Precision is the one CUDA embeds in (the zero value: float32): TF32 tensor cores where
	// it allows them, else full float32 (EncoderArithmetic). The CPU computes in
	// float32 and the Reference sums in float64 whatever it is. Each side's arithmetic is the
	// error model's input.
	Precision trainstep.Precision
	Plugin    string
	// Bank and Queries are the sizes of the seeded samples of Train and Test.
	Bank, Queries int
	Seed          uint64
	KNN           analysis.KNNConfig
	Linear        analysis.LinearConfig
	Logger        *slog.Logger
}

// AgreeSide is one backend's part of the check.
type AgreeSide struct {
	Backend    string     `json:"backend"`
	Arithmetic Arithmetic `json:"arithmetic"`
	// ModelledRMS is the error model's rms relative error of its embeddings.
	ModelledRMS float64 `json:"modelled_rms"`
	ImagesPerS  float64 `json:"images_per_s"`
	KNNTop1     float64 `json:"knn_top1"`
	// LinearTop1 is the probe trained on backend A's bank, on this backend's queries;
	// RetrainedTop1 a probe trained on this backend's own bank.
	LinearTop1    float64 `json:"linear_top1"`
	RetrainedTop1 float64 `json:"retrained_linear_top1"`
}

// AgreeBound is a result's difference between the backends and the most the tolerance lets it
// differ by: the share of decisions (percent) that a difference of the tolerance could flip.
type AgreeBound struct {
	Difference float64 `json:"difference"`
	Bound      float64 `json:"bound"`
	Unstable   int     `json:"unstable"`
	Within     bool    `json:"within"`
}

// AgreeResult is what Agree found.
type AgreeResult struct {
	Checkpoint string              `json:"checkpoint"`
	Feature    trainstep.Feature   `json:"feature"`
	Precision  trainstep.Precision `json:"precision"`
	A          AgreeSide           `json:"a"`
	B          AgreeSide           `json:"b"`
	Model      *ErrorModel         `json:"error_model"`
	Tolerance  float64             `json:"tolerance"`
	Bank       VectorDifference    `json:"bank"`
	Queries    VectorDifference    `json:"queries"`
	// Agree says every row's difference is within the tolerance.
	Agree  bool       `json:"agree"`
	KNN    AgreeBound `json:"knn_top1"`
	Linear AgreeBound `json:"linear_top1"`
	// RetrainedLinearDifference is how far apart the probes trained on each backend's bank
	// score on their own queries: SGD over 100 epochs amplifies small differences in ways no
	// bound follows, so it is reported, not checked.
	RetrainedLinearDifference float64 `json:"retrained_linear_difference"`
	OK                        bool    `json:"ok"`
}

// agreeTestHook, set by tests, sees each side's embeddings before they are compared.
var agreeTestHook func(side int, bank, queries *analysis.LabeledVectors)

// Agree runs the agreement check (dcl agree).
func Agree(ctx context.Context, o AgreeOptions) (*AgreeResult, error) {
	if o.Feature == "" {
		o.Feature = trainstep.Backbone
	}
	if o.Precision == "" {
		o.Precision = trainstep.Float32
	}
	if err := o.Precision.Validate(); err != nil {
		return nil, err
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	bank, err := trainstep.ReadLabeledImages(ctx, o.Train)
	if err != nil {
		return nil, err
	}
	queries, err := trainstep.ReadLabeledImages(ctx, o.Test)
	if err != nil {
		return nil, err
	}
	bank, queries = bank.Sample(o.Bank, o.Seed, 1), queries.Sample(o.Queries, o.Seed, 2)
	model, err := NewErrorModel(ctx, o.Checkpoint, o.Feature)
	if err != nil {
		return nil, err
	}
	o.Checkpoint = model.Checkpoint // the resolved file
	res := &AgreeResult{Checkpoint: model.Checkpoint, Feature: o.Feature, Precision: o.Precision, Model: model}
	var emb [2][2]analysis.LabeledVectors // [side][bank, queries]
	for i, side := range []struct {
		name string
		out  *AgreeSide
	}{{o.A, &res.A}, {o.B, &res.B}} {
		start := time.Now()
		b, q, arith, err := embedBoth(ctx, o, side.name, bank, queries)
		if err != nil {
			return nil, fmt.Errorf("backend %s: %w", side.name, err)
		}
		*side.out = AgreeSide{Backend: side.name, Arithmetic: arith, ModelledRMS: model.RMS(arith),
			ImagesPerS: float64(bank.N+queries.N) / time.Since(start).Seconds()}
		if agreeTestHook != nil {
			agreeTestHook(i, &b, &q)
		}
		emb[i] = [2]analysis.LabeledVectors{b, q}
	}
	if res.Bank, err = CompareVectors(emb[0][0].Vectors, emb[1][0].Vectors); err != nil {
		return nil, err
	}
	if res.Queries, err = CompareVectors(emb[0][1].Vectors, emb[1][1].Vectors); err != nil {
		return nil, err
	}
	res.Tolerance = model.Tolerance(res.A.Arithmetic, res.B.Arithmetic)
	res.Agree = res.Bank.Max <= res.Tolerance && res.Queries.Max <= res.Tolerance

	// kNN on each backend's embeddings; the bound from the tolerance, on A's.
	knnA, err := analysis.KNN(emb[0][0], emb[0][1], o.KNN)
	if err != nil {
		return nil, err
	}
	knnB, err := analysis.KNN(emb[1][0], emb[1][1], o.KNN)
	if err != nil {
		return nil, err
	}
	res.A.KNNTop1, res.B.KNNTop1 = knnA.Top1, knnB.Top1
	unstable, err := KNNUnstable(emb[0][0], emb[0][1], o.KNN, res.Tolerance)
	if err != nil {
		return nil, err
	}
	res.KNN = bound(knnA.Top1, knnB.Top1, unstable, queries.N)

	// One probe, trained on A's bank, scores A's and B's queries; then one trained on B's.
	probe, _, err := analysis.TrainLinear(emb[0][0], o.Linear)
	if err != nil {
		return nil, err
	}
	accA, err := probe.Evaluate(emb[0][1])
	if err != nil {
		return nil, err
	}
	accB, err := probe.Evaluate(emb[1][1])
	if err != nil {
		return nil, err
	}
	res.A.LinearTop1, res.B.LinearTop1, res.A.RetrainedTop1 = accA.Top1, accB.Top1, accA.Top1
	if unstable, err = LinearUnstable(probe, emb[0][1].Vectors, res.Tolerance); err != nil {
		return nil, err
	}
	res.Linear = bound(accA.Top1, accB.Top1, unstable, queries.N)
	probeB, _, err := analysis.TrainLinear(emb[1][0], o.Linear)
	if err != nil {
		return nil, err
	}
	retrained, err := probeB.Evaluate(emb[1][1])
	if err != nil {
		return nil, err
	}
	res.B.RetrainedTop1 = retrained.Top1
	res.RetrainedLinearDifference = retrained.Top1 - accA.Top1
	res.OK = res.Agree && res.KNN.Within && res.Linear.Within
	return res, nil
}

func bound(a, b float64, unstable, n int) AgreeBound {
	out := AgreeBound{Difference: b - a, Unstable: unstable, Bound: 100 * float64(unstable) / float64(max(n, 1))}
	// Accuracies are percentages of n: compare whole decisions, not float noise.
	out.Within = math.Abs(out.Difference)*float64(n)/100 <= float64(unstable)+1e-6
	return out
}

// embedBoth embeds the bank and the queries on one backend, and says in which arithmetic.
func embedBoth(ctx context.Context, o AgreeOptions, backend string, bank, queries *trainstep.LabeledImages) (b, q analysis.LabeledVectors, arith Arithmetic, err error) {
	kind, opts := gpu.Kind(backend), trainstep.EncoderOptions{}
	if backend == Reference {
		kind, opts.Float64 = gpu.CPU, true
	}
	if _, err := gpu.ParseKind(string(kind)); err != nil {
		return b, q, arith, fmt.Errorf("%w (or %s)", err, Reference)
	}
	be, err := gpu.New(ctx, gpu.Options{Kind: kind, Plugin: o.Plugin, TF32: o.Precision.AllowsTF32(), Logger: o.Logger})
	if err != nil {
		return b, q, arith, err
	}
	defer be.Finalize()
	got := gpu.KindOf(be)
	arith = EncoderArithmetic(got == gpu.CUDA, o.Precision)
	if opts.Float64 {
		arith = Float64RefArithmetic
	} else if got.IsXLA() {
		info, err := trainstep.ReadCheckpointHeader(ctx, o.Checkpoint)
		if err == nil {
			opts = trainstep.EncoderOptionsFor(got, info.State.ImageHeight, info.State.ImageWidth)
		}
	}
	enc, err := trainstep.LoadEncoderWith(ctx, be, o.Checkpoint, opts)
	if err != nil {
		return b, q, arith, err
	}
	defer enc.Close()
	if b, err = embedSample(enc, bank, o.Feature); err != nil {
		return b, q, arith, err
	}
	q, err = embedSample(enc, queries, o.Feature)
	return b, q, arith, err
}

func embedSample(enc *trainstep.Encoder, imgs *trainstep.LabeledImages, feature trainstep.Feature) (analysis.LabeledVectors, error) {
	size := imgs.H * imgs.W * imgs.C
	all := make([]transforms.Image, imgs.N)
	for i := range all {
		all[i] = transforms.Image{H: imgs.H, W: imgs.W, C: imgs.C, Pix: imgs.Images[i*size : (i+1)*size]}
	}
	rows, err := enc.Embed(all, feature)
	if err != nil {
		return analysis.LabeledVectors{}, err
	}
	v, err := analysis.VectorsFromRows(rows, imgs.Source)
	return analysis.LabeledVectors{Source: imgs.Source, Vectors: v, Labels: imgs.Labels}, err
}

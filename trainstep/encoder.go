package trainstep

import (
	"context"
	"fmt"
	"math/bits"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/gomlx/gomlx/ml/model"

	"github.com/dcl-beam/dcl-beam/gpu"
	"github.com/dcl-beam/dcl-beam/transforms"
)

// Feature selects which output of an encoder Embed returns.
type Feature string

const (
	// Backbone features (before the projector): what kNN and linear evaluation use by default.
	Backbone Feature = "backbone"
	// Projection is the projector's output z (before L2 normalisation): what the loss sees.
	Projection Feature = "projection"
)

// ParseFeature accepts "backbone" and "projection".
func ParseFeature(s string) (Feature, error) {
	switch f := Feature(s); f {
	case Backbone, Projection:
		return f, nil
	}
	return "", fmt.Errorf("feature %q: want backbone or projection", s)
}

// EncoderMaxBatch is the largest batch Embed sends through the model at once by default (see
// EncoderOptions); larger inputs are split, smaller ones padded to a power of two (so few
// graph shapes are compiled).
const EncoderMaxBatch = 256

// EncoderOptions say how an encoder cuts its work into calls of the model.
type EncoderOptions struct {
	// MaxBatch is the most images per call (0: EncoderMaxBatch).
	MaxBatch int
	// FixedBatch pads every call to MaxBatch images, so that one graph shape serves every
	// call: for GPUs, where compiling a shape costs seconds and a padded image nothing next to
	// it. Otherwise a short call is padded to the next power of two (on the CPU a padded
	// image costs as much as a real one).
	FixedBatch bool
	// Float64 runs the convolutions and matrix products (the long sums, where float32
	// rounding accumulates) in float64, and the rest as in float32: a reference for the
	// float32 encoder's rounding error (see verify.ErrorModel). On the CPU backend those
	// operations run on GoMLX's pure-Go kernels: slow, for tests and checks of a few images.
	Float64 bool
}

// EncoderOptionsFor is how an encoder on a backend of kind batches images of h×w pixels. A
// CPU, the pure-Go backend's or XLA's, takes EncoderMaxBatch images a call, a short call
// padded to a power of two (a padded image costs as much as a real one there). A GPU takes
// calls of one fixed size (compiling a shape costs seconds, a padded image next to nothing)
// and large enough to keep it busy: 1,024 images of 32 px, fewer of larger images (about 2^20
// pixels a call, at least 64 images).
func EncoderOptionsFor(kind gpu.Kind, h, w int) EncoderOptions {
	if kind != gpu.CUDA {
		return EncoderOptions{MaxBatch: EncoderMaxBatch}
	}
	n := 1024
	for n > 64 && n*h*w > 1<<20 {
		n /= 2
	}
	return EncoderOptions{MaxBatch: n, FixedBatch: true}
}

// EncoderInfo describes a loaded encoder.
type EncoderInfo struct {
	Checkpoint    string      `json:"checkpoint"`
	Model         ModelConfig `json:"model"`
	FeatureDim    int         `json:"feature_dim"`
	ProjectionDim int         `json:"projection_dim"`
	// ImageHeight and ImageWidth are the size of the images it was trained on.
	ImageHeight int        `json:"image_height"`
	ImageWidth  int        `json:"image_width"`
	StepsDone   int        `json:"steps_done"`
	Loss        LossConfig `json:"loss"`
}

// Encoder is a trained model in inference mode (batch norm uses its running averages). It is
// safe for concurrent use by several goroutines, as Beam workers do.
type Encoder struct {
	info  EncoderInfo
	opts  EncoderOptions
	model *Model
	store *model.Store
	exec  *model.Exec
}

// LoadEncoder reads the model weights of a checkpoint written by Train (a checkpoint file, or a
// run's output folder for its newest checkpoint; local or gs://) onto backend, with the
// default EncoderOptions.
func LoadEncoder(ctx context.Context, backend compute.Backend, path string) (*Encoder, error) {
	return LoadEncoderWith(ctx, backend, path, EncoderOptions{})
}

// LoadEncoderWith is LoadEncoder with options.
func LoadEncoderWith(ctx context.Context, backend compute.Backend, path string, opts EncoderOptions) (*Encoder, error) {
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = EncoderMaxBatch
	}
	path, err := ResolveCheckpoint(ctx, path)
	if err != nil {
		return nil, err
	}
	ckpt, err := ReadCheckpoint(ctx, path)
	if err != nil {
		return nil, err
	}
	h := ckpt.Header
	m, err := NewModel(h.Step.Model)
	if err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	e := &Encoder{
		info: EncoderInfo{
			Checkpoint: path, Model: m.Config(), FeatureDim: m.FeatureDim(), ProjectionDim: m.Config().ProjectionDim,
			ImageHeight: h.State.ImageHeight, ImageWidth: h.State.ImageWidth, StepsDone: h.State.StepsDone, Loss: h.Step.Loss,
		},
		opts:  opts,
		model: m,
		store: model.NewStore(),
	}
	if err := e.createVariables(backend); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	if err := ckpt.restoreInto(e.store, m.Config().Name, true); err != nil {
		return nil, err
	}
	// Inference runs in float32 whatever precision the encoder was trained at: its weights
	// are float32 master weights, and evaluation is cheap next to training.
	dtype := dtypes.Float32
	if opts.Float64 {
		dtype = dtypes.Float64
	}
	e.exec, err = model.NewExec(backend, e.store, func(scope *model.Scope, images *Node) (features, projection *Node) {
		feats := m.backbone(&net{dtype: dtype}, scope, images)
		return feats, m.project(&net{dtype: dtype}, scope, feats)
	})
	if err != nil {
		return nil, fmt.Errorf("preparing the encoder of %s: %w", path, err)
	}
	e.exec.SetMaxCache(16)
	return e, nil
}

func (e *Encoder) createVariables(backend compute.Backend) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("building model %s: %v", e.model.Config().Name, r)
		}
	}()
	g := NewGraph(backend, "create_variables")
	defer g.Finalize()
	h, w := max(e.info.ImageHeight, 1), max(e.info.ImageWidth, 1)
	images := Parameter(g, "images", shapes.Make(dtypes.Uint8, 2, h, w, e.model.Config().Channels))
	scope := e.store.RootScope()
	e.model.Project(scope, e.model.Backbone(scope, images, false, 0), false, 0)
	return nil
}

// Info describes the encoder.
func (e *Encoder) Info() EncoderInfo { return e.info }

// Embed returns one feature vector per image (FeatureDim values for Backbone, ProjectionDim
// for Projection), not normalised. Every image must have the model's channel count, one size
// for the whole call, and a size the model accepts (Model.CheckImageSize).
func (e *Encoder) Embed(images []transforms.Image, feature Feature) ([][]float32, error) {
	if feature != Backbone && feature != Projection {
		return nil, fmt.Errorf("feature %q: want backbone or projection", feature)
	}
	if len(images) == 0 {
		return nil, nil
	}
	h, w, c := images[0].H, images[0].W, images[0].C
	for i, img := range images {
		if err := img.Validate(); err != nil {
			return nil, fmt.Errorf("image %d: %w", i, err)
		}
		if img.H != h || img.W != w || img.C != c {
			return nil, fmt.Errorf("image %d is %dx%dx%d, image 0 is %dx%dx%d: one call takes one size", i, img.H, img.W, img.C, h, w, c)
		}
	}
	if err := e.model.CheckImageSize(h, w, c); err != nil {
		return nil, err
	}
	out := make([][]float32, 0, len(images))
	for from := 0; from < len(images); from += e.opts.MaxBatch {
		chunk := images[from:min(len(images), from+e.opts.MaxBatch)]
		rows, err := e.embedChunk(chunk, feature, h, w, c)
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
	}
	return out, nil
}

func (e *Encoder) embedChunk(images []transforms.Image, feature Feature, h, w, c int) ([][]float32, error) {
	n := len(images)
	padded := n
	switch {
	case e.opts.FixedBatch:
		padded = e.opts.MaxBatch
	case n > 1:
		padded = min(e.opts.MaxBatch, 1<<bits.Len(uint(n-1)))
	}
	size := h * w * c
	data := make([]uint8, padded*size)
	for i, img := range images {
		copy(data[i*size:], img.Pix)
	}
	t := tensors.FromFlatDataAndDimensions(data, padded, h, w, c)
	defer t.FinalizeAll()
	out, err := e.exec.Call(t)
	if err != nil {
		return nil, fmt.Errorf("encoding %d %dx%dx%d images: %w", n, h, w, c, err)
	}
	defer func() {
		for _, t := range out {
			t.FinalizeAll()
		}
	}()
	which := out[0]
	if feature == Projection {
		which = out[1]
	}
	return rows(tensors.MustCopyFlatData[float32](which), padded)[:n], nil
}

// Close releases the compiled graphs and the weights.
func (e *Encoder) Close() {
	e.exec.Finalize()
	e.store.Finalize()
}

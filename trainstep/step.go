package trainstep

import (
	"fmt"
	"runtime"
	"strings"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// StepConfig is what one training step needs.
type StepConfig struct {
	Model     ModelConfig     `json:"model"`
	Loss      LossConfig      `json:"loss"`
	Optimizer OptimizerConfig `json:"optimizer"`
	// InitSeed seeds the initial weights.
	InitSeed uint64 `json:"init_seed"`
}

// Validate checks the model, loss and optimiser settings.
func (c StepConfig) Validate() error {
	if _, err := NewModel(c.Model); err != nil {
		return err
	}
	if err := c.Loss.Validate(); err != nil {
		return err
	}
	return c.Optimizer.Validate()
}

// StepResult is what one training step reports.
type StepResult struct {
	Loss  float64
	MeanQ float64
}

// Step holds a model's variables and optimiser state (in a GoMLX context) and runs training
// steps and feature extraction on one backend.
type Step struct {
	backend backends.Backend
	cfg     StepConfig
	model   *Model
	opt     *Optimizer
	ctx     *context.Context
	train   *context.Exec
	embed   *context.Exec
}

// NewStep builds the model, its optimiser and the training graph (compiled on first use for
// each batch shape). Variables are created with their initial values right away for images of
// h×w, so a checkpoint can be restored into them before the first step.
func NewStep(backend backends.Backend, cfg StepConfig, h, w int) (*Step, error) {
	model, err := NewModel(cfg.Model)
	if err != nil {
		return nil, err
	}
	cfg.Model = model.Config()
	if err := cfg.Loss.Validate(); err != nil {
		return nil, err
	}
	opt, err := NewOptimizer(cfg.Optimizer)
	if err != nil {
		return nil, err
	}
	s := &Step{backend: backend, cfg: cfg, model: model, opt: opt, ctx: context.New()}
	if err := s.createVariables(h, w); err != nil {
		return nil, err
	}
	s.train, err = context.NewExec(backend, s.ctx, s.trainGraph)
	if err != nil {
		return nil, fmt.Errorf("preparing the training step: %w", err)
	}
	s.train.SetMaxCache(4)
	s.embed, err = context.NewExec(backend, s.ctx, s.embedGraph)
	if err != nil {
		return nil, fmt.Errorf("preparing feature extraction: %w", err)
	}
	s.embed.SetMaxCache(4)
	return s, nil
}

// Model returns the step's model.
func (s *Step) Model() *Model { return s.model }

// Config returns the configuration with defaults filled in.
func (s *Step) Config() StepConfig { return s.cfg }

// Context returns the GoMLX context that holds the variables.
func (s *Step) Context() *context.Context { return s.ctx }

// Backend returns the backend the step runs on.
func (s *Step) Backend() backends.Backend { return s.backend }

// createVariables builds the model once in a graph that is never run, which creates every
// model variable with its initial value, and the optimiser's momentum buffers.
func (s *Step) createVariables(h, w int) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("building model %s for %dx%d images: %v", s.cfg.Model.Name, h, w, r)
		}
	}()
	g := NewGraph(s.backend, "create_variables")
	defer g.Finalize()
	images := Parameter(g, "images", shapes.Make(dtypes.Uint8, 2, h, w, s.cfg.Model.Channels))
	feats := s.model.Backbone(s.ctx, images, false, s.cfg.InitSeed)
	s.model.Project(s.ctx, feats, false, s.cfg.InitSeed)
	for v := range s.ctx.IterVariables() {
		if v.Trainable {
			momentumVariable(s.ctx, v)
		}
	}
	learningRateVariable(s.ctx)
	return nil
}

func (s *Step) trainGraph(ctx *context.Context, view1, view2 *Node) (loss, meanQ *Node) {
	images := Concatenate([]*Node{view1, view2}, 0)
	feats := s.model.Backbone(ctx, images, true, s.cfg.InitSeed)
	z := s.model.Project(ctx, feats, true, s.cfg.InitSeed)
	nodes := StackedLossGraph(z, s.cfg.Loss)
	s.opt.UpdateGraph(ctx, view1.Graph(), nodes.Loss)
	return nodes.Loss, ReduceAllMean(nodes.Q)
}

func (s *Step) embedGraph(ctx *context.Context, images *Node) (features, projection *Node) {
	feats := s.model.Backbone(ctx, images, false, s.cfg.InitSeed)
	return feats, s.model.Project(ctx, feats, false, s.cfg.InitSeed)
}

// Run does one training step on b at learning rate lr: forward both views as one batch of 2N,
// loss, backward, optimiser update. Batch-norm statistics are those of the 2N views.
func (s *Step) Run(b *Batch, lr float64) (StepResult, error) {
	if err := b.Validate(); err != nil {
		return StepResult{}, err
	}
	if b.N < 2 {
		return StepResult{}, fmt.Errorf("a batch of %d view pair has no negatives: a contrastive step needs at least 2", b.N)
	}
	if err := SetLearningRate(s.ctx, lr); err != nil {
		return StepResult{}, fmt.Errorf("setting the learning rate: %w", err)
	}
	v1 := tensors.FromFlatDataAndDimensions(b.View1, b.N, b.H, b.W, b.C)
	v2 := tensors.FromFlatDataAndDimensions(b.View2, b.N, b.H, b.W, b.C)
	out, err := s.train.Exec(v1, v2)
	v1.FinalizeAll()
	v2.FinalizeAll()
	if err != nil {
		return StepResult{}, fmt.Errorf("training step on a batch of %d %dx%dx%d view pairs: %w", b.N, b.H, b.W, b.C, err)
	}
	res := StepResult{Loss: float64(tensors.ToScalar[float32](out[0])), MeanQ: float64(tensors.ToScalar[float32](out[1]))}
	for _, t := range out {
		t.FinalizeAll()
	}
	return res, nil
}

// Features runs the encoder in inference mode (batch-norm running averages) on n images
// (uint8 HWC, n·h·w·c bytes) and returns backbone features [n][FeatureDim] and projections
// [n][ProjectionDim], both as the model outputs them (not normalised).
func (s *Step) Features(images []uint8, n, h, w, c int) (features, projection [][]float32, err error) {
	if n < 1 || len(images) != n*h*w*c {
		return nil, nil, fmt.Errorf("%d images %dx%dx%d need %d bytes, got %d", n, h, w, c, n*h*w*c, len(images))
	}
	t := tensors.FromFlatDataAndDimensions(images, n, h, w, c)
	defer t.FinalizeAll()
	out, err := s.embed.Exec(t)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding %d %dx%dx%d images: %w", n, h, w, c, err)
	}
	defer func() {
		for _, t := range out {
			t.FinalizeAll()
		}
	}()
	return rows(tensors.MustCopyFlatData[float32](out[0]), n), rows(tensors.MustCopyFlatData[float32](out[1]), n), nil
}

func rows(flat []float32, n int) [][]float32 {
	d := len(flat) / n
	out := make([][]float32, n)
	for i := range out {
		out[i] = flat[i*d : (i+1)*d : (i+1)*d]
	}
	return out
}

// Finalize releases the compiled graphs and the variables' memory.
func (s *Step) Finalize() {
	s.train.Finalize()
	s.embed.Finalize()
	s.ctx.Finalize()
	// The step's buffers are garbage now, but the collector would next run only once the heap
	// doubled from its last (peak-time) size: a second Step built in this process (dcl reproduce
	// trains several) would then peak at twice one step's memory (4.2 GiB instead of 2.2 at
	// resnet18-cifar batch 256). One collection here returns them first.
	runtime.GC()
}

// NumParameters counts the model's weights (not optimiser state nor running averages).
func (s *Step) NumParameters() int {
	total := 0
	for v := range s.ctx.IterVariables() {
		if v.Trainable && strings.HasPrefix(v.Scope(), context.RootScope+modelScope) {
			total += v.Shape().Size()
		}
	}
	return total
}

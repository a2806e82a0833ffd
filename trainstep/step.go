package trainstep

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/gomlx/gomlx/ml/model"
)

// StepConfig is what one training step needs.
type StepConfig struct {
	Model     ModelConfig     `json:"model"`
	Loss      LossConfig      `json:"loss"`
	Optimizer OptimizerConfig `json:"optimizer"`
	// InitSeed seeds the initial weights.
	InitSeed uint64 `json:"init_seed"`
	// Precision is the arithmetic of the forward and backward passes ("": Float32). It is
	// stored in checkpoints (one without it was trained in float32) and kept on resume.
	Precision Precision `json:"precision,omitempty"`
	// Method is the training method, a name of the method registry ("": SimCLRMethod, as
	// checkpoints from before methods existed were trained).
	Method string `json:"method,omitempty"`
	// MethodConfig holds the method's settings (zero: the method's defaults).
	MethodConfig MethodConfig `json:"method_config,omitzero"`
}

// Validate checks the model, loss, optimiser, precision and method settings.
func (c StepConfig) Validate() error {
	if _, err := NewModel(c.Model); err != nil {
		return err
	}
	if err := c.Loss.Validate(); err != nil {
		return err
	}
	if err := c.Precision.Validate(); err != nil {
		return err
	}
	withDefaults, err := c.withMethodDefaults()
	if err != nil {
		return err
	}
	if _, err := newMethod(withDefaults); err != nil {
		return err
	}
	return c.Optimizer.Validate()
}

// Precision selects the arithmetic of a training step.
type Precision string

const (
	// Float32 runs everything in float32, every convolution and matrix product included (the
	// default): on CUDA the backend asks XLA for precision HIGHEST, so no TF32 tensor cores.
	// The paper's runs were float32 on V100s, which have no TF32.
	Float32 Precision = "float32"
	// TF32 is float32 variables and activations with convolutions and matrix products on TF32
	// tensor cores (10-bit mantissa inputs, float32 accumulation) where the backend has them:
	// what PyTorch does for cuDNN convolutions by default (torch.backends.cudnn.allow_tf32),
	// and for matrix products with torch.backends.cuda.matmul.allow_tf32. On the CPU backend
	// it computes exactly as Float32.
	TF32 Precision = "tf32"
	// BFloat16 is mixed precision with float32 master weights: variables and optimiser state
	// stay float32; convolutions, matrix products and the activations between them run in
	// bfloat16 (weights are cast where the model reads them, and gradients come back to the
	// float32 variables through those casts); batch-norm statistics, the global average pool,
	// the projector's output normalisation, the loss and its reductions stay float32 (their
	// products may use TF32, as in TF32). bfloat16 has float32's exponent range, so no loss
	// scaling is needed.
	BFloat16 Precision = "bf16"
)

// Precisions lists the precisions, the default first.
func Precisions() []Precision { return []Precision{Float32, TF32, BFloat16} }

// ParsePrecision accepts "float32" (or "fp32", "f32", ""), "tf32" (or "tensorfloat32") and
// "bf16" (or "bfloat16"), in any case.
func ParsePrecision(s string) (Precision, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "float32", "fp32", "f32":
		return Float32, nil
	case "tf32", "tensorfloat32":
		return TF32, nil
	case "bf16", "bfloat16":
		return BFloat16, nil
	}
	return "", fmt.Errorf("precision %q: want float32, tf32 or bf16", s)
}

// Validate reports a precision this package does not implement.
func (p Precision) Validate() error {
	switch p {
	case "", Float32, TF32, BFloat16:
		return nil
	}
	return fmt.Errorf("precision %q: want float32, tf32 or bf16", string(p))
}

// AllowsTF32 says whether the backend may run this precision's float32 convolutions and
// matrix products on TF32 tensor cores (gpu.Options.TF32).
func (p Precision) AllowsTF32() bool { return p == TF32 || p == BFloat16 }

// orDefault turns the empty precision (configurations and checkpoints from before precisions
// existed) into Float32.
func (p Precision) orDefault() Precision {
	if p == "" {
		return Float32
	}
	return p
}

// dtype is the dtype convolutions, matrix products and activations run in.
func (p Precision) dtype() dtypes.DType {
	if p == BFloat16 {
		return dtypes.BFloat16
	}
	return dtypes.Float32
}

// StepResult is what one training step reports.
type StepResult struct {
	Loss  float64
	MeanQ float64
}

// GradientReport is the loss and gradient of one training step, without the update
// (Step.Gradients): checksums of each trainable model variable's gradient, computed in
// float64 on the host from the float32 gradients, so that two backends or precisions can be
// compared without moving whole gradients around.
type GradientReport struct {
	Loss      float64            `json:"loss"`
	MeanQ     float64            `json:"mean_q"`
	Gradients []VariableGradient `json:"gradients"`
}

// VariableGradient summarises the gradient of one variable.
type VariableGradient struct {
	// Name is the variable's path in the model, e.g. "/model/backbone/layer1/conv/weights".
	Name       string  `json:"name"`
	Size       int     `json:"size"`
	Sum        float64 `json:"sum"`
	SumSquares float64 `json:"sum_squares"`
	MaxAbs     float64 `json:"max_abs"`
}

// Step holds a model's variables and optimiser state (in a GoMLX model.Store) and runs
// training steps and feature extraction on one backend.
type Step struct {
	backend   compute.Backend
	cfg       StepConfig
	method    Method
	model     *Model
	opt       *Optimizer
	store     *model.Store
	train     *model.Exec
	embed     *model.Exec
	gradients *model.Exec // built on the first call to Gradients
}

// NewStep builds the model, its optimiser and the training graph (compiled on first use for
// each batch shape). Variables are created with their initial values right away for images of
// h×w, so a checkpoint can be restored into them before the first step.
func NewStep(backend compute.Backend, cfg StepConfig, h, w int) (*Step, error) {
	m, err := NewModel(cfg.Model)
	if err != nil {
		return nil, err
	}
	cfg.Model = m.Config()
	if err := cfg.Loss.Validate(); err != nil {
		return nil, err
	}
	cfg.Loss = cfg.Loss.withUsedParams()
	if err := cfg.Precision.Validate(); err != nil {
		return nil, err
	}
	cfg.Precision = cfg.Precision.orDefault()
	if cfg, err = cfg.withMethodDefaults(); err != nil {
		return nil, err
	}
	method, err := newMethod(cfg)
	if err != nil {
		return nil, err
	}
	opt, err := NewOptimizer(cfg.Optimizer)
	if err != nil {
		return nil, err
	}
	s := &Step{backend: backend, cfg: cfg, method: method, model: m, opt: opt, store: model.NewStore()}
	if err := s.createVariables(h, w); err != nil {
		return nil, err
	}
	s.train, err = model.NewExec(backend, s.store, s.trainGraph)
	if err != nil {
		return nil, fmt.Errorf("preparing the training step: %w", err)
	}
	s.train.SetMaxCache(4)
	s.embed, err = model.NewExec(backend, s.store, s.embedGraph)
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

// Store returns the GoMLX store that holds the variables.
func (s *Step) Store() *model.Store { return s.store }

// Backend returns the backend the step runs on.
func (s *Step) Backend() compute.Backend { return s.backend }

// net returns the layer settings of one graph of this step.
func (s *Step) net(train, updateStats bool) *net {
	return &net{train: train, updateStats: updateStats, seed: s.cfg.InitSeed, dtype: s.cfg.Precision.dtype()}
}

// methodGraph is what the method builds one graph of this step with.
func (s *Step) methodGraph(g *Graph, scope *model.Scope, train, updateStats bool) *MethodGraph {
	return &MethodGraph{Graph: g, Scope: scope, Model: s.model, Loss: s.cfg.Loss, net: s.net(train, updateStats)}
}

// createVariables builds the model once in a graph that is never run, which creates every
// model variable with its initial value, the method's variables, and the optimiser's momentum
// buffers.
func (s *Step) createVariables(h, w int) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("building model %s for %dx%d images: %v", s.cfg.Model.Name, h, w, r)
		}
	}()
	g := NewGraph(s.backend, "create_variables")
	defer g.Finalize()
	images := Parameter(g, "images", shapes.Make(dtypes.Uint8, 2, h, w, s.cfg.Model.Channels))
	n := s.net(false, false)
	scope := s.store.RootScope()
	s.model.project(n, scope, s.model.backbone(n, scope, images))
	s.method.CreateVariables(s.methodGraph(g, scope, false, false))
	for v := range s.store.IterVariables() {
		if v.Trainable {
			momentumVariable(s.store, v)
		}
	}
	learningRateVariable(s.store)
	return nil
}

// lossGraph is the method's forward pass and loss of a training step (mg says whether batch
// norm updates its running averages).
func (s *Step) lossGraph(mg *MethodGraph, view1, view2 *Node) TrainNodes {
	// Marked as training for GoMLX: a backend that prefers constants for variables (its
	// Capabilities) would otherwise bake the running averages into the compiled graph.
	mg.Scope.Store().SetTraining(view1.Graph(), true)
	return s.method.TrainGraph(mg, view1, view2)
}

// meanQ is the mean NPC multiplier of a step's anchors, NaN when the method has none.
func meanQ(nodes TrainNodes) *Node {
	if nodes.Q == nil {
		return Scalar(nodes.Loss.Graph(), dtypes.Float32, math.NaN())
	}
	return ReduceAllMean(nodes.Q)
}

func (s *Step) trainGraph(scope *model.Scope, view1, view2 *Node) (loss, q *Node) {
	mg := s.methodGraph(view1.Graph(), scope, true, true)
	nodes := s.lossGraph(mg, view1, view2)
	s.opt.UpdateGraph(scope, view1.Graph(), nodes.Loss)
	s.method.AfterUpdate(mg, nodes)
	return nodes.Loss, meanQ(nodes)
}

// gradientVariables are the trainable model variables, sorted by path: the order of
// GradientReport.Gradients.
func (s *Step) gradientVariables() []*model.Variable {
	var vars []*model.Variable
	for v := range s.store.IterVariables() {
		if v.Trainable && isModelScope(v.Scope()) {
			vars = append(vars, v)
		}
	}
	slices.SortFunc(vars, func(a, b *model.Variable) int { return strings.Compare(a.Path(), b.Path()) })
	return vars
}

// gradientGraph is trainGraph without the optimiser and without the running-average updates:
// it returns the loss, the mean q and the gradient of every gradientVariables entry, in
// float32, and changes no variable.
func (s *Step) gradientGraph(scope *model.Scope, view1, view2 *Node) []*Node {
	nodes := s.lossGraph(s.methodGraph(view1.Graph(), scope, true, false), view1, view2)
	g := view1.Graph()
	vars := s.gradientVariables()
	wrt := make([]*Node, len(vars))
	for i, v := range vars {
		wrt[i] = v.NodeValue(g)
	}
	out := []*Node{nodes.Loss, meanQ(nodes)}
	for _, grad := range Gradient(nodes.Loss, wrt...) {
		out = append(out, ConvertDType(grad, dtypes.Float32))
	}
	return out
}

func (s *Step) embedGraph(scope *model.Scope, images *Node) (features, projection *Node) {
	n := s.net(false, false)
	feats := s.model.backbone(n, scope, images)
	return feats, s.model.project(n, scope, feats)
}

// checkBatch reports a batch a training step cannot use.
func checkBatch(b *Batch) error {
	if err := b.Validate(); err != nil {
		return err
	}
	if b.N < 2 {
		return fmt.Errorf("a batch of %d view pair has no negatives: a contrastive step needs at least 2", b.N)
	}
	return nil
}

// Run does one training step on b at learning rate lr: forward both views as one batch of 2N,
// loss, backward, optimiser update. Batch-norm statistics are those of the 2N views. It
// returns when the step's loss is on the host: Launch and Wait split it.
func (s *Step) Run(b *Batch, lr float64) (StepResult, error) {
	p, err := s.Launch(b, lr)
	if err != nil {
		return StepResult{}, err
	}
	return p.Wait()
}

// PendingStep is a launched training step whose loss and mean q have not been read yet.
type PendingStep struct {
	out  []*tensors.Tensor
	what string
}

// SetProgress tells a method whose values follow a schedule over the run (ScheduledMethod)
// where the next step is: after step steps of total. Other methods have nothing to set.
func (s *Step) SetProgress(step, total int) error {
	if m, ok := s.method.(ScheduledMethod); ok {
		return m.SetProgress(s.store, step, total)
	}
	return nil
}

// Launch starts one training step (what Run does) and returns without reading its results:
// a GPU backend queues the step and returns at once, so the caller can prepare and launch the
// next one while this one runs, and read this one's loss (Wait) when the next is queued. The
// variables are updated in order whatever the caller does: a later Launch, Features or
// checkpoint sees this step's update.
func (s *Step) Launch(b *Batch, lr float64) (*PendingStep, error) {
	if err := checkBatch(b); err != nil {
		return nil, err
	}
	if err := SetLearningRate(s.store, lr); err != nil {
		return nil, fmt.Errorf("setting the learning rate: %w", err)
	}
	what := fmt.Sprintf("training step on a batch of %d %dx%dx%d view pairs", b.N, b.H, b.W, b.C)
	out, err := s.call(s.train, b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return &PendingStep{out: out, what: what}, nil
}

// Wait reads the step's loss and mean q (waiting for the step to finish) and releases its
// outputs. It may be called once.
func (p *PendingStep) Wait() (StepResult, error) {
	if p.out == nil {
		return StepResult{}, fmt.Errorf("%s: its results were already read", p.what)
	}
	defer func() {
		finalizeAll(p.out)
		p.out = nil
	}()
	loss, err := scalar(p.out[0])
	if err != nil {
		return StepResult{}, fmt.Errorf("%s: reading its loss: %w", p.what, err)
	}
	q, err := scalar(p.out[1])
	if err != nil {
		return StepResult{}, fmt.Errorf("%s: reading its mean q: %w", p.what, err)
	}
	return StepResult{Loss: loss, MeanQ: q}, nil
}

// scalar reads a float32 scalar to the host.
func scalar(t *tensors.Tensor) (float64, error) {
	flat, err := tensors.CopyFlatData[float32](t)
	if err != nil {
		return 0, err
	}
	if len(flat) != 1 {
		return 0, fmt.Errorf("a scalar has %d values", len(flat))
	}
	return float64(flat[0]), nil
}

// Gradients computes the loss and the gradient of one training step on b, in training mode
// (batch statistics) and at the step's precision, without changing anything: no optimiser
// update, batch-norm running averages untouched. A GPU check compares its report across
// backends and precisions.
func (s *Step) Gradients(b *Batch) (GradientReport, error) {
	if err := checkBatch(b); err != nil {
		return GradientReport{}, err
	}
	if s.gradients == nil {
		e, err := model.NewExec(s.backend, s.store, s.gradientGraph)
		if err != nil {
			return GradientReport{}, fmt.Errorf("preparing the gradient graph: %w", err)
		}
		s.gradients = e.SetMaxCache(2)
	}
	out, err := s.call(s.gradients, b)
	if err != nil {
		return GradientReport{}, fmt.Errorf("gradients on a batch of %d %dx%dx%d view pairs: %w", b.N, b.H, b.W, b.C, err)
	}
	defer finalizeAll(out)
	vars := s.gradientVariables()
	if len(out) != 2+len(vars) {
		return GradientReport{}, fmt.Errorf("gradient graph returned %d values for %d variables", len(out), len(vars))
	}
	rep := GradientReport{
		Loss:      float64(tensors.ToScalar[float32](out[0])),
		MeanQ:     float64(tensors.ToScalar[float32](out[1])),
		Gradients: make([]VariableGradient, len(vars)),
	}
	for i, v := range vars {
		flat, err := tensors.CopyFlatData[float32](out[2+i])
		if err != nil {
			return GradientReport{}, fmt.Errorf("reading the gradient of %s: %w", v.Path(), err)
		}
		vg := VariableGradient{Name: v.Path(), Size: len(flat)}
		for _, x := range flat {
			f := float64(x)
			vg.Sum += f
			vg.SumSquares += f * f
			vg.MaxAbs = max(vg.MaxAbs, math.Abs(f))
		}
		rep.Gradients[i] = vg
	}
	return rep, nil
}

// call runs a training-step graph (train or gradients) on b's two views.
func (s *Step) call(e *model.Exec, b *Batch) ([]*tensors.Tensor, error) {
	v1 := tensors.FromFlatDataAndDimensions(b.View1, b.N, b.H, b.W, b.C)
	v2 := tensors.FromFlatDataAndDimensions(b.View2, b.N, b.H, b.W, b.C)
	defer v1.FinalizeAll()
	defer v2.FinalizeAll()
	return e.Call(v1, v2)
}

func finalizeAll(ts []*tensors.Tensor) {
	for _, t := range ts {
		_ = t.FinalizeAll()
	}
}

// Features runs the encoder in inference mode (batch-norm running averages), at the step's
// precision, on n images (uint8 HWC, n·h·w·c bytes) and returns backbone features
// [n][FeatureDim] and projections [n][ProjectionDim], both as the model outputs them (not
// normalised).
func (s *Step) Features(images []uint8, n, h, w, c int) (features, projection [][]float32, err error) {
	if n < 1 || len(images) != n*h*w*c {
		return nil, nil, fmt.Errorf("%d images %dx%dx%d need %d bytes, got %d", n, h, w, c, n*h*w*c, len(images))
	}
	t := tensors.FromFlatDataAndDimensions(images, n, h, w, c)
	defer t.FinalizeAll()
	out, err := s.embed.Call(t)
	if err != nil {
		return nil, nil, fmt.Errorf("encoding %d %dx%dx%d images: %w", n, h, w, c, err)
	}
	defer finalizeAll(out)
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
	if s.gradients != nil {
		s.gradients.Finalize()
	}
	s.store.Finalize()
	// The step's buffers are garbage now, but the collector would next run only once the heap
	// doubled from its last (peak-time) size: a second Step built in this process (dcl reproduce
	// trains several) would then peak at twice one step's memory (4.2 GiB instead of 2.2 at
	// resnet18-cifar batch 256). One collection here returns them first.
	runtime.GC()
}

// NumParameters counts the model's weights (not optimiser state nor running averages).
func (s *Step) NumParameters() int {
	total := 0
	for v := range s.store.IterVariables() {
		if v.Trainable && strings.HasPrefix(v.Scope(), model.RootScopePath+modelScope) {
			total += v.Shape().Size()
		}
	}
	return total
}

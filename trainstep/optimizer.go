package trainstep

import (
	"fmt"
	"math"
	"strings"

	. "github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/gomlx/gomlx/ml/model"
	"github.com/gomlx/gomlx/ml/train/optimizer"

	"github.com/dcl-beam/dcl-beam/internal/usage"
)

// OptimizerKind names an optimiser as the --optimizer flag spells it.
type OptimizerKind string

const (
	// SGDMomentum is SGD with (heavy-ball, PyTorch-style) momentum and L2 weight decay.
	SGDMomentum OptimizerKind = "sgd"
	// LARS is SGDMomentum with layer-wise adaptive rate scaling (You et al. 2017) for large
	// batches: each weight tensor's step is scaled by η‖w‖/(‖∇‖ + λ‖w‖).
	LARS OptimizerKind = "lars"
)

// OptimizerConfig configures SGD with momentum or LARS.
type OptimizerConfig struct {
	Kind        OptimizerKind `json:"kind"`
	Momentum    float64       `json:"momentum"`
	WeightDecay float64       `json:"weight_decay"`
	// DecayAll applies weight decay (and LARS scaling) to biases and batch-norm parameters too;
	// by default only convolution kernels and dense weights are decayed.
	DecayAll bool `json:"decay_all,omitempty"`
	// TrustCoefficient is LARS's η (0: 0.001).
	TrustCoefficient float64 `json:"trust_coefficient,omitempty"`
}

// Validate reports settings that cannot train.
func (c OptimizerConfig) Validate() error {
	switch c.Kind {
	case SGDMomentum, LARS:
	default:
		return fmt.Errorf("unknown optimizer %q: want sgd or lars", c.Kind)
	}
	if c.Momentum < 0 || c.Momentum >= 1 || math.IsNaN(c.Momentum) {
		return usage.Value("momentum", c.Momentum, "want 0 ≤ momentum < 1")
	}
	if c.WeightDecay < 0 || math.IsNaN(c.WeightDecay) || math.IsInf(c.WeightDecay, 0) {
		return usage.Value("weight-decay", c.WeightDecay, "want a number ≥ 0")
	}
	if c.TrustCoefficient < 0 {
		return fmt.Errorf("LARS trust coefficient %v: want a number ≥ 0", c.TrustCoefficient)
	}
	return nil
}

// Optimizer implements GoMLX's optimizer.Interface for SGD with momentum and LARS (GoMLX
// v0.26 has neither). For each trainable variable w with gradient g, decay λ and momentum μ:
//
//	g' = g + λw                 (λ = 0 for biases and batch-norm parameters unless DecayAll)
//	g' = g' · η‖w‖/(‖g‖ + λ‖w‖)  (LARS only, decayed tensors only, 1 where a norm is 0)
//	b  = μb + g'; w = w - lr·b
//
// The learning rate is the scalar variable "optimizer/learning_rate", which the caller sets
// before each step (see SetLearningRate); momentum buffers live under "optimizer/momentum",
// named after their variable, so checkpoints carry them.
type Optimizer struct {
	cfg OptimizerConfig
}

var _ optimizer.Interface = (*Optimizer)(nil)

// NewOptimizer checks cfg and returns the optimiser.
func NewOptimizer(cfg OptimizerConfig) (*Optimizer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.TrustCoefficient == 0 {
		cfg.TrustCoefficient = 0.001
	}
	return &Optimizer{cfg: cfg}, nil
}

func isDecayed(v *model.Variable) bool { return v.Name() == weightsName }

// UpdateGraph adds one optimisation step of loss to the graph. It panics on graph errors, as
// GoMLX graph builders do.
func (o *Optimizer) UpdateGraph(scope *model.Scope, g *Graph, loss *Node) {
	if !loss.Shape().IsScalar() {
		panic(fmt.Sprintf("optimizer: loss must be a scalar, got %s", loss.Shape()))
	}
	var vars []*model.Variable
	for v := range scope.IterVariables() {
		if v.Trainable && v.InUseByGraph(g) {
			vars = append(vars, v)
		}
	}
	grads := scope.BuildTrainableVariablesGradientsGraph(loss)
	if len(grads) != len(vars) {
		panic(fmt.Sprintf("optimizer: %d gradients for %d trainable variables", len(grads), len(vars)))
	}
	lr := learningRateVariableIn(scope).NodeValue(g)
	for i, v := range vars {
		w := v.NodeValue(g)
		grad := grads[i]
		if grad.DType() != w.DType() {
			grad = ConvertDType(grad, w.DType())
		}
		decay := o.cfg.WeightDecay
		adapt := o.cfg.Kind == LARS
		if !o.cfg.DecayAll && !isDecayed(v) {
			decay, adapt = 0, false
		}
		step := grad
		if decay > 0 {
			step = Add(step, MulScalar(w, decay))
		}
		if adapt {
			wNorm := L2Norm(w)
			gNorm := L2Norm(grad)
			denominator := Add(gNorm, MulScalar(wNorm, decay))
			trust := Div(MulScalar(wNorm, o.cfg.TrustCoefficient), Where(IsZero(denominator), OnesLike(denominator), denominator))
			trust = Where(Or(IsZero(wNorm), IsZero(gNorm)), OnesLike(trust), trust)
			step = Mul(step, trust)
		}
		buf := momentumVariableIn(scope, v)
		b := Add(MulScalar(buf.NodeValue(g), o.cfg.Momentum), step)
		buf.SetNodeValue(b)
		lrCast := lr
		if lrCast.DType() != w.DType() {
			lrCast = ConvertDType(lr, w.DType())
		}
		v.SetNodeValue(Sub(w, Mul(lrCast, b)))
	}
}

// Clear deletes the momentum buffers.
func (o *Optimizer) Clear(scope *model.Scope) error {
	return scope.Store().DeleteVariablesInScope(optimizerPath)
}

// optimizerPath is the scope of the optimiser's variables. The paths of the variables below
// are those of GoMLX v0.26's context (the same "/"-separated scopes), so checkpoints written
// before the move to model.Store load unchanged.
const optimizerPath = model.RootScopePath + optimizerScope

func learningRateVariable(store *model.Store) *model.Variable {
	return learningRateVariableIn(store.RootScope())
}

// learningRateVariableIn is the learning rate of the model whose variables are under root:
// the store's root for a Step, one run's root in a PackedStep's store, whose runs each follow
// their own schedule.
func learningRateVariableIn(root *model.Scope) *model.Variable {
	scope := root.Store().Scope(model.JoinPath(root.Scope(), optimizerScope))
	if v := scope.GetVariable(learningRateVar); v != nil {
		return v
	}
	return scope.VariableWithValue(learningRateVar, float32(0)).SetTrainable(false)
}

// SetLearningRate sets the learning rate the next step uses.
func SetLearningRate(store *model.Store, lr float64) error {
	return learningRateVariable(store).SetValue(tensors.FromScalar(float32(lr)))
}

// momentumVariable returns the momentum buffer of v, "/optimizer/momentum" followed by v's
// own path.
func momentumVariable(store *model.Store, v *model.Variable) *model.Variable {
	return momentumVariableIn(store.RootScope(), v)
}

// momentumVariableIn is momentumVariable for the model whose variables are under root (see
// learningRateVariableIn): root's "optimizer/momentum" followed by v's path below root.
func momentumVariableIn(root *model.Scope, v *model.Variable) *model.Variable {
	below := strings.TrimPrefix(v.Scope(), strings.TrimSuffix(root.Scope(), model.ScopeSeparator))
	scope := root.Store().Scope(model.JoinPath(root.Scope(), optimizerScope, momentumScope) + below)
	if b := scope.GetVariable(v.Name()); b != nil {
		return b
	}
	zeros := tensors.FromShape(v.Shape())
	return scope.VariableWithValue(v.Name(), zeros).SetTrainable(false)
}

package trainstep

import (
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/ml/model"

	"github.com/dcl-beam/dcl-beam/internal/registry"
)

// NNCLRMethod is NNCLR (Dwibedi et al. 2021): both views are encoded as one batch as in
// SimCLR, a prediction head maps each projection to a prediction, and the positive of a
// view is not its own projection but its nearest neighbour in a support set, a
// first-in-first-out queue of earlier view-1 projections. The anchor NN(z1_i) is paired
// with the prediction of the other view p2_i, the negatives are the other images'
// predictions p2_k, and symmetrically NN(z2_i) with p1; the gradient flows through the
// predictions only (the support set is data). The loss is the step's loss in that pair form
// (PairLossGraph): InfoNCE is NNCLR's, DCL drops the positive from the denominator (the
// paper's NNCLR + DCL).
const NNCLRMethod = "nnclr"

// SettingPredictorHidden is the hidden width of NNCLR's prediction head.
const SettingPredictorHidden = "predictor_hidden"

// NNCLR's settings; the defaults are a support set of 98304 projections and a prediction head
// 4096 wide.
var nnclrParams = []registry.Param{
	{Name: SettingQueueSize, Type: registry.Int, Default: 98304, Doc: "projections in the support set", Check: registry.AtLeast(1)},
	{Name: SettingPredictorHidden, Type: registry.Int, Default: 4096, Doc: "hidden width of the prediction head", Check: registry.AtLeast(1)},
}

const (
	nnclrScope     = "nnclr"
	predictorScope = "predictor"
)

type nnclr struct {
	queueSize, hidden int
}

func newNNCLR(cfg StepConfig) (Method, error) {
	if err := checkQueueLoss(NNCLRMethod, cfg.Loss); err != nil {
		return nil, err
	}
	mc := cfg.MethodConfig
	return nnclr{queueSize: mc.Int(SettingQueueSize), hidden: mc.Int(SettingPredictorHidden)}, nil
}

func (nnclr) Name() string { return NNCLRMethod }

func nnclrRoot(root *model.Scope) *model.Scope { return root.At("method").At(nnclrScope) }

// CreateVariables creates the prediction head's weights (trained like the model's) and the
// support set.
func (m nnclr) CreateVariables(g *MethodGraph) {
	m.predict(g.net, g.Scope, Zeros(g.Graph, shapes.Make(dtypes.Float32, 2, g.Model.Config().ProjectionDim)))
	createQueue(g, nnclrRoot(g.Scope), "support", m.queueSize)
}

// predict is the prediction head, shaped as the projector: Linear (no bias) → BN → ReLU →
// Linear, hidden width PredictorHidden; float32 out.
func (m nnclr) predict(n *net, root *model.Scope, z *Node) *Node {
	scope := nnclrRoot(root).At(predictorScope)
	h := n.dense(scope.In("fc1"), z, m.hidden, false)
	h = relu(n.batchNorm(scope.In("bn1"), h))
	return toFloat32(n.dense(scope.In("fc2"), h, z.Shape().Dim(-1), true))
}

// nearest returns, for each row of z, the support-set row with the largest cosine.
func nearest(z, support *Node) *Node {
	sims := Dot(l2Normalize(z), Transpose(support, 0, 1)).Product() // [B, K]
	idx := ArgMax(sims, 1, dtypes.Int32)
	return Dot(OneHot(idx, support.Shape().Dim(0), support.DType()), support).Product()
}

// TrainGraph encodes both views as one batch (batch statistics of the 2N views), predicts,
// finds each projection's nearest neighbour in the support set as it was before this step,
// and builds the symmetric pair loss.
func (m nnclr) TrainGraph(g *MethodGraph, view1, view2 *Node) TrainNodes {
	n := view1.Shape().Dim(0)
	zd := g.EncodeViews(view1, view2)
	z, p := g.InViewOrder(zd), g.InViewOrder(m.predict(g.net, g.Scope, zd))
	support := StopGradient(nnclrRoot(g.Scope).GetVariable("support").NodeValue(view1.Graph()))
	nn := nearest(StopGradient(z), support)
	first, second := AxisRange(0, n), AxisRange(n, 2*n)
	one := PairLossGraph(Slice(nn, first), Slice(p, second), g.Loss)
	other := PairLossGraph(Slice(nn, second), Slice(p, first), g.Loss)
	return TrainNodes{
		Loss: DivScalar(Add(one.Loss, other.Loss), 2),
		Q:    Concatenate([]*Node{one.Q, other.Q}, 0),
		Kept: map[string]*Node{"support": l2Normalize(StopGradient(Slice(z, first)))},
	}
}

// AfterUpdate enqueues this step's view-1 projections (normalised) into the support set.
func (nnclr) AfterUpdate(g *MethodGraph, nodes TrainNodes) {
	enqueue(nnclrRoot(g.Scope).GetVariable("support"), nodes.Kept["support"])
}

func init() {
	RegisterMethod(MethodSpec{
		Name: NNCLRMethod, Display: "NNCLR",
		Params: nnclrParams, New: newNNCLR,
	})
}

package trainstep

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	. "github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/gomlx/gomlx/ml/model"

	"github.com/dcl-beam/dcl-beam/internal/registry"
)

// MoCoMethod is MoCo-v2 (He et al. 2020, Chen et al. 2020): the queries are the projections
// of view 1 by the trained encoder, their keys the projections of view 2 by a momentum (EMA)
// copy of it, and the negatives a first-in-first-out queue of the keys of earlier steps.
// The loss is the step's loss in its queue form (QueueLossGraph): InfoNCE is MoCo's own,
// DCL drops the positive from the denominator.
//
// Batch norm: MoCo trains on several GPUs, each normalising its part of the batch, and
// shuffles the keys across GPUs so that a query and its key never share batch statistics
// (otherwise the statistics leak which key is the positive and the loss is cheated). On one
// device the batch is split into BNSplits groups that each take their own statistics, and
// the keys are regrouped before the key encoder (position m·S + s holds the key of example
// s·M + m, for S groups of M) so that every key group holds an equal share of every query
// group. The regrouping is fixed rather than random: the loader already shuffles which
// images share a batch, and a fixed one keeps resume exact without a random state.
const MoCoMethod = "moco"

// MoCo's settings. The defaults are MoCo-v2's (Chen et al. 2020, ImageNet): a queue of 65536
// keys and momentum 0.999. Eight batch-norm groups are eight GPUs' worth, as MoCo's own
// single-GPU CIFAR demo uses.
const (
	// SettingQueueSize is MoCo's queue of negative keys K, or NNCLR's support set.
	SettingQueueSize = "queue_size"
	// SettingMomentumEMA is MoCo's key-encoder momentum m: key ← m·key + (1-m)·query after
	// each step.
	SettingMomentumEMA = "momentum_ema"
	// SettingSymmetric makes MoCo use both views as queries (each against the other's key),
	// and enqueue both keys.
	SettingSymmetric = "symmetric"
	// SettingBNSplits is the number of groups MoCo's batch norm takes its statistics over,
	// keys regrouped so each key's group mixes every query group (single-device shuffle BN).
	SettingBNSplits = "bn_splits"
	// SettingMomentumCosine makes the key-encoder momentum follow a cosine from momentum_ema
	// at the first step to 1 at the last (BYOL's schedule, as solo-learn and lightly apply it
	// to MoCo's EMA) instead of momentum_ema at every step (MoCo-v2's own).
	SettingMomentumCosine = "momentum_ema_cosine"
)

var mocoParams = []registry.Param{
	{Name: SettingQueueSize, Type: registry.Int, Default: 65536, Doc: "negative keys in the queue", Check: registry.AtLeast(1)},
	{Name: SettingMomentumEMA, Default: 0.999, Doc: "key-encoder momentum m, key ← m·key + (1-m)·query after each step", Check: registry.InRange(0, 1)},
	{Name: SettingSymmetric, Type: registry.Bool, Doc: "both views as queries, each against the other's key"},
	{Name: SettingBNSplits, Type: registry.Int, Default: 8, Doc: "groups batch norm takes its statistics over, keys regrouped across them (one-device shuffle BN)", Check: registry.AtLeast(1)},
	{Name: SettingMomentumCosine, Type: registry.Bool,
		Doc: "key-encoder momentum on a cosine from momentum_ema at the first step to 1 at the last (BYOL's, as solo-learn and lightly schedule MoCo's); false: momentum_ema at every step (MoCo-v2's)"},
}

// emaMomentumVar is the variable that holds a scheduled key-encoder momentum for the next
// step (MoCo with a cosine schedule).
const emaMomentumVar = "momentum_ema"

const mocoScope = "moco"

type moco struct {
	queueSize, bnSplits int
	momentum            float64
	symmetric           bool
	cosine              bool // the momentum follows the cosine schedule (SetProgress)
}

func newMoCo(cfg StepConfig) (Method, error) {
	if err := checkQueueLoss(MoCoMethod, cfg.Loss); err != nil {
		return nil, err
	}
	mc := cfg.MethodConfig
	m := moco{queueSize: mc.Int(SettingQueueSize), momentum: mc.Float(SettingMomentumEMA),
		symmetric: mc.Bool(SettingSymmetric), bnSplits: mc.Int(SettingBNSplits), cosine: mc.Bool(SettingMomentumCosine)}
	if m.cosine {
		return scheduledMoCo{m}, nil
	}
	return m, nil
}

// scheduledMoCo is MoCo whose key-encoder momentum follows the cosine schedule.
type scheduledMoCo struct{ moco }

// CosineMomentum is the key-encoder momentum of a cosine schedule from base (at step 0) to 1
// (at step total): 1 - (1-base)·(cos(π·step/total)+1)/2.
func CosineMomentum(base float64, step, total int) float64 {
	if total <= 0 {
		return base
	}
	return 1 - (1-base)*(math.Cos(math.Pi*float64(min(step, total))/float64(total))+1)/2
}

// SetProgress sets the momentum of the step that follows step steps of total.
func (m scheduledMoCo) SetProgress(store *model.Store, step, total int) error {
	v := store.Scope("/method/" + mocoScope).GetVariable(emaMomentumVar)
	if v == nil {
		return fmt.Errorf("moco: no variable %s", emaMomentumVar)
	}
	return v.SetValue(tensors.FromScalar(float32(CosineMomentum(m.momentum, step, total))))
}

// checkQueueLoss refuses a loss that has no queue form (see LossSpec.InBatchOnly).
func checkQueueLoss(method string, loss LossConfig) error {
	spec, ok := LookupLoss(loss.Kind)
	if ok && spec.InBatchOnly {
		var queueLosses []string
		for _, s := range Losses() {
			if !s.InBatchOnly {
				queueLosses = append(queueLosses, string(s.Kind))
			}
		}
		return fmt.Errorf("%s: the %s loss needs every view of the batch as a negative and has no queue form; want %s",
			method, spec.Display, strings.Join(queueLosses, ", "))
	}
	return nil
}

func (moco) Name() string { return MoCoMethod }

// keyRoot is the root the key encoder's variables live under: the model's own paths below
// /method/moco/key, so that Model.backbone and Model.project build it unchanged.
func keyRoot(root *model.Scope) *model.Scope { return root.At("method").At(mocoScope).At("key") }

// CreateVariables copies every model variable (the key encoder starts equal to the query
// encoder) and creates the queue: random unit vectors, as MoCo starts it.
func (m moco) CreateVariables(g *MethodGraph) {
	copyModelVariables(g.Scope, keyRoot(g.Scope))
	createQueue(g, g.Scope.At("method").At(mocoScope), "queue", m.queueSize)
	if m.cosine {
		g.Scope.At("method").At(mocoScope).VariableWithValue(emaMomentumVar, float32(m.momentum)).SetTrainable(false)
	}
}

// copyModelVariables creates, under root, a variable with the path and a copy of the value
// of every variable of the model scope, not trainable.
func copyModelVariables(storeRoot, root *model.Scope) {
	store := storeRoot.Store()
	var modelVars []*model.Variable
	for v := range store.IterVariables() {
		if isModelScope(v.Scope()) {
			modelVars = append(modelVars, v)
		}
	}
	for _, v := range modelVars {
		value, err := v.Value()
		if err != nil {
			panic(fmt.Sprintf("reading %s: %v", v.Path(), err))
		}
		clone, err := value.Clone()
		if err != nil {
			panic(fmt.Sprintf("copying %s: %v", v.Path(), err))
		}
		if _, err := store.CreateVariable(root.Scope()+v.Path(), clone); err != nil {
			panic(fmt.Sprintf("creating the copy of %s: %v", v.Path(), err))
		}
		store.GetVariable(root.Scope() + v.Path()).SetTrainable(false)
	}
}

// createQueue creates scope's variable name, [size, ProjectionDim] random unit vectors (from
// the step's seed and the variable's path), not trained.
func createQueue(g *MethodGraph, scope *model.Scope, name string, size int) {
	d := g.Model.Config().ProjectionDim
	g.net.variable(scope, name, false, func(r *rand.Rand) *tensors.Tensor {
		data := make([]float32, size*d)
		for i := 0; i < size; i++ {
			row := data[i*d : (i+1)*d]
			var sq float64
			for j := range row {
				x := r.NormFloat64()
				row[j] = float32(x)
				sq += x * x
			}
			inv := float32(1 / math.Sqrt(sq))
			for j := range row {
				row[j] *= inv
			}
		}
		return tensors.FromFlatDataAndDimensions(data, size, d)
	})
}

// bnGroups is the number of batch-norm groups MoCo uses for a batch of n: the largest
// divisor of n that is at most want and leaves at least 2 examples per group (1 for n < 4).
func bnGroups(n, want int) int {
	for s := min(want, n/2); s > 1; s-- {
		if n%s == 0 {
			return s
		}
	}
	return 1
}

// interleave regroups the first axis of x, [S·M, …], so that position m·S + s holds row
// s·M + m; deinterleave undoes it.
func interleave(x *Node, s int) *Node { return regroup(x, s) }

func deinterleave(x *Node, s int) *Node { return regroup(x, x.Shape().Dim(0)/s) }

func regroup(x *Node, s int) *Node {
	dims := x.Shape().Dimensions
	n := dims[0]
	if s <= 1 || s == n {
		return x
	}
	grouped := Reshape(x, append([]int{s, n / s}, dims[1:]...)...)
	return Reshape(Transpose(grouped, 0, 1), dims...)
}

// TrainGraph encodes the queries with the trained encoder and the keys with the key
// encoder (no gradient), each batch's statistics in bnGroups groups, and builds the queue
// loss against the queue as it was before this step.
func (m moco) TrainGraph(g *MethodGraph, view1, view2 *Node) TrainNodes {
	n := view1.Shape().Dim(0)
	splits := bnGroups(n, m.bnSplits)
	queryNet := *g.net
	queryNet.bnSplits = splits
	keyNet := queryNet
	keyNet.updateStats = false // the key encoder's running averages are never read
	keyRootScope := keyRoot(g.Scope)
	encode := func(nt *net, root *model.Scope, images *Node) *Node {
		return g.Model.project(nt, root, g.Model.backbone(nt, root, images))
	}
	key := func(images *Node) *Node {
		return l2Normalize(StopGradient(deinterleave(encode(&keyNet, keyRootScope, interleave(images, splits)), splits)))
	}
	queue := StopGradient(g.Scope.At("method").At(mocoScope).GetVariable("queue").NodeValue(view1.Graph()))

	k2 := key(view2)
	nodes := QueueLossGraph(encode(&queryNet, g.Scope, view1), k2, queue, g.Loss)
	if !m.symmetric {
		return TrainNodes{Loss: nodes.Loss, Q: nodes.Q, Kept: map[string]*Node{"keys": k2}}
	}
	k1 := key(view1)
	other := QueueLossGraph(encode(&queryNet, g.Scope, view2), k1, queue, g.Loss)
	return TrainNodes{
		Loss: DivScalar(Add(nodes.Loss, other.Loss), 2),
		Q:    Concatenate([]*Node{nodes.Q, other.Q}, 0),
		Kept: map[string]*Node{"keys": Concatenate([]*Node{k2, k1}, 0)},
	}
}

// AfterUpdate moves the key encoder towards the updated query encoder and enqueues this
// step's keys: they become the newest rows, and the oldest fall out.
func (m moco) AfterUpdate(g *MethodGraph, nodes TrainNodes) {
	gr := nodes.Loss.Graph()
	scope := g.Scope.At("method").At(mocoScope)
	var scheduled *Node
	if m.cosine {
		scheduled = StopGradient(scope.GetVariable(emaMomentumVar).NodeValue(gr))
	}
	ema(g.Scope, keyRoot(g.Scope), gr, m.momentum, scheduled)
	enqueue(scope.GetVariable("queue"), nodes.Kept["keys"])
}

// ema sets every trainable model variable's copy under root to
// momentum·copy + (1-momentum)·variable, the variable's value after this step's update:
// momentum is the constant, or the scheduled one (a float32 scalar node) where not nil.
func ema(storeRoot, root *model.Scope, g *Graph, momentum float64, scheduled *Node) {
	store := storeRoot.Store()
	for v := range store.IterVariables() {
		if !v.Trainable || !isModelScope(v.Scope()) {
			continue
		}
		k := store.GetVariable(root.Scope() + v.Path())
		kv, vv := k.NodeValue(g), v.NodeValue(g)
		if scheduled == nil {
			k.SetNodeValue(Add(MulScalar(kv, momentum), MulScalar(vv, 1-momentum)))
			continue
		}
		m := ConvertDType(scheduled, kv.DType())
		k.SetNodeValue(Add(Mul(kv, m), Mul(vv, OneMinus(m))))
	}
}

// enqueue puts rows at the front of the queue variable and drops as many of its oldest
// (last) rows; when there are more rows than the queue holds, the first ones fill it.
func enqueue(queue *model.Variable, rows *Node) {
	old := queue.NodeValue(rows.Graph())
	size := old.Shape().Dim(0)
	if rows.DType() != old.DType() {
		rows = ConvertDType(rows, old.DType())
	}
	queue.SetNodeValue(Slice(Concatenate([]*Node{rows, old}, 0), AxisRange(0, size)))
}

func init() {
	RegisterMethod(MethodSpec{
		Name: MoCoMethod, Display: "MoCo-v2",
		Params: mocoParams, New: newMoCo,
	})
}

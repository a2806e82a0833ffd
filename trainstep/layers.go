package trainstep

import (
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/gomlx/gomlx/ml/model"
)

// Variable names. Weight decay applies to variables named weightsName only: convolution kernels
// and dense weights, not biases or batch-norm scales and offsets (the usual practice, and the
// default of this package).
const (
	weightsName     = "weights"
	biasName        = "bias"
	bnScaleName     = "scale"
	bnOffsetName    = "offset"
	bnMeanName      = "running_mean"
	bnVarianceName  = "running_var"
	bnMomentum      = 0.1 // PyTorch's: running = (1-m)·running + m·batch
	bnEpsilon       = 1e-5
	modelScope      = "model"
	backboneScope   = "backbone"
	projectorScope  = "projector"
	optimizerScope  = "optimizer"
	momentumScope   = "momentum"
	learningRateVar = "learning_rate"
)

// net carries what every layer of one model graph needs: whether it is a training graph
// (batch statistics) and whether it updates the running averages (a training step does, a
// gradient check does not), the seed that initial weights derive from, and the dtype that
// convolutions, matrix products and activations run in (Precision.dtype).
type net struct {
	train       bool
	updateStats bool
	seed        uint64
	dtype       dtypes.DType
	// bnSplits > 1 makes training-mode batch norm take its statistics over that many equal
	// groups of the batch (consecutive examples) instead of the whole batch (MoCo).
	bnSplits int
}

// compute casts x to the net's compute dtype: where a layer reads its weights and inputs.
// In float32 it adds nothing to the graph.
func (n *net) compute(x *Node) *Node {
	if x.DType() == n.dtype {
		return x
	}
	return ConvertDType(x, n.dtype)
}

// toFloat32 casts x to float32 (nothing when it is): for what stays in float32 in mixed
// precision, batch-norm statistics, the pool, the loss.
func toFloat32(x *Node) *Node {
	if x.DType() == dtypes.Float32 {
		return x
	}
	return ConvertDType(x, dtypes.Float32)
}

// variable returns the variable name in scope, creating it with init's value if it does
// not exist yet. Initial values are drawn from a generator seeded by (seed, scope, name), so a
// model's initial weights depend only on the seed, not on the order layers are built in.
func (n *net) variable(scope *model.Scope, name string, trainable bool, init func(r *rand.Rand) *tensors.Tensor) *model.Variable {
	if v := scope.GetVariable(name); v != nil {
		return v
	}
	h := fnv.New64a()
	h.Write([]byte(scope.Scope() + "/" + name))
	r := rand.New(rand.NewPCG(n.seed, h.Sum64()))
	return scope.VariableWithValue(name, init(r)).SetTrainable(trainable)
}

func constTensor(value float32, dims ...int) func(*rand.Rand) *tensors.Tensor {
	return func(*rand.Rand) *tensors.Tensor {
		return tensors.FromScalarAndDimensions(value, dims...)
	}
}

func normalTensor(std float64, dims ...int) func(*rand.Rand) *tensors.Tensor {
	return randomTensor(dims, func(r *rand.Rand) float64 { return r.NormFloat64() * std })
}

func uniformTensor(bound float64, dims ...int) func(*rand.Rand) *tensors.Tensor {
	return randomTensor(dims, func(r *rand.Rand) float64 { return (2*r.Float64() - 1) * bound })
}

// randomTensor fills a tensor of the given shape with draws, in order.
func randomTensor(dims []int, draw func(*rand.Rand) float64) func(*rand.Rand) *tensors.Tensor {
	return func(r *rand.Rand) *tensors.Tensor {
		size := 1
		for _, d := range dims {
			size *= d
		}
		data := make([]float32, size)
		for i := range data {
			data[i] = float32(draw(r))
		}
		return tensors.FromFlatDataAndDimensions(data, dims...)
	}
}

// conv is a k×k convolution without bias (batch norm follows every one), "same"-style padding
// k/2 as torchvision's ResNets use, channels last. Kernels start as Kaiming normal with
// fan-out mode (torchvision's ResNet initialisation).
func (n *net) conv(scope *model.Scope, x *Node, outChannels, k, stride int) *Node {
	inChannels := x.Shape().Dim(-1)
	std := math.Sqrt(2 / float64(outChannels*k*k))
	w := n.compute(n.variable(scope, weightsName, true, normalTensor(std, k, k, inChannels, outChannels)).NodeValue(x.Graph()))
	x = n.compute(x)
	pad := k / 2
	return Convolve(x, w).StridePerAxis(stride, stride).PaddingPerDim([][2]int{{pad, pad}, {pad, pad}}).Done()
}

// dense is a fully connected layer with PyTorch's default initialisation, U(±1/√fan_in).
func (n *net) dense(scope *model.Scope, x *Node, out int, bias bool) *Node {
	in := x.Shape().Dim(-1)
	bound := 1 / math.Sqrt(float64(in))
	g := x.Graph()
	w := n.compute(n.variable(scope, weightsName, true, uniformTensor(bound, in, out)).NodeValue(g))
	// Dot of bfloat16 operands accumulates in float32; its output dtype is the backend's
	// choice, so it is cast to the compute dtype (a no-op in float32).
	y := n.compute(Dot(n.compute(x), w).Product())
	if bias {
		b := n.compute(n.variable(scope, biasName, true, uniformTensor(bound, out)).NodeValue(g))
		y = Add(y, ExpandLeftToRank(b, y.Rank()))
	}
	return y
}

// batchNorm normalises over every axis but the last. In a training graph it uses the batch's
// statistics, lets the gradient flow through them (as PyTorch does; GoMLX's own batch-norm layer
// stops it) and, if n.updateStats, updates the running averages; otherwise it uses the running
// averages. It runs in float32 whatever the precision (bfloat16 statistics of a large batch
// lose too many digits) and returns the compute dtype.
func (n *net) batchNorm(scope *model.Scope, x *Node) *Node {
	g := x.Graph()
	x = toFloat32(x)
	c := x.Shape().Dim(-1)
	scale := n.variable(scope, bnScaleName, true, constTensor(1, c)).NodeValue(g)
	offset := n.variable(scope, bnOffsetName, true, constTensor(0, c)).NodeValue(g)
	meanVar := n.variable(scope, bnMeanName, false, constTensor(0, c))
	varVar := n.variable(scope, bnVarianceName, false, constTensor(1, c))

	// The fused operations: one pass for the statistics and the output, and a gradient that
	// keeps no broadcast temporaries (about 20% of a ResNet-18 step and 1.6 GiB at 256
	// images on the CPU backend, which implements them natively, as XLA does).
	axis := x.Rank() - 1
	if !n.train {
		return n.compute(InternalBatchNormForInference(x, scale, offset, meanVar.NodeValue(g), varVar.NodeValue(g), bnEpsilon, axis))
	}
	var normalised, mean, variance *Node
	count := x.Shape().Size() / c
	if n.bnSplits > 1 {
		normalised, mean, variance = splitBatchNorm(x, scale, offset, n.bnSplits)
		count /= n.bnSplits
	} else {
		normalised, mean, variance = InternalBatchNormForTraining(x, scale, offset, bnEpsilon, axis)
	}
	if !n.updateStats {
		return n.compute(normalised)
	}
	unbiased := StopGradient(variance)
	if count > 1 {
		unbiased = MulScalar(unbiased, float64(count)/float64(count-1))
	}
	meanVar.SetNodeValue(Add(MulScalar(meanVar.NodeValue(g), 1-bnMomentum), MulScalar(StopGradient(mean), bnMomentum)))
	varVar.SetNodeValue(Add(MulScalar(varVar.NodeValue(g), 1-bnMomentum), MulScalar(unbiased, bnMomentum)))
	return n.compute(normalised)
}

// splitBatchNorm is training-mode batch norm with the statistics of each of splits equal
// groups of consecutive examples, as on that many devices without synchronised batch norm.
// It returns the output and the mean over the groups of their means and (biased) variances,
// for the running averages. The gradient flows through each group's statistics.
//
// The groups become part of the feature axis ([S·M, …, C] → [M, …, S·C], the scale and
// offset repeated per group) so that the fused batch-norm operation does the work: faster on
// the CPU backend than the same normalisation written with graph operations. The two
// transposes still keep activation-sized copies for the backward pass (BENCHMARKS.md).
func splitBatchNorm(x, scale, offset *Node, splits int) (normalised, mean, variance *Node) {
	dims := x.Shape().Dimensions
	rank := len(dims)
	c := dims[rank-1]
	grouped := Reshape(x, append([]int{splits, dims[0] / splits}, dims[1:]...)...) // [S, M, …, C]
	toFeatures := make([]int, 0, rank+1)                                           // [M, …, S, C]
	for axis := 1; axis < rank; axis++ {
		toFeatures = append(toFeatures, axis)
	}
	toFeatures = append(toFeatures, 0, rank)
	moved := TransposeAllAxes(grouped, toFeatures...)
	movedDims := moved.Shape().Dimensions
	flatDims := append(slices.Clone(movedDims[:rank-1]), splits*c)
	repeat := func(v *Node) *Node { return Reshape(BroadcastToDims(Reshape(v, 1, c), splits, c), splits*c) }
	y, groupMean, groupVar := InternalBatchNormForTraining(Reshape(moved, flatDims...), repeat(scale), repeat(offset), bnEpsilon, rank-1)
	back := make([]int, rank+1) // the inverse of toFeatures
	for i, axis := range toFeatures {
		back[axis] = i
	}
	normalised = Reshape(TransposeAllAxes(Reshape(y, movedDims...), back...), dims...)
	return normalised, ReduceMean(Reshape(groupMean, splits, c), 0), ReduceMean(Reshape(groupVar, splits, c), 0)
}

func relu(x *Node) *Node { return Max(x, ZerosLike(x)) }

// maxPool3x3s2 is a 3×3 max-pool with stride 2 and padding 1 (ResNet's ImageNet stem), the
// padding never chosen (PyTorch's MaxPool2d(3, 2, padding=1)). Its gradient goes to the
// largest value of each window (select-and-scatter). GoMLX v0.26's pure-Go backend had
// neither select-and-scatter nor Pad, and this was the maximum of nine strided slices;
// TestMaxPoolMatchesLoops checks values and gradient on GoMLX v0.28's pure-Go backend too.
func maxPool3x3s2(x *Node) *Node {
	return MaxPool(x).Window(3).Strides(2).PaddingPerDim([][2]int{{1, 1}, {1, 1}}).Done()
}

// globalAvgPool averages over the spatial axes: [B, H, W, C] → [B, C], in float32 (a
// reduction over many positions).
func globalAvgPool(x *Node) *Node { return ReduceMean(toFloat32(x), 1, 2) }

package trainstep

import (
	"hash/fnv"
	"math"
	"math/rand/v2"

	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
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
// (batch statistics, running averages updated) and the seed that initial weights derive from.
type net struct {
	train bool
	seed  uint64
}

// variable returns the variable name in ctx's scope, creating it with init's value if it does
// not exist yet. Initial values are drawn from a generator seeded by (seed, scope, name), so a
// model's initial weights depend only on the seed, not on the order layers are built in.
func (n *net) variable(ctx *context.Context, name string, trainable bool, init func(r *rand.Rand) *tensors.Tensor) *context.Variable {
	ctx = ctx.Checked(false)
	if v := ctx.GetVariableByScopeAndName(ctx.Scope(), name); v != nil {
		return v
	}
	h := fnv.New64a()
	h.Write([]byte(ctx.Scope() + "/" + name))
	r := rand.New(rand.NewPCG(n.seed, h.Sum64()))
	return ctx.VariableWithValue(name, init(r)).SetTrainable(trainable)
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
func (n *net) conv(ctx *context.Context, x *Node, outChannels, k, stride int) *Node {
	inChannels := x.Shape().Dim(-1)
	std := math.Sqrt(2 / float64(outChannels*k*k))
	w := n.variable(ctx, weightsName, true, normalTensor(std, k, k, inChannels, outChannels)).ValueGraph(x.Graph())
	pad := k / 2
	// Strides and padding are always given: GoMLX v0.26's pure-Go backend reads empty stride
	// settings as stride 0.
	return Convolve(x, w).StridePerAxis(stride, stride).PaddingPerDim([][2]int{{pad, pad}, {pad, pad}}).Done()
}

// dense is a fully connected layer with PyTorch's default initialisation, U(±1/√fan_in).
func (n *net) dense(ctx *context.Context, x *Node, out int, bias bool) *Node {
	in := x.Shape().Dim(-1)
	bound := 1 / math.Sqrt(float64(in))
	g := x.Graph()
	w := n.variable(ctx, weightsName, true, uniformTensor(bound, in, out)).ValueGraph(g)
	y := Dot(x, w)
	if bias {
		b := n.variable(ctx, biasName, true, uniformTensor(bound, out)).ValueGraph(g)
		y = Add(y, ExpandLeftToRank(b, y.Rank()))
	}
	return y
}

// batchNorm normalises over every axis but the last. In a training graph it uses the batch's
// statistics, lets the gradient flow through them (as PyTorch does; GoMLX's own batch-norm layer
// stops it) and updates the running averages; otherwise it uses the running averages.
func (n *net) batchNorm(ctx *context.Context, x *Node) *Node {
	g := x.Graph()
	c := x.Shape().Dim(-1)
	scale := n.variable(ctx, bnScaleName, true, constTensor(1, c)).ValueGraph(g)
	offset := n.variable(ctx, bnOffsetName, true, constTensor(0, c)).ValueGraph(g)
	meanVar := n.variable(ctx, bnMeanName, false, constTensor(0, c))
	varVar := n.variable(ctx, bnVarianceName, false, constTensor(1, c))

	// The fused operations: one pass for the statistics and the output, and a gradient that
	// keeps no broadcast temporaries (about 20% of a ResNet-18 step and 1.6 GiB at 256
	// images on the CPU backend, which implements them natively, as XLA does).
	axis := x.Rank() - 1
	if !n.train {
		return InternalBatchNormForInference(x, scale, offset, meanVar.ValueGraph(g), varVar.ValueGraph(g), bnEpsilon, axis)
	}
	count := x.Shape().Size() / c
	normalised, mean, variance := InternalBatchNormForTraining(x, scale, offset, bnEpsilon, axis)
	unbiased := StopGradient(variance)
	if count > 1 {
		unbiased = MulScalar(unbiased, float64(count)/float64(count-1))
	}
	meanVar.SetValueGraph(Add(MulScalar(meanVar.ValueGraph(g), 1-bnMomentum), MulScalar(StopGradient(mean), bnMomentum)))
	varVar.SetValueGraph(Add(MulScalar(varVar.ValueGraph(g), 1-bnMomentum), MulScalar(unbiased, bnMomentum)))
	return normalised
}

func relu(x *Node) *Node { return Max(x, ZerosLike(x)) }

// maxPool3x3s2 is a 3×3 max-pool with stride 2 and padding 1 (ResNet's ImageNet stem), written
// as the maximum of nine strided slices of the input padded with -Inf: GoMLX v0.26's pure-Go
// backend has neither select-and-scatter (for its max-pool's gradient) nor Pad.
func maxPool3x3s2(x *Node) *Node {
	g := x.Graph()
	b, h, w, c := x.Shape().Dim(0), x.Shape().Dim(1), x.Shape().Dim(2), x.Shape().Dim(3)
	lowest := Scalar(g, x.DType(), math.Inf(-1))
	padded := Concatenate([]*Node{BroadcastToDims(lowest, b, 1, w, c), x, BroadcastToDims(lowest, b, 1, w, c)}, 1)
	padded = Concatenate([]*Node{BroadcastToDims(lowest, b, h+2, 1, c), padded, BroadcastToDims(lowest, b, h+2, 1, c)}, 2)
	outH, outW := (h-1)/2+1, (w-1)/2+1
	var out *Node
	for dy := 0; dy < 3; dy++ {
		for dx := 0; dx < 3; dx++ {
			s := Slice(padded, AxisRange(), AxisRange(dy, dy+2*outH-1).Stride(2), AxisRange(dx, dx+2*outW-1).Stride(2), AxisRange())
			if out == nil {
				out = s
			} else {
				out = Max(out, s)
			}
		}
	}
	return out
}

// globalAvgPool averages over the spatial axes: [B, H, W, C] → [B, C].
func globalAvgPool(x *Node) *Node { return ReduceMean(x, 1, 2) }

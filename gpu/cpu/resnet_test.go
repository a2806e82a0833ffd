package cpu

import (
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // GoMLX graphs read best unqualified
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/gomlx/gomlx/ml/model"
	"github.com/gomlx/gomlx/ml/model/initializer"
)

// This file holds ResNets built like the trainer's (trainstep): convolutions without bias,
// batch norm over every axis but the channels, ReLU, residual additions, global average pooling
// and a projector MLP, channels last. The benchmarks time a whole training step with them.

// resnetSpec is a ResNet: ResNet-18 with the CIFAR stem (3×3, stride 1, no pooling) or
// ResNet-50 with the ImageNet stem (7×7 stride 2, 3×3 max pool).
type resnetSpec struct {
	name       string
	blocks     []int
	bottleneck bool
	imagenet   bool
	width      int
}

var (
	resnet18CIFAR = resnetSpec{name: "resnet18-cifar", blocks: []int{2, 2, 2, 2}, width: 64}
	resnet50      = resnetSpec{name: "resnet50", blocks: []int{3, 4, 6, 3}, bottleneck: true, imagenet: true, width: 64}
)

// bnKind picks how batch norm is written: with basic operations as the trainer does, or with
// GoMLX's fused batch-norm operations.
type bnKind int

const (
	bnBasic bnKind = iota
	bnFused
)

type resnetBuilder struct {
	spec  resnetSpec
	train bool
	bn    bnKind
}

func (r *resnetBuilder) conv(scope *model.Scope, x *Node, out, k, stride int) *Node {
	in := x.Shape().Dim(-1)
	std := math.Sqrt(2 / float64(out*k*k))
	w := scope.WithInitializer(initializer.RandomNormalFn(scope, std)).VariableWithShape("weights", shapes.Make(x.DType(), k, k, in, out)).NodeValue(x.Graph())
	pad := k / 2
	return Convolve(x, w).StridePerAxis(stride, stride).PaddingPerDim([][2]int{{pad, pad}, {pad, pad}}).Done()
}

func (r *resnetBuilder) batchNorm(scope *model.Scope, x *Node) *Node {
	g := x.Graph()
	c := x.Shape().Dim(-1)
	scale := scope.WithInitializer(initializer.One).VariableWithShape("scale", shapes.Make(x.DType(), c)).NodeValue(g)
	offset := scope.WithInitializer(initializer.Zero).VariableWithShape("offset", shapes.Make(x.DType(), c)).NodeValue(g)
	meanVar := scope.WithInitializer(initializer.Zero).VariableWithShape("running_mean", shapes.Make(x.DType(), c)).SetTrainable(false)
	varVar := scope.WithInitializer(initializer.One).VariableWithShape("running_var", shapes.Make(x.DType(), c)).SetTrainable(false)
	if !r.train {
		if r.bn == bnFused {
			return InternalBatchNormForInference(x, scale, offset, meanVar.NodeValue(g), varVar.NodeValue(g), 1e-5, -1)
		}
		mean, variance := ExpandLeftToRank(meanVar.NodeValue(g), x.Rank()), ExpandLeftToRank(varVar.NodeValue(g), x.Rank())
		return Add(Mul(Div(Sub(x, mean), Sqrt(AddScalar(variance, 1e-5))), ExpandLeftToRank(scale, x.Rank())), ExpandLeftToRank(offset, x.Rank()))
	}
	var y, mean, variance *Node
	if r.bn == bnFused {
		y, mean, variance = InternalBatchNormForTraining(x, scale, offset, 1e-5, -1)
	} else {
		axes := make([]int, x.Rank()-1)
		for i := range axes {
			axes[i] = i
		}
		m := ReduceAndKeep(x, ReduceMean, axes...)
		v := ReduceAndKeep(Square(Sub(x, m)), ReduceMean, axes...)
		y = Add(Mul(Div(Sub(x, m), Sqrt(AddScalar(v, 1e-5))), ExpandLeftToRank(scale, x.Rank())), ExpandLeftToRank(offset, x.Rank()))
		mean, variance = Reshape(m, c), Reshape(v, c)
	}
	meanVar.SetNodeValue(Add(MulScalar(meanVar.NodeValue(g), 0.9), MulScalar(StopGradient(mean), 0.1)))
	varVar.SetNodeValue(Add(MulScalar(varVar.NodeValue(g), 0.9), MulScalar(StopGradient(variance), 0.1)))
	return y
}

func (r *resnetBuilder) convBN(scope *model.Scope, x *Node, out, k, stride int, relu bool) *Node {
	y := r.batchNorm(scope.In("bn"), r.conv(scope.In("conv"), x, out, k, stride))
	if relu {
		y = Max(y, ZerosLike(y))
	}
	return y
}

func (r *resnetBuilder) block(scope *model.Scope, x *Node, width, stride int) *Node {
	out := width
	if r.spec.bottleneck {
		out = 4 * width
	}
	shortcut := x
	if stride != 1 || x.Shape().Dim(-1) != out {
		shortcut = r.convBN(scope.In("shortcut"), x, out, 1, stride, false)
	}
	var y *Node
	if r.spec.bottleneck {
		y = r.convBN(scope.In("a"), x, width, 1, 1, true)
		y = r.convBN(scope.In("b"), y, width, 3, stride, true)
		y = r.convBN(scope.In("c"), y, out, 1, 1, false)
	} else {
		y = r.convBN(scope.In("a"), x, width, 3, stride, true)
		y = r.convBN(scope.In("b"), y, out, 3, 1, false)
	}
	sum := Add(y, shortcut)
	return Max(sum, ZerosLike(sum))
}

// features runs the backbone: [B, H, W, 3] images to [B, features].
func (r *resnetBuilder) features(scope *model.Scope, x *Node) *Node {
	w := r.spec.width
	if r.spec.imagenet {
		x = r.convBN(scope.In("stem"), x, w, 7, 2, true)
		x = MaxPool(x).Window(3).Strides(2).PadSame().Done()
	} else {
		x = r.convBN(scope.In("stem"), x, w, 3, 1, true)
	}
	for stage, n := range r.spec.blocks {
		for b := range n {
			stride := 1
			if b == 0 && stage > 0 {
				stride = 2
			}
			x = r.block(scope.In("layer%d_%d", stage, b), x, w<<stage, stride)
		}
	}
	return ReduceMean(x, 1, 2)
}

// trainLoss is the backbone, a projector (dense, BN, ReLU, dense to 128) and a stand-in loss
// (the mean square of the L2-normalised projections' similarities), whose cost is negligible
// next to the network's.
func (r *resnetBuilder) trainLoss(scope *model.Scope, images *Node) *Node {
	h := r.features(scope.In("backbone"), images)
	dense := func(scope *model.Scope, x *Node, out int) *Node {
		in := x.Shape().Dim(-1)
		w := scope.WithInitializer(initializer.RandomUniformFn(scope, -1/math.Sqrt(float64(in)), 1/math.Sqrt(float64(in)))).
			VariableWithShape("weights", shapes.Make(x.DType(), in, out)).NodeValue(x.Graph())
		return DotProduct(x, w)
	}
	p := dense(scope.In("fc1"), h, h.Shape().Dim(-1))
	p = r.batchNorm(scope.In("proj_bn"), p)
	p = dense(scope.In("fc2"), Max(p, ZerosLike(p)), 128)
	p = Div(p, Sqrt(AddScalar(ReduceAndKeep(Square(p), ReduceSum, -1), 1e-6)))
	sim := DotGeneral(p, []int{1}, nil, p, []int{1}, nil)
	return ReduceAllMean(Square(sim))
}

// sgdStep returns the training step graph: loss, gradients of every trainable variable and a
// plain SGD update of them.
func (r *resnetBuilder) sgdStep(scope *model.Scope, images *Node) *Node {
	loss := r.trainLoss(scope, images)
	var vars []*model.Variable
	var values []*Node
	for v := range scope.IterVariables() {
		if v.Trainable {
			vars = append(vars, v)
			values = append(values, v.NodeValue(images.Graph()))
		}
	}
	grads := Gradient(loss, values...)
	for i, v := range vars {
		v.SetNodeValue(Sub(values[i], MulScalar(grads[i], 0.01)))
	}
	return loss
}

// randomImages returns a batch of images with values in [0, 1).
func randomImages(r *rand.Rand, batch, side int) *tensors.Tensor {
	data := make([]float32, batch*side*side*3)
	for i := range data {
		data[i] = r.Float32()
	}
	return tensors.FromFlatDataAndDimensions(data, batch, side, side, 3)
}

// peakRSS reads the process's peak resident memory in bytes (VmHWM), 0 where unavailable.
func peakRSS() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			f := strings.Fields(line)
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// resetPeakRSS restarts the VmHWM count (Linux: writing 5 to clear_refs).
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// TestResNetTrainStepRuns builds a narrow ResNet-18 (CIFAR stem) training step with both
// batch-norm formulations and checks they agree: the first loss, and the loss after one update
// (which depends on every gradient). Later steps drift apart chaotically at this tiny size.
func TestResNetTrainStepRuns(t *testing.T) {
	be := newTestBackend(t)
	spec := resnet18CIFAR
	spec.width = 4
	r := rand.New(rand.NewPCG(51, 52))
	images := randomImages(r, 4, 8)
	var losses [2][]float32
	for k, bn := range []bnKind{bnBasic, bnFused} {
		store := model.NewStore()
		store.RootScope().SetParam(initializer.ParamInitialSeed, int64(7))
		rb := &resnetBuilder{spec: spec, train: true, bn: bn}
		exec, err := model.NewExec(be, store, rb.sgdStep)
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			out, err := exec.Call(images)
			if err != nil {
				t.Fatal(err)
			}
			losses[k] = append(losses[k], tensors.MustCopyFlatData[float32](out[0])[0])
		}
		exec.Finalize()
	}
	for i := range losses[0] {
		if d := math.Abs(float64(losses[0][i] - losses[1][i])); d > 1e-4*math.Abs(float64(losses[0][i])) {
			t.Fatalf("step %d: loss %g with basic-op batch norm, %g with the fused one", i, losses[0][i], losses[1][i])
		}
	}
	if losses[1][0] == losses[1][1] {
		t.Fatal("the update changed nothing")
	}
}

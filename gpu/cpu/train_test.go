package cpu

import (
	"math/rand/v2"
	"testing"

	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // GoMLX graphs read best unqualified
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/gomlx/gomlx/ml/layers"
	"github.com/gomlx/gomlx/ml/layers/activation"
	"github.com/gomlx/gomlx/ml/layers/norm"
	"github.com/gomlx/gomlx/ml/model"
	"github.com/gomlx/gomlx/ml/train"
	"github.com/gomlx/gomlx/ml/train/loss"
	"github.com/gomlx/gomlx/ml/train/optimizer"
)

// TestTrainsSmallConvNet trains a small convnet with GoMLX's own layers, batch norm left at its
// defaults (the backend's fused batch norm), max pooling and a strided convolution, and checks
// the loss on a fixed batch falls: every operation a convnet's training step emits, variable
// initialisation and the optimizer's updates included, runs on this backend.
func TestTrainsSmallConvNet(t *testing.T) {
	be := newTestBackend(t)
	r := rand.New(rand.NewPCG(41, 42))
	const n, side, classes = 16, 8, 4
	images := make([]float32, n*side*side*3)
	labels := make([]int32, n)
	for i := range n {
		labels[i] = int32(i % classes)
		for j := range side * side * 3 {
			// A class-dependent pattern plus noise.
			images[i*side*side*3+j] = float32(int(labels[i])*(j%7)%3) + 0.3*r.Float32()
		}
	}
	store := model.NewStore()
	root := store.RootScope()
	// A fixed initialisation seed: GoMLX seeds from crypto/rand otherwise, and the test must
	// not depend on a lucky draw.
	root.SetParam(model.ParamInitialSeed, int64(1))
	root.SetParam(optimizer.ParamLearningRate, 0.05)
	convNet := func(scope *model.Scope, _ any, inputs []*Node) []*Node {
		x := inputs[0]
		x = layers.Convolution(scope.In("conv1"), x).Channels(8).KernelSize(3).PadSame().Done()
		x = activation.Relu(norm.BatchNorm(scope.In("bn1"), x, -1).Done())
		x = layers.Convolution(scope.In("conv2"), x).Channels(8).KernelSize(3).Strides(2).PadSame().Done()
		x = activation.Relu(norm.BatchNorm(scope.In("bn2"), x, -1).Done())
		x = MaxPool(x).Window(2).Done()
		x = Reshape(x, n, -1)
		return []*Node{layers.DenseWithBias(scope.In("head"), x, classes)}
	}
	trainer := train.NewTrainer(be, store, convNet, loss.SparseCategoricalCrossEntropyLogits,
		optimizer.StochasticGradientDescent().Done(), nil, nil)
	var first, last float32
	for step := range 30 {
		// The trainer takes the batch's tensors and finalizes them.
		m, err := trainer.TrainStep(train.Batch{
			Inputs: []*tensors.Tensor{tensors.FromFlatDataAndDimensions(images, n, side, side, 3)},
			Labels: []*tensors.Tensor{tensors.FromFlatDataAndDimensions(labels, n, 1)},
		})
		if err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		loss := tensors.MustCopyFlatData[float32](m[0])[0]
		if step == 0 {
			first = loss
		}
		last = loss
	}
	if !(last < 0.5*first) {
		t.Fatalf("loss went from %g to %g in 30 steps; want it at least halved", first, last)
	}
}

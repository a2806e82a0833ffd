package cpu

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/compute"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // GoMLX graphs read best unqualified
	"github.com/gomlx/gomlx/core/tensors"
)

// The reproducers of the GoMLX bug list in docs/engine.md. A bug that still stands in
// the GoMLX release in go.mod runs its smallest graph on GoMLX's pure-Go backend (expecting the
// failure, so an upstream fix shows up here) and on this backend (expecting the right answer,
// so our workaround stays covered). A bug fixed upstream (GoMLX v0.28 with compute v0.1.3 and
// later) runs its reproducer on both backends and expects the same answer: the upstream
// operation, correct from v0.28 on, checks this backend's own kernel.

// tryGraph runs fn on be and returns its outputs, or the error or panic it ended with.
func tryGraph(be compute.Backend, fn func(in []*Node) []*Node, inputs ...*tensors.Tensor) (out [][]float32, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	exec, err := NewExec(be, fn)
	if err != nil {
		return nil, err
	}
	defer exec.Finalize()
	args := make([]any, len(inputs))
	for i, in := range inputs {
		c, err := in.LocalClone()
		if err != nil {
			return nil, err
		}
		args[i] = c
	}
	outs, err := exec.Call(args...)
	if err != nil {
		return nil, err
	}
	for _, o := range outs {
		out = append(out, tensors.MustCopyFlatData[float32](o))
	}
	return out, nil
}

var errNoFailure = errors.New("GoMLX's pure-Go backend did not fail: the engine bug may be fixed upstream")

func expectGoBackendFails(t *testing.T, fn func(in []*Node) []*Node, inputs ...*tensors.Tensor) {
	t.Helper()
	if _, err := tryGraph(newGoBackend(t), fn, inputs...); err == nil {
		t.Error(errNoFailure)
	} else {
		t.Logf("pure-Go backend: %.200v", err)
	}
}

// expectSameAsGoBackend runs a reproducer of a bug fixed upstream on GoMLX's pure-Go backend
// and on this one, and expects every output to agree (float32 sums in another order: a few
// ulps of the largest value).
func expectSameAsGoBackend(t *testing.T, fn func(in []*Node) []*Node, inputs ...*tensors.Tensor) {
	t.Helper()
	want, err := tryGraph(newGoBackend(t), fn, inputs...)
	if err != nil {
		t.Fatalf("pure-Go backend (the bug was fixed in GoMLX v0.28): %v", err)
	}
	got, err := tryGraph(newTestBackend(t), fn, inputs...)
	if err != nil {
		t.Fatalf("%s: %v", BackendName, err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d outputs, the pure-Go backend gives %d", len(got), len(want))
	}
	for i := range got {
		assertClose(t, fmt.Sprintf("output #%d", i), got[i], want[i], 1e-5)
	}
}

// Bug 1 (fixed upstream): a convolution without explicit strides failed: the shape inference
// read the nil strides GoMLX passes as stride 0.
func TestEngineBugConvWithoutStrides(t *testing.T) {
	x := tensors.FromValue([][][][]float32{{{{1}, {2}}, {{3}, {4}}}}) // [1, 2, 2, 1]
	k := tensors.FromValue([][][][]float32{{{{1}}}})                  // [1, 1, 1, 1]
	fn := func(in []*Node) []*Node { return []*Node{Convolve(in[0], in[1]).Done()} }
	expectSameAsGoBackend(t, fn, x, k)
	got := runGraph(t, newTestBackend(t), fn, x, k)[0]
	assertClose(t, "1×1 convolution", got, []float32{1, 2, 3, 4}, 0)
}

// Bug 2 (fixed upstream): the gradient of any convolution failed: GoMLX builds it with Reverse,
// which the pure-Go backend lacked.
func TestEngineBugConvGradientNeedsReverse(t *testing.T) {
	r := rand.New(rand.NewPCG(71, 72))
	xt, _ := randTensor(r, 1, 4, 4, 1)
	kt, _ := randTensor(r, 3, 3, 1, 1)
	fn := func(in []*Node) []*Node {
		y := Convolve(in[0], in[1]).StridePerAxis(1, 1).PadSame().Done()
		return Gradient(ReduceAllSum(y), in[1])
	}
	expectSameAsGoBackend(t, fn, xt, kt)
}

// Bug 3 (fixed upstream): a grouped convolution (ChannelGroupCount 2) panicked in the pure-Go
// backend's executor.
func TestEngineBugGroupedConvPanics(t *testing.T) {
	r := rand.New(rand.NewPCG(73, 74))
	xt, _ := randTensor(r, 1, 3, 3, 2)
	kt, _ := randTensor(r, 1, 1, 1, 2)
	fn := func(in []*Node) []*Node {
		return []*Node{Convolve(in[0], in[1]).StridePerAxis(1, 1).ChannelGroupCount(2).Done()}
	}
	expectSameAsGoBackend(t, fn, xt, kt)
}

// Bug 4 (fixed upstream): the convolution with input dilation that GoMLX emits for the input
// gradient of a strided convolution panicked in the pure-Go backend (a nil kernel-dilation
// slice was indexed).
func TestEngineBugInputDilationPanics(t *testing.T) {
	r := rand.New(rand.NewPCG(75, 76))
	xt, _ := randTensor(r, 1, 3, 3, 1)
	kt, _ := randTensor(r, 1, 1, 1, 1)
	fn := func(in []*Node) []*Node {
		return []*Node{ConvGeneral(in[0], in[1], ConvolveAxesConfig{InputBatch: 0, InputChannels: 3, InputSpatial: []int{1, 2},
			KernelInputChannels: 2, KernelOutputChannels: 3, KernelSpatial: []int{0, 1},
			OutputBatch: 0, OutputChannels: 3, OutputSpatial: []int{1, 2}},
			[]int{1, 1}, nil, []int{2, 2}, nil, 1, 1)}
	}
	expectSameAsGoBackend(t, fn, xt, kt)
	got, err := tryGraph(newTestBackend(t), fn, xt, kt)
	if err != nil {
		t.Fatal(err)
	}
	if len(got[0]) != 25 {
		t.Fatalf("%d outputs, want 5×5 = 25", len(got[0]))
	}
}

// Bug 5 (still in GoMLX v0.28.8 with compute v0.1.6): batch norm with GoMLX's default
// UseBackendInference(true) needs the batch-norm operations, which the pure-Go backend lacks.
func TestEngineBugBatchNormOps(t *testing.T) {
	r := rand.New(rand.NewPCG(77, 78))
	xt, _ := randTensor(r, 4, 3)
	st, _ := randTensor(r, 3)
	fn := func(in []*Node) []*Node {
		y, _, _ := InternalBatchNormForTraining(in[0], in[1], in[1], 1e-3, -1)
		return []*Node{y}
	}
	expectGoBackendFails(t, fn, xt, st)
	if _, err := tryGraph(newTestBackend(t), fn, xt, st); err != nil {
		t.Fatal(err)
	}
}

// Bug 6 (fixed upstream): the gradients of Slice (built with Pad) and of max pooling
// (SelectAndScatter) failed: the pure-Go backend implemented neither.
func TestEngineBugSliceAndPoolGradients(t *testing.T) {
	r := rand.New(rand.NewPCG(79, 80))
	xt, _ := randTensor(r, 1, 4, 4, 1)
	for name, fn := range map[string]func(in []*Node) []*Node{
		"slice": func(in []*Node) []*Node {
			return Gradient(ReduceAllSum(Slice(in[0], AxisRange(), AxisRange(1, 3))), in[0])
		},
		"max pool": func(in []*Node) []*Node {
			return Gradient(ReduceAllSum(MaxPool(in[0]).Window(2).Done()), in[0])
		},
	} {
		t.Run(name, func(t *testing.T) {
			expectSameAsGoBackend(t, fn, xt)
		})
	}
}

// Bug 7 (GoMLX's graph package, every backend; still in v0.28.8): the gradient with respect to the input of a
// convolution with an even-sized kernel is wrong: convVJPWrtX pads the reversed convolution
// by (k-1)/2 before and k/2 after, the mirror of what the forward padding needs. Here a 2-tap
// 1-D convolution y_i = k0·x_{2i} + k1·x_{2i+1}: dL/dx_0 must be k0·dy_0, GoMLX gives k1·dy_0.
func TestEngineBugEvenKernelInputGradient(t *testing.T) {
	x := tensors.FromValue([][][]float32{{{1}, {2}, {3}, {4}}}) // [1, 4, 1]
	k := tensors.FromValue([][][]float32{{{10}}, {{1}}})        // [2, 1, 1]: k0 = 10, k1 = 1
	fn := func(in []*Node) []*Node {
		y := Convolve(in[0], in[1]).StridePerAxis(2).NoPadding().Done()
		return Gradient(ReduceAllSum(y), in[0])
	}
	got := runGraph(t, newTestBackend(t), fn, x, k)[0]
	want := []float32{10, 1, 10, 1}
	if got[0] == want[0] {
		t.Fatalf("dL/dx = %v is right: the GoMLX even-kernel bug may be fixed upstream (update the bug list in docs/engine.md)", got)
	}
	t.Logf("dL/dx = %v, want %v (GoMLX bug: use odd kernels)", got, want)
}

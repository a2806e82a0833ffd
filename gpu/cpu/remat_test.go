package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // GoMLX graphs read best unqualified
	"github.com/gomlx/gomlx/core/tensors"
)

// residualStep is a small ResNet training graph as the trainer builds it: convolutions, batch
// norm for training, ReLU as Max(x, ZerosLike(x)), a plain and a downsampling residual block,
// then the gradients of a loss with respect to the input, every kernel, scale and offset.
// Inputs: x [4, 8, 8, 6], kernels k1 [3,3,6,6], k2 [3,3,6,6], k3 [3,3,6,12], k4 [3,3,12,12],
// shortcut ks [1,1,6,12], scale and offset [6] and [12].
func residualStep(in []*Node) []*Node {
	x, k1, k2, k3, k4, ks := in[0], in[1], in[2], in[3], in[4], in[5]
	s6, o6, s12, o12 := in[6], in[7], in[8], in[9]
	relu := func(v *Node) *Node { return Max(v, ZerosLike(v)) }
	conv := func(v, k *Node, stride int) *Node {
		pad := k.Shape().Dim(0) / 2
		return Convolve(v, k).StridePerAxis(stride, stride).PaddingPerDim([][2]int{{pad, pad}, {pad, pad}}).Done()
	}
	bn := func(v, s, o *Node) *Node {
		y, _, _ := InternalBatchNormForTraining(v, s, o, 1e-5, -1)
		return y
	}
	y := relu(bn(conv(x, k1, 1), s6, o6))
	b := relu(bn(conv(y, k2, 1), s6, o6))
	y = relu(Add(bn(conv(b, k2, 1), s6, o6), y))
	short := bn(conv(y, ks, 2), s12, o12)
	b = relu(bn(conv(y, k3, 2), s12, o12))
	y = relu(Add(bn(conv(b, k4, 1), s12, o12), short))
	loss := ReduceAllSum(Mul(y, y))
	return append([]*Node{loss, y}, Gradient(loss, x, k1, k2, k3, k4, ks, s6, o6, s12, o12)...)
}

func residualInputs(r *rand.Rand) []*tensors.Tensor {
	var ts []*tensors.Tensor
	for _, dims := range [][]int{{4, 8, 8, 6}, {3, 3, 6, 6}, {3, 3, 6, 6}, {3, 3, 6, 12}, {3, 3, 12, 12}, {1, 1, 6, 12}, {6}, {6}, {12}, {12}} {
		t, _ := randTensor(r, dims...)
		ts = append(ts, t)
	}
	return ts
}

// TestRematerializationIsExact checks a training graph gives bit for bit the same loss,
// activations and gradients with and without rematerialisation (and without fusion).
func TestRematerializationIsExact(t *testing.T) {
	remat := newTestBackend(t)
	plain, err := New(Config{Threads: 2, NoRemat: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(plain.Finalize)
	unfused, err := New(Config{Threads: 2, NoRemat: true, NoFusion: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(unfused.Finalize)
	inputs := residualInputs(rand.New(rand.NewPCG(95, 96)))
	got := runGraph(t, remat, residualStep, inputs...)
	for name, be := range map[string]*Backend{"without rematerialisation": plain, "without fusion": unfused} {
		want := runGraph(t, be, residualStep, inputs...)
		for i := range want {
			for j := range want[i] {
				if math.Float32bits(got[i][j]) != math.Float32bits(want[i][j]) {
					t.Fatalf("output #%d element %d = %g, %s %g", i, j, got[i][j], name, want[i][j])
				}
			}
		}
	}
}

// TestRematerializationLowersPeak checks the planned peak of held values falls: the ReLU's
// zeros are never kept, and the ReLU gradient (and the kernel gradients) recompute batch norm's
// output, the residual sums (and the ReLUs' outputs) from the convolutions' outputs instead of
// keeping them.
func TestRematerializationLowersPeak(t *testing.T) {
	peaks := make(map[bool]int64)
	for _, noRemat := range []bool{false, true} {
		be, err := New(Config{Threads: 2, NoRemat: noRemat})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(be.Finalize)
		be.onCompile = func(e *Executable) {
			peak, _, _ := e.livePeak()
			peaks[noRemat] = max(peaks[noRemat], peak)
		}
		runGraph(t, be, residualStep, residualInputs(rand.New(rand.NewPCG(95, 96)))...)
	}
	t.Logf("planned peaks: %d bytes with rematerialisation, %d without", peaks[false], peaks[true])
	// Without: per ReLU, its input, zeros and output; with: the convolution's output only. The
	// first layers' activations are 4·8·8·6 floats (6 KiB); the peak must fall by at least 8.
	if drop := peaks[true] - peaks[false]; drop < 8*4*8*8*6*4 {
		t.Fatalf("planned peak %d bytes with rematerialisation, %d without: want a drop of at least %d", peaks[false], peaks[true], 8*4*8*8*6*4)
	}
}

// TestBatchNormGradientInPlace checks the batch-norm gradient gives the same bits whether it
// writes into the output gradient's buffer, the operand's, or a new one (channels last and
// first).
func TestBatchNormGradientInPlace(t *testing.T) {
	be := newTestBackend(t)
	r := rand.New(rand.NewPCG(101, 102))
	for _, c := range []struct {
		dims []int
		axis int
	}{{[]int{4, 5, 3, 6}, 3}, {[]int{4, 6, 3, 5}, 1}} {
		xt, _ := randTensor(r, c.dims...)
		dyt, _ := randTensor(r, c.dims...)
		ch := c.dims[c.axis]
		st, _ := randTensor(r, ch)
		mt, _ := randTensor(r, ch)
		vt, _ := randTensor(r, ch)
		// x and dy are computed, so the gradient may consume them; returning them too keeps
		// them from being consumed.
		grad := func(keepX, keepDy bool) func(in []*Node) []*Node {
			return func(in []*Node) []*Node {
				x, dy := MulScalar(in[0], 1.5), MulScalar(in[1], 0.5)
				dx, ds, do := InternalBatchNormGradient(x, in[2], in[3], AddScalar(Abs(in[4]), 0.5), dy, 1e-3, c.axis)
				out := []*Node{dx, ds, do}
				if keepX {
					out = append(out, x)
				}
				if keepDy {
					out = append(out, dy)
				}
				return out
			}
		}
		want := runGraph(t, be, grad(true, true), xt, dyt, st, mt, vt)
		for _, keep := range [][2]bool{{false, false}, {true, false}, {false, true}} {
			got := runGraph(t, be, grad(keep[0], keep[1]), xt, dyt, st, mt, vt)
			bitsEqual(t, "batch-norm gradient in place", got[:3], want[:3])
		}
	}
}

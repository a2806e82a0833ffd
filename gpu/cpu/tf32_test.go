package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // GoMLX graphs read best unqualified
	"github.com/gomlx/gomlx/core/tensors"
)

func TestRoundTF32(t *testing.T) {
	ulp := float32(1.0 / 1024) // TF32's spacing just above 1
	for _, tc := range []struct {
		give, want float32
	}{
		{1, 1},
		{1 + ulp, 1 + ulp},
		{1 + ulp/4, 1},                          // below half an ulp: down
		{1 + 3*ulp/4, 1 + ulp},                  // above half: up
		{1 + ulp/2, 1},                          // a tie: to the even mantissa (…0)
		{1 + 3*ulp/2, 1 + 2*ulp},                // a tie: to the even mantissa (…10)
		{-(1 + 3*ulp/4), -(1 + ulp)},            // sign kept
		{math.MaxFloat32, float32(math.Inf(1))}, // past the largest TF32 value
		{float32(math.Inf(-1)), float32(math.Inf(-1))},
		{0, 0},
	} {
		if got := RoundTF32(tc.give); got != tc.want {
			t.Errorf("RoundTF32(%.10g) = %.10g, want %.10g", tc.give, got, tc.want)
		}
	}
	if got := RoundTF32(float32(math.NaN())); !math.IsNaN(float64(got)) {
		t.Errorf("RoundTF32(NaN) = %v", got)
	}
	// Every rounded value has its 13 low mantissa bits clear and lies within half a TF32 ulp.
	r := rand.New(rand.NewPCG(1, 2))
	for range 10000 {
		x := float32(r.NormFloat64() * math.Exp2(float64(r.IntN(40)-20)))
		y := RoundTF32(x)
		if math.Float32bits(y)&0x1fff != 0 {
			t.Fatalf("RoundTF32(%g) = %g keeps low mantissa bits", x, y)
		}
		if rel := math.Abs(float64(y-x)) / math.Abs(float64(x)); rel > math.Exp2(-11) {
			t.Fatalf("RoundTF32(%g) = %g: relative error %g > 2⁻¹¹", x, y, rel)
		}
	}
}

// TestEmulateTF32 runs a matrix product and a convolution (with its gradients, which are
// products and convolutions too) on a backend that emulates TF32 and compares them with the
// same operations on TF32-rounded inputs in full float32: equal, apart from accumulation
// order. The plain backend differs from both by TF32's rounding, far more.
func TestEmulateTF32(t *testing.T) {
	tf32, err := New(Config{Threads: 1, EmulateTF32: true})
	if err != nil {
		t.Fatal(err)
	}
	defer tf32.Finalize()
	plain := newTestBackend(t)
	r := rand.New(rand.NewPCG(3, 4))
	xt, x := randTensor(r, 4, 6, 6, 8)
	wt, w := randTensor(r, 3, 3, 8, 5)
	mt, m := randTensor(r, 24, 40)
	nt, n := randTensor(r, 40, 16)
	fn := func(in []*Node) []*Node {
		y := Convolve(in[0], in[1]).ChannelsAxis(3).PadSame().Done()
		loss := ReduceAllSum(Mul(y, y))
		g := Gradient(loss, in[1])
		return []*Node{y, g[0], DotProduct(in[2], in[3])}
	}
	rounded := func(v []float32, dims ...int) *tensors.Tensor {
		out := make([]float32, len(v))
		for i := range v {
			out[i] = RoundTF32(v[i])
		}
		return tensors.FromFlatDataAndDimensions(out, dims...)
	}
	got := runGraph(t, tf32, fn, xt, wt, mt, nt)
	want := runGraph(t, plain, fn, rounded(x, 4, 6, 6, 8), rounded(w, 3, 3, 8, 5), rounded(m, 24, 40), rounded(n, 40, 16))
	exact := runGraph(t, plain, fn, xt, wt, mt, nt)
	// The forward convolution and the product read the inputs only, so the emulation equals
	// the plain backend on rounded inputs. (The kernel gradient's second operand, 2y, is
	// rounded again inside the emulation: it is only compared with the exact result below.)
	assertClose(t, "conv (emulated vs rounded inputs)", got[0], want[0], 1e-5)
	assertClose(t, "matmul (emulated vs rounded inputs)", got[2], want[2], 1e-5)
	// Norm-wise, TF32's rounding of two operands moves a result by about 2⁻¹¹ ≈ 5e-4.
	for i, name := range []string{"conv", "kernel gradient", "matmul"} {
		var diff, norm float64
		for j := range got[i] {
			d := float64(got[i][j] - exact[i][j])
			diff, norm = diff+d*d, norm+float64(exact[i][j])*float64(exact[i][j])
		}
		if rel := math.Sqrt(diff / norm); rel < 1e-4 || rel > 3e-3 {
			t.Errorf("%s: emulated TF32 differs from float32 by %.2g (norm-wise), want TF32's size, 1e-4 to 3e-3", name, rel)
		}
	}
}

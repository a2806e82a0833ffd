package cpu

import (
	"math/rand/v2"
	"strings"
	"testing"

	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // GoMLX graphs read best unqualified
	"github.com/gomlx/gomlx/core/tensors"
)

// TestFusionMatchesUnfused runs graphs with element-wise chains (batch norm and the ReLU
// gradient in basic operations, scalar, trailing- and leading-vector broadcasts, values used
// both inside and outside a chain, chains feeding other operations) with and without fusion.
func TestFusionMatchesUnfused(t *testing.T) {
	fused := newTestBackend(t)
	plain, err := New(Config{Threads: 2, NoFusion: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(plain.Finalize)
	r := rand.New(rand.NewPCG(81, 82))
	xt, _ := randTensor(r, 8, 5, 7, 16) // 4,480 values: several chunks, a partial last one
	st, _ := randTensor(r, 16)
	pt, _ := randTensor(r, 8, 1, 1, 1)
	cases := map[string]func(in []*Node) []*Node{
		"batch norm and ReLU, forward and gradient": func(in []*Node) []*Node {
			x, scale := in[0], in[1]
			mean := ReduceAndKeep(x, ReduceMean, 0, 1, 2)
			v := ReduceAndKeep(Square(Sub(x, mean)), ReduceMean, 0, 1, 2)
			y := Mul(Div(Sub(x, mean), Sqrt(AddScalar(v, 1e-3))), ExpandLeftToRank(scale, 4))
			y = Max(y, ZerosLike(y))
			g := Gradient(ReduceAllSum(Mul(y, x)), x, scale)
			return []*Node{y, g[0], g[1]}
		},
		"leading vector and scalar": func(in []*Node) []*Node {
			a := Mul(in[0], BroadcastToDims(in[2], 8, 5, 7, 16))
			b := Sub(OnePlus(Exp(Neg(Abs(a)))), a)
			return []*Node{Sign(b), Div(Log(AddScalar(Abs(b), 0.5)), Sqrt(AddScalar(Abs(a), 1)))}
		},
		"value used inside and after a chain": func(in []*Node) []*Node {
			a := Add(in[0], in[0])
			b := Mul(a, a)
			c := ReduceSum(b, 3) // outside the chain
			d := Sub(b, a)
			return []*Node{c, Min(d, a)}
		},
	}
	for name, fn := range cases {
		got := runGraph(t, fused, fn, xt, st, pt)
		want := runGraph(t, plain, fn, xt, st, pt)
		for i := range want {
			assertClose(t, name, got[i], want[i], 1e-6)
		}
	}
}

// TestFusionHappens checks batch norm in basic operations compiles into fused chains.
func TestFusionHappens(t *testing.T) {
	be, err := New(Config{Threads: 2, ProfileOps: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(be.Finalize)
	r := rand.New(rand.NewPCG(83, 84))
	xt, _ := randTensor(r, 4, 3, 3, 8)
	runGraph(t, be, func(in []*Node) []*Node {
		x := in[0]
		mean := ReduceAndKeep(x, ReduceMean, 0, 1, 2)
		y := Div(Sub(x, mean), Sqrt(AddScalar(ReduceAndKeep(Square(Sub(x, mean)), ReduceMean, 0, 1, 2), 1e-3)))
		return []*Node{Max(y, ZerosLike(y))}
	}, xt)
	var fusedOps int
	for _, s := range be.OpStats() {
		if strings.HasPrefix(s.Name, "Fused") {
			fusedOps += s.Calls
		}
	}
	if fusedOps == 0 {
		t.Fatalf("no fused chain ran; operations: %v", be.OpStats())
	}
}

// TestFusionInferenceBatchNormAndInPlace runs inference batch norm followed by ReLU and a
// residual addition (channels last and first) with and without fusion: the batch norm joins
// the chain, and outputs reuse consumed inputs.
func TestFusionInferenceBatchNormAndInPlace(t *testing.T) {
	fused := newTestBackend(t)
	plain, err := New(Config{Threads: 2, NoFusion: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(plain.Finalize)
	r := rand.New(rand.NewPCG(87, 88))
	xt, _ := randTensor(r, 4, 9, 7, 6)
	rt, _ := randTensor(r, 4, 9, 7, 6)
	var params []*tensors.Tensor
	for range 4 {
		p, _ := randTensor(r, 6)
		params = append(params, p)
	}
	vt, _ := randTensor(r, 6)
	for _, axis := range []int{3, 1} {
		fn := func(in []*Node) []*Node {
			x := in[0]
			if axis == 1 {
				x = TransposeAllAxes(x, 0, 3, 1, 2)
			}
			variance := AddScalar(Abs(in[5]), 0.5)
			y := InternalBatchNormForInference(x, in[2], in[3], in[4], variance, 1e-3, axis)
			y = Max(y, ZerosLike(y))
			res := in[1]
			if axis == 1 {
				res = TransposeAllAxes(res, 0, 3, 1, 2)
			}
			s := Add(y, res)
			return []*Node{Max(s, ZerosLike(s)), y}
		}
		inputs := append([]*tensors.Tensor{xt, rt}, params[0], params[1], params[2], vt)
		got := runGraph(t, fused, fn, inputs...)
		want := runGraph(t, plain, fn, inputs...)
		for i := range want {
			assertClose(t, "batch norm, ReLU, residual", got[i], want[i], 1e-6)
		}
	}
}

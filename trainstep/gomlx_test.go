package trainstep

// Checks of GoMLX behaviour this package relies on, or works around: each says which.

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/gobackend"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
)

// TestDotGradientIsMatrixProducts: the gradient of a matrix product equals dC·Bᵀ and Aᵀ·dC
// computed with loops, and its graph holds no [i, j, k] temporary. GoMLX v0.26 built the
// gradient as a broadcast product over [i, j, k] (docs/engine.md, bug 9), and this package
// registered its own; v0.28 builds it as two matrix products itself, and this test guards
// that the models, the projector and the loss (all Dot(...).Product()) keep getting them, on
// the project's CPU backend and on GoMLX's pure-Go one.
func TestDotGradientIsMatrixProducts(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backend func(testing.TB) compute.Backend
	}{
		{"cpu", newTestBackend},
		{"go", newGoBackend},
	} {
		t.Run(tc.name, func(t *testing.T) { checkDotGradient(t, tc.backend(t)) })
	}
}

// newGoBackend returns GoMLX's own pure-Go backend, released when the test ends: what upstream
// computes without the project's CPU backend in between.
func newGoBackend(t testing.TB) compute.Backend {
	t.Helper()
	b, err := gobackend.New("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Finalize)
	return b
}

func checkDotGradient(t *testing.T, backend compute.Backend) {
	const i, j, k = 5, 3, 4
	r := rand.New(rand.NewPCG(1, 2))
	rnd := func(n int) []float64 {
		out := make([]float64, n)
		for x := range out {
			out[x] = r.NormFloat64()
		}
		return out
	}
	a, b, w := rnd(i*j), rnd(j*k), rnd(i*k)
	g := NewGraph(backend, "dot-gradient")
	defer g.Finalize()
	an := Parameter(g, "a", shapes.Make(dtypes.Float64, i, j))
	bn := Parameter(g, "b", shapes.Make(dtypes.Float64, j, k))
	wn := Const(g, tensors.FromFlatDataAndDimensions(w, i, k))
	loss := ReduceAllSum(Mul(Dot(an, bn).Product(), wn))
	grads := Gradient(loss, an, bn)
	for _, n := range g.Nodes() {
		if n.Rank() == 3 {
			t.Errorf("gradient graph holds a rank-3 node %s: the broadcast product is back", n)
		}
	}
	if err := g.Compile(grads...); err != nil {
		t.Fatal(err)
	}
	out := g.Run(tensors.FromFlatDataAndDimensions(a, i, j), tensors.FromFlatDataAndDimensions(b, j, k))
	gotA, gotB := tensors.MustCopyFlatData[float64](out[0]), tensors.MustCopyFlatData[float64](out[1])
	for x := 0; x < i; x++ {
		for y := 0; y < j; y++ {
			var want float64
			for z := 0; z < k; z++ {
				want += w[x*k+z] * b[y*k+z]
			}
			if math.Abs(gotA[x*j+y]-want) > 1e-12 {
				t.Errorf("dA[%d][%d] = %v, want %v", x, y, gotA[x*j+y], want)
			}
		}
	}
	for y := 0; y < j; y++ {
		for z := 0; z < k; z++ {
			var want float64
			for x := 0; x < i; x++ {
				want += a[x*j+y] * w[x*k+z]
			}
			if math.Abs(gotB[y*k+z]-want) > 1e-12 {
				t.Errorf("dB[%d][%d] = %v, want %v", y, z, gotB[y*k+z], want)
			}
		}
	}
}

// TestRsqrtHasNoGradient: GoMLX v0.28 still defines no gradient for Rsqrt, so l2Normalize
// divides by Sqrt. When this test fails, Rsqrt got one and l2Normalize may use it.
func TestRsqrtHasNoGradient(t *testing.T) {
	backend := newTestBackend(t)
	_, err := CallOnce(backend, func(x *Node) *Node {
		return Gradient(ReduceAllSum(Rsqrt(x)), x)[0]
	}, []float32{1, 4})
	if err == nil || !strings.Contains(err.Error(), "no gradient") {
		t.Fatalf("gradient of Rsqrt: error %v, want GoMLX's \"no gradient is defined\"", err)
	}
}

package trainstep

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
)

// TestDotGradientIsMatrixProducts: the gradient of Dot (matrix × matrix) equals dC·Bᵀ and
// Aᵀ·dC computed with loops, and its graph holds no [i, j, k] temporary, which GoMLX's own
// gradient builds.
func TestDotGradientIsMatrixProducts(t *testing.T) {
	backend := newTestBackend(t)
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
	loss := ReduceAllSum(Mul(Dot(an, bn), wn))
	grads := Gradient(loss, an, bn)
	for _, n := range g.Nodes() {
		if n.Rank() == 3 {
			t.Errorf("gradient graph holds a rank-3 node %s: the broadcast product is back", n)
		}
	}
	g.Compile(grads...)
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

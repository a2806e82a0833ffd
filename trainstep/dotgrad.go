package trainstep

import (
	"github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// GoMLX v0.26 differentiates a matrix product C = A·B ([i,j]·[j,k]) by broadcasting the
// output gradient to [i, j, k], multiplying and reducing: i·j·k temporary values where two
// matrix products suffice. For the projector of ResNet-50 at batch 256 (A [512, 2048],
// B [2048, 2048]) that is 2·10⁹ floats, 8 GiB; for the loss's 1024×1024 similarity matrix at
// d = 128 it made the loss's backward pass 100× slower than its forward one
// (BenchmarkLossDCL; TestDotGradientIsMatrixProducts).
//
// This package registers, once, a gradient for GoMLX's Dot op (matrix × matrix) written as
// the two matrix products dA = dC·Bᵀ and dB = Aᵀ·dC, which every backend runs as GEMMs. It is
// the same function, so it changes no result beyond float rounding, and it applies to every
// GoMLX graph in the process (GoMLX's VJPRegistration is its documented place for this). The
// models and the loss use Dot, not Einsum or DotGeneral, whose gradient has the same problem
// and whose axes this package cannot read to replace it.
func init() {
	original := graph.VJPRegistration[graph.NodeTypeDot]
	graph.VJPRegistration[graph.NodeTypeDot] = func(node *graph.Node, vjps []*graph.Node, outputShape shapes.Shape) []*graph.Node {
		in := node.Inputs()
		a, b := in[0], in[1]
		if a.Rank() != 2 || b.Rank() != 2 {
			return original(node, vjps, outputShape)
		}
		v := vjps[0]
		return []*graph.Node{
			graph.DotGeneral(v, []int{1}, nil, b, []int{1}, nil), // dA[i,j] = Σ_k dC[i,k]·B[j,k]
			graph.DotGeneral(a, []int{0}, nil, v, []int{0}, nil), // dB[j,k] = Σ_i A[i,j]·dC[i,k]
		}
	}
}

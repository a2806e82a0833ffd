package kernels_test

import (
	"fmt"

	"github.com/dcl-beam/dcl-beam/gpu/kernels"
)

// Cosine similarities of 2 queries against 3 stored embeddings (rows, already L2-normalised):
// S = Q·Tᵀ, as the kNN evaluation computes them.
func ExampleSgemm() {
	q := []float32{ // 2×2
		1, 0,
		0, 1,
	}
	emb := []float32{ // 3×2
		1, 0,
		0.6, 0.8,
		0, -1,
	}
	s := make([]float32, 2*3)
	kernels.Sgemm(false, true, 2, 3, 2, 1, q, 2, emb, 2, 0, s, 3)
	fmt.Println(s)
	// Output: [1 0.6 0 0 0.8 -1]
}

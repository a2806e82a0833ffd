package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// refGemm is the direct triple loop, in float64, of C = alpha·op(A)·op(B) + beta·C.
func refGemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) []float32 {
	out := append([]float32(nil), c...)
	for i := range m {
		for j := range n {
			var s float64
			for p := range k {
				var av, bv float32
				if transA {
					av = a[p*lda+i]
				} else {
					av = a[i*lda+p]
				}
				if transB {
					bv = b[j*ldb+p]
				} else {
					bv = b[p*ldb+j]
				}
				s += float64(av) * float64(bv)
			}
			old := float64(c[i*ldc+j])
			if beta == 0 {
				old = 0
			}
			out[i*ldc+j] = float32(float64(alpha)*s + float64(beta)*old)
		}
	}
	return out
}

func randSlice(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = r.Float32()*2 - 1
	}
	return s
}

// closeEnough compares with a tolerance scaled by the depth of the sums.
func closeEnough(t *testing.T, name string, got, want []float32, k int) {
	t.Helper()
	tol := 1e-5 * float64(k+1)
	for i := range want {
		if d := math.Abs(float64(got[i] - want[i])); d > tol*(1+math.Abs(float64(want[i]))) || math.IsNaN(float64(got[i])) {
			t.Fatalf("%s: element %d = %g, want %g (tolerance %g)", name, i, got[i], want[i], tol)
		}
	}
}

func TestSgemmMatchesReference(t *testing.T) {
	type shape struct{ m, n, k int }
	shapes := []shape{
		{1, 1, 1}, {1, 17, 3}, {7, 1, 5}, {6, 16, 1}, {12, 32, 2}, {13, 33, 7},
		{5, 9, 300}, {150, 70, 260}, {37, 200, 513}, {2, 3, 0}, {300, 5, 40},
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, mk := range availableKernels() {
		for _, threads := range []int{1, 2, 3} {
			pool := newPoolWithKernel(threads, mk)
			for _, s := range shapes {
				for _, tr := range [][2]bool{{false, false}, {true, false}, {false, true}, {true, true}} {
					for _, ab := range [][2]float32{{1, 0}, {0.5, 1}, {-2, 0.25}} {
						name := fmt.Sprintf("%s/t%d/%dx%dx%d/trans%v/alpha%g,beta%g", mk.name, threads, s.m, s.n, s.k, tr, ab[0], ab[1])
						transA, transB := tr[0], tr[1]
						// Leading dimensions a little larger than needed, to catch stride mistakes.
						lda := s.k + 3
						if transA {
							lda = s.m + 2
						}
						ldb := s.n + 1
						if transB {
							ldb = s.k + 5
						}
						ldc := s.n + 4
						rowsA := s.m
						if transA {
							rowsA = s.k
						}
						rowsB := s.k
						if transB {
							rowsB = s.n
						}
						a := randSlice(r, max(rowsA*lda, 1))
						b := randSlice(r, max(rowsB*ldb, 1))
						c := randSlice(r, s.m*ldc)
						want := refGemm(transA, transB, s.m, s.n, s.k, ab[0], a, lda, b, ldb, ab[1], c, ldc)
						pool.Sgemm(transA, transB, s.m, s.n, s.k, ab[0], a, lda, b, ldb, ab[1], c, ldc)
						closeEnough(t, name, c, want, s.k)
					}
				}
			}
			pool.Close()
		}
	}
}

// TestSgemmParallelSplits makes each of the three splits (rows, columns, depth) run and checks
// it against the reference.
func TestSgemmParallelSplits(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	cases := []struct {
		name    string
		m, n, k int
	}{
		{"rows", 400, 40, 64},
		{"columns", 20, 900, 64},
		{"depth", 40, 40, 3000},
		{"deep", 40, 70, deepParts*blockK + 37},
	}
	pool := NewPool(2)
	defer pool.Close()
	for _, c := range cases {
		a := randSlice(r, c.m*c.k)
		b := randSlice(r, c.k*c.n)
		out := randSlice(r, c.m*c.n)
		want := refGemm(false, false, c.m, c.n, c.k, 1, a, c.k, b, c.n, 1, out, c.n)
		pool.Sgemm(false, false, c.m, c.n, c.k, 1, a, c.k, b, c.n, 1, out, c.n)
		closeEnough(t, c.name, out, want, c.k)
	}
}

// TestSgemmDeepIsTheSameOnAnyThreads checks a deep product (a kernel gradient's shape: C
// small, the depth every pixel of a batch) gives the same bits on one, two and three threads,
// beta 0 and 1.
func TestSgemmDeepIsTheSameOnAnyThreads(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	m, n, k := 64, 96, deepParts*blockK+300
	if !isDeep(m, n, k) {
		t.Fatalf("%d×%d×%d is not deep", m, n, k)
	}
	a := randSlice(r, m*k)
	b := randSlice(r, k*n)
	c0 := randSlice(r, m*n)
	for _, beta := range []float32{0, 1} {
		var first []float32
		for _, threads := range []int{1, 2, 3} {
			pool := NewPool(threads)
			c := slices.Clone(c0)
			pool.Sgemm(true, false, m, n, k, 1, a, m, b, n, beta, c, n)
			pool.Close()
			if first == nil {
				want := refGemm(true, false, m, n, k, 1, a, m, b, n, beta, slices.Clone(c0), n)
				closeEnough(t, "deep", c, want, k)
				first = c
				continue
			}
			for i := range c {
				if math.Float32bits(c[i]) != math.Float32bits(first[i]) {
					t.Fatalf("beta %g: %d threads: C[%d] = %g, one thread gives %g", beta, threads, i, c[i], first[i])
				}
			}
		}
	}
}

func TestSgemmBetaZeroClearsNaN(t *testing.T) {
	c := []float32{float32(math.NaN()), 7}
	Sgemm(false, false, 1, 2, 1, 1, []float32{2}, 1, []float32{3, 4}, 2, 0, c, 2)
	if c[0] != 6 || c[1] != 8 {
		t.Fatalf("got %v, want [6 8]", c)
	}
}

func TestSgemmPanicsOnShortSlices(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic for a too short A")
		}
	}()
	Sgemm(false, false, 4, 4, 4, 1, make([]float32, 15), 4, make([]float32, 16), 4, 0, make([]float32, 16), 4)
}

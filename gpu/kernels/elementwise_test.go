package kernels

import (
	"math"
	"math/rand/v2"
	"testing"
)

// sameFloat32 compares bit patterns, except that any NaN equals any NaN and ±0 are equal.
func sameFloat32(a, b float32) bool {
	if a != a || b != b {
		return a != a && b != b
	}
	return a == b
}

func specialSlice(r *rand.Rand, n int) []float32 {
	s := randSlice(r, n)
	specials := []float32{0, float32(math.Copysign(0, -1)), float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1)), 1e-40}
	for i := range s {
		if r.IntN(5) == 0 {
			s[i] = specials[r.IntN(len(specials))]
		}
	}
	return s
}

// TestElementwiseMatchesGoLoops checks the vector loops against the plain Go loops for every
// operation, lengths around multiples of 8, and special values.
func TestElementwiseMatchesGoLoops(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for _, n := range []int{0, 1, 7, 8, 9, 16, 31, 100} {
		x, y := specialSlice(r, n), specialSlice(r, n)
		s := specialSlice(r, 1)[0]
		for op := OpAdd; op <= OpMin; op++ {
			got, want := make([]float32, n), make([]float32, n)
			Binary(op, got, x, y)
			binaryGo(op, want, x, y)
			for i := range want {
				if !sameFloat32(got[i], want[i]) {
					t.Fatalf("Binary op %d n %d: [%d] %g op %g = %g, want %g", op, n, i, x[i], y[i], got[i], want[i])
				}
			}
			for _, first := range []bool{false, true} {
				BinaryScalar(op, got, x, s, first)
				binaryScalarGo(op, want, x, s, first)
				for i := range want {
					if !sameFloat32(got[i], want[i]) {
						t.Fatalf("BinaryScalar op %d first %v n %d: [%d] x %g s %g = %g, want %g", op, first, n, i, x[i], s, got[i], want[i])
					}
				}
			}
		}
		got := make([]float32, n)
		Sign(got, x)
		for i, v := range x {
			if math.Float32bits(got[i]) != math.Float32bits(sign32(v)) && !(v != v && got[i] != got[i]) {
				t.Fatalf("Sign(%g) = %g, want %g", v, got[i], sign32(v))
			}
		}
		m, c := specialSlice(r, n), specialSlice(r, n)
		Affine(got, x, m, c)
		for i := range x {
			if want := x[i]*m[i] + c[i]; !sameFloat32(got[i], want) {
				t.Fatalf("Affine [%d] = %g, want %g", i, got[i], want)
			}
		}
	}
}

func TestSign32EdgeCases(t *testing.T) {
	inf := float32(math.Inf(1))
	for _, v := range []float32{0, float32(math.Copysign(0, -1)), 1.5, -2, inf, -inf, 1e-45, -1e-45, float32(math.NaN())} {
		got := sign32(v)
		want := v // ±0 and NaN
		switch {
		case v > 0:
			want = 1
		case v < 0:
			want = -1
		}
		if math.Float32bits(got) != math.Float32bits(want) {
			t.Errorf("sign32(%g) = %g, want %g", v, got, want)
		}
	}
}

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
	saved := hasVectorLoops
	defer func() { hasVectorLoops = saved }()
	for _, vector := range []bool{false, saved} {
		hasVectorLoops = vector // DCL_KERNEL=go, and builds without assembly, take the Go loops
		elementwiseMatchesGoLoops(t)
	}
}

func elementwiseMatchesGoLoops(t *testing.T) {
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

// TestChannelSumsMatchRowByRow checks ChannelSums and ChannelSumsCentred give the bits of the
// row-by-row Binary calls they replace (add, multiply, add; subtract, multiply, add), on the
// vector loops and in Go, for channel counts with and without a tail of fewer than eight.
func TestChannelSumsMatchRowByRow(t *testing.T) {
	r := rand.New(rand.NewPCG(31, 32))
	saved := hasVectorLoops
	defer func() { hasVectorLoops = saved }()
	for _, vector := range []bool{false, saved} {
		hasVectorLoops = vector
		for _, channels := range []int{1, 3, 8, 13, 64, 515} {
			for _, rows := range []int{0, 1, 7, 64} {
				x, y := specialSlice(r, rows*channels), randSlice(r, rows*channels)
				center := randSlice(r, channels)
				start1, start2 := randSlice(r, channels), randSlice(r, channels)
				want1, want2, tmp := append([]float32(nil), start1...), append([]float32(nil), start2...), make([]float32, channels)
				wantC1, wantC2 := append([]float32(nil), start1...), append([]float32(nil), start2...)
				for i := range rows {
					xs, ys := x[i*channels:(i+1)*channels], y[i*channels:(i+1)*channels]
					Binary(OpAdd, want1, want1, xs)
					Binary(OpMul, tmp, xs, xs)
					Binary(OpAdd, want2, want2, tmp)
					Binary(OpAdd, wantC1, wantC1, ys)
					Binary(OpSub, tmp, xs, center)
					Binary(OpMul, tmp, tmp, ys)
					Binary(OpAdd, wantC2, wantC2, tmp)
				}
				got1, got2 := append([]float32(nil), start1...), append([]float32(nil), start2...)
				ChannelSums(got1, got2, x, channels)
				gotC1, gotC2 := append([]float32(nil), start1...), append([]float32(nil), start2...)
				ChannelSumsCentred(gotC1, gotC2, x, y, center, channels)
				for c := range channels {
					for _, p := range [][3]any{{"sum", got1[c], want1[c]}, {"sum of squares", got2[c], want2[c]},
						{"centred sum", gotC1[c], wantC1[c]}, {"centred product", gotC2[c], wantC2[c]}} {
						if g, w := p[1].(float32), p[2].(float32); !sameFloat32(g, w) {
							t.Fatalf("vector %v, %d channels, %d rows: %s of channel %d = %g, row by row %g", vector, channels, rows, p[0], c, g, w)
						}
					}
				}
			}
		}
	}
}

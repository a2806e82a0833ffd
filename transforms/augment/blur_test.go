package augment

import (
	"bytes"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/dcl-beam/dcl-beam/transforms"
)

func TestMirror(t *testing.T) {
	tests := []struct{ give, n, want int }{
		{-1, 5, 1}, {-2, 5, 2}, {5, 5, 3}, {6, 5, 2}, {0, 5, 0}, {4, 5, 4},
		{-7, 3, 1}, {9, 3, 1}, {-3, 2, 1}, {100, 1, 0}, {-100, 1, 0},
	}
	for _, tt := range tests {
		if got := mirror(tt.give, tt.n); got != tt.want {
			t.Errorf("mirror(%d, %d) = %d, want %d", tt.give, tt.n, got, tt.want)
		}
	}
}

func TestBlurKernel(t *testing.T) {
	a := &Augmenter{}
	for _, tt := range []struct {
		size  int
		sigma float64
	}{{23, 0.1}, {23, 1}, {23, 2}, {3, 0.5}, {9, 1.7}, {1, 1}} {
		q := slices.Clone(a.blurKernel(tt.size, tt.sigma))
		sum := q[0]
		for _, v := range q[1:] {
			sum += 2 * v
		}
		if sum != 1<<blurBits {
			t.Errorf("k %d σ %g: weights sum to %d, want %d", tt.size, tt.sigma, sum, 1<<blurBits)
		}
		// Against the float Gaussian, normalised over the full kernel.
		r := tt.size / 2
		var norm float64
		for x := -r; x <= r; x++ {
			norm += math.Exp(-0.5 * float64(x*x) / (tt.sigma * tt.sigma))
		}
		for x := 0; x <= r; x++ {
			w := math.Exp(-0.5*float64(x*x)/(tt.sigma*tt.sigma)) / norm
			var got float64
			if x < len(q) {
				got = float64(q[x]) / (1 << blurBits)
			}
			tol := 0.5 / (1 << blurBits)
			if x == 0 {
				tol = float64(tt.size) / (1 << blurBits) // the centre takes the rounding remainder
			}
			if math.Abs(got-w) > tol {
				t.Errorf("k %d σ %g: weight %d is %g, Gaussian %g", tt.size, tt.sigma, x, got, w)
			}
		}
	}
	if q := a.blurKernel(23, 0.1); len(q) != 1 {
		t.Errorf("σ 0.1: %d taps kept, want only the centre (the others round to zero)", len(q))
	}
}

// floatBlur is torchvision's gaussian_blur in float64: reflect padding, separable Gaussian,
// round to nearest.
func floatBlur(img transforms.Image, size int, sigma float64) []uint8 {
	r := size / 2
	k := make([]float64, size)
	var s float64
	for i := range k {
		x := float64(i - r)
		k[i] = math.Exp(-0.5 * (x / sigma) * (x / sigma))
		s += k[i]
	}
	for i := range k {
		k[i] /= s
	}
	h, w, c := img.H, img.W, img.C
	mid := make([]float64, len(img.Pix))
	for y := range h {
		for x := range w {
			for ch := range c {
				var v float64
				for i := range k {
					v += k[i] * float64(img.Pix[(y*w+mirror(x+i-r, w))*c+ch])
				}
				mid[(y*w+x)*c+ch] = v
			}
		}
	}
	out := make([]uint8, len(img.Pix))
	for y := range h {
		for x := range w {
			for ch := range c {
				var v float64
				for i := range k {
					v += k[i] * mid[(mirror(y+i-r, h)*w+x)*c+ch]
				}
				out[(y*w+x)*c+ch] = uint8(math.Round(v))
			}
		}
	}
	return out
}

func TestBlurMatchesFloatReference(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	a := &Augmenter{}
	exact, total := 0, 0
	for i := range 40 {
		h, w, c := 1+r.IntN(30), 1+r.IntN(30), 1+2*r.IntN(2)
		img := randomImage(h, w, c, r)
		size := []int{3, 9, 23}[i%3]
		sigma := 0.1 + 1.9*r.Float64()
		got := slices.Clone(img.Pix)
		a.blur(got, h, w, c, a.blurKernel(size, sigma))
		want := floatBlur(img, size, sigma)
		for j := range got {
			total++
			switch d := abs(int(got[j]) - int(want[j])); {
			case d == 0:
				exact++
			case d > 1:
				t.Fatalf("%dx%dx%d k %d σ %g: value %d is %d, float reference %d", h, w, c, size, sigma, j, got[j], want[j])
			}
		}
	}
	t.Logf("%d of %d values equal the float reference, the rest within 1", exact, total)
	if exact < total*97/100 {
		t.Errorf("only %d of %d values equal the float reference", exact, total)
	}
}

func TestBlurImpulseAndConstant(t *testing.T) {
	a := &Augmenter{}
	const n = 31
	img := transforms.NewImage(n, n, 1)
	img.Pix[(n/2)*n+n/2] = 255
	a.blur(img.Pix, n, n, 1, a.blurKernel(23, 2))
	sum := 0
	for y := range n {
		for x := range n {
			v := img.Pix[y*n+x]
			sum += int(v)
			for _, m := range []int{x*n + y, y*n + (n - 1 - x), (n-1-y)*n + x} {
				if img.Pix[m] != v {
					t.Fatalf("blurred impulse not symmetric at (%d,%d)", y, x)
				}
			}
		}
	}
	// Each value is the product of the two 1-D Gaussians times 255, to within rounding; the
	// mass is kept up to the rounding of the many tiny values.
	g := func(d int) float64 {
		var norm float64
		for x := -11; x <= 11; x++ {
			norm += math.Exp(-float64(x*x) / 8)
		}
		return math.Exp(-float64(d*d)/8) / norm
	}
	for y := range n {
		for x := range n {
			want := 255 * g(y-n/2) * g(x-n/2)
			if math.Abs(float64(img.Pix[y*n+x])-want) > 1 {
				t.Fatalf("blurred impulse at (%d,%d) is %d, want %.2f", y, x, img.Pix[y*n+x], want)
			}
		}
	}
	if sum < 225 || sum > 285 {
		t.Errorf("blurred impulse of 255 sums to %d", sum)
	}
	// A constant image stays exactly constant: the weights sum to exactly 1.
	for _, v := range []uint8{0, 1, 77, 254, 255} {
		c := transforms.NewImage(9, 13, 3)
		for i := range c.Pix {
			c.Pix[i] = v
		}
		a.blur(c.Pix, 9, 13, 3, a.blurKernel(23, 1.3))
		for _, got := range c.Pix {
			if got != v {
				t.Fatalf("blur of constant %d gave %d", v, got)
			}
		}
	}
}

// The AVX2 loop of the blur's sums computes the Go loop's integers: random images, sizes down
// to one pixel, both channel counts, every kernel the presets use, with and without it.
func TestVectorBlurEqualsGoLoops(t *testing.T) {
	if !hasVectorLoops {
		t.Skip("this build or CPU has no AVX2 loops")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for range 200 {
		h, w, ch := 1+rng.IntN(60), 1+rng.IntN(60), []int{1, 3}[rng.IntN(2)]
		size, sigma := []int{3, 5, 9, 23}[rng.IntN(4)], 0.1+1.9*rng.Float64()
		src := make([]uint8, h*w*ch)
		white := rng.IntN(4) == 0 // the largest sums
		for j := range src {
			src[j] = uint8(rng.Uint32())
			if white {
				src[j] = 255
			}
		}
		got, want := bytes.Clone(src), bytes.Clone(src)
		a := &Augmenter{}
		a.blur(got, h, w, ch, a.blurKernel(size, sigma))
		hasVectorLoops = false
		a.blur(want, h, w, ch, a.blurKernel(size, sigma))
		hasVectorLoops = true
		if !bytes.Equal(got, want) {
			t.Fatalf("%dx%dx%d, kernel %d, sigma %g: the AVX2 blur differs from the Go loops", h, w, ch, size, sigma)
		}
	}
}

package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// winogradCase is a 3×3 stride-1 convolution over an h×w image.
type winogradCase struct{ b, h, w, c, o, padLo, padHi int }

// shape returns the convolution with spatial axes 1 and 2 (axis 0 of size 1) and layouts
// x [b, h, w, c], w [kh, kw, c, o] (or o, c with transposedKernel, as GoMLX's input gradient
// reads it), y [b, ho, wo, o]; batchGap spaces the images apart in x and y.
func (g winogradCase) shape(transposedKernel bool, batchGap int) (s ConvShape, nx, nw, ny int) {
	ho, wo := g.h+g.padLo+g.padHi-2, g.w+g.padLo+g.padHi-2
	s = ConvShape{Batch: g.b, Channels: g.c, OutChannels: g.o, Groups: 1,
		In: [3]int{1, g.h, g.w}, Out: [3]int{1, ho, wo}, Kernel: [3]int{1, 3, 3},
		Stride: [3]int{1, 1, 1}, PadLo: [3]int{0, g.padLo, g.padLo},
		InputDilation: [3]int{1, 1, 1}, KernelDilation: [3]int{1, 1, 1}}
	xImage, yImage := g.h*g.w*g.c+batchGap, ho*wo*g.o+batchGap
	s.XStrides = ConvStrides{Major: xImage, Minor: 1, Spatial: [3]int{0, g.w * g.c, g.c}}
	s.YStrides = ConvStrides{Major: yImage, Minor: 1, Spatial: [3]int{0, wo * g.o, g.o}}
	if transposedKernel {
		s.WStrides = ConvStrides{Major: 1, Minor: g.c, Spatial: [3]int{0, 3 * g.c * g.o, g.c * g.o}}
	} else {
		s.WStrides = ConvStrides{Major: g.o, Minor: 1, Spatial: [3]int{0, 3 * g.c * g.o, g.c * g.o}}
	}
	return s, g.b * xImage, 9 * g.c * g.o, g.b * yImage
}

// allowSmallWinograd lets the tests' small shapes take the Winograd path.
func allowSmallWinograd(t *testing.T) {
	old := winogradMinTiles
	winogradMinTiles = 1
	t.Cleanup(func() { winogradMinTiles = old })
}

func TestWinogradMatchesDirectLoop(t *testing.T) {
	if !hasWinograd {
		t.Skip("no vectorised Winograd transforms on this machine")
	}
	allowSmallWinograd(t)
	cases := []winogradCase{
		{1, 4, 4, 32, 32, 1, 1},
		{2, 8, 8, 64, 64, 1, 1},   // ResNet's shape: padding 1, even sides
		{3, 7, 5, 32, 64, 1, 1},   // odd sides: tiles past the edge
		{2, 9, 6, 40, 32, 0, 0},   // no padding
		{1, 5, 5, 48, 96, 2, 2},   // padding wider than a tile's overlap
		{2, 6, 7, 32, 32, 2, 0},   // uneven padding
		{1, 11, 3, 32, 32, 1, -1}, // cropping
		{2, 4, 4, 288, 64, 1, 1},  // two depth blocks (blockK = 256)
		{5, 12, 12, 32, 32, 1, 1}, // several tile blocks (5·36 tiles)
		{1, 6, 6, 264, 256, 1, 1}, // wide channels
	}
	r := rand.New(rand.NewPCG(11, 12))
	for _, mk := range availableKernels() {
		for _, threads := range []int{1, 2, 3} {
			pool := newPoolWithKernel(threads, mk)
			for _, g := range cases {
				for _, tk := range []bool{false, true} {
					s, nx, nw, ny := g.shape(tk, 3*(threads-1))
					name := fmt.Sprintf("%s/threads%d/%+v/transposedKernel=%v", mk.name, threads, g, tk)
					if _, ok := planWinograd(mk, &s); !ok {
						if g.o%mk.nr == 0 {
							t.Fatalf("%s: not run with Winograd", name)
						}
						continue
					}
					x, w := randSlice(r, nx), randSlice(r, nw)
					y := randSlice(r, ny)
					gaps := slices.Clone(y)
					if err := pool.Conv(s, x, w, y); err != nil {
						t.Fatalf("%s: %v", name, err)
					}
					want := refConv(s, x, w, ny)
					// The gaps between images are not the output's: they must keep their values.
					for b := range g.b {
						for i := b*s.YStrides.Major + s.Out[1]*s.Out[2]*g.o; i < (b+1)*s.YStrides.Major; i++ {
							want[i] = gaps[i]
						}
					}
					closeEnough(t, name, y, want, 9*g.c)
				}
			}
			pool.Close()
		}
	}
}

// TestWinogradIsCloseToTheDirectConvolution bounds Winograd's rounding on ResNet-like data
// (activations ≥ 0, kernels ~ N(0, 2/fan-in)): relative to the output's scale it stays within
// a few float32 units, like a different summation order.
func TestWinogradIsCloseToTheDirectConvolution(t *testing.T) {
	if !hasWinograd {
		t.Skip("no vectorised Winograd transforms on this machine")
	}
	allowSmallWinograd(t)
	g := winogradCase{4, 8, 8, 128, 128, 1, 1}
	s, nx, nw, ny := g.shape(false, 0)
	r := rand.New(rand.NewPCG(3, 4))
	x, w := make([]float32, nx), make([]float32, nw)
	for i := range x {
		x[i] = max(0, float32(r.NormFloat64()))
	}
	for i := range w {
		w[i] = float32(r.NormFloat64() * math.Sqrt(2.0/float64(9*g.c)))
	}
	want := refConv(s, x, w, ny)
	var scale float64
	for _, v := range want {
		scale = max(scale, math.Abs(float64(v)))
	}
	pool := NewPool(2)
	defer pool.Close()
	var worst [2]float64
	for i, on := range []bool{false, true} {
		useWinograd = on
		y := make([]float32, ny)
		err := pool.Conv(s, x, w, y)
		useWinograd = hasWinograd
		if err != nil {
			t.Fatal(err)
		}
		for j := range y {
			worst[i] = max(worst[i], math.Abs(float64(y[j]-want[j]))/scale)
		}
	}
	t.Logf("largest error relative to the output's scale: direct %.2g, Winograd %.2g", worst[0], worst[1])
	if worst[1] > 1e-5 {
		t.Errorf("Winograd's error %.2g of the output's scale, want ≤ 1e-5 (direct: %.2g)", worst[1], worst[0])
	}
}

func TestWinogradIsDeterministicAcrossThreads(t *testing.T) {
	if !hasWinograd {
		t.Skip("no vectorised Winograd transforms on this machine")
	}
	allowSmallWinograd(t)
	forward, _, _, _ := winogradCase{3, 10, 10, 64, 64, 1, 1}.shape(false, 0)
	grad, _, _, _ := gradCase{70, 8, 8, 64, 64, 1}.shape() // 1,120 tiles: three blocks of up to 512
	for _, tc := range []struct {
		name string
		s    ConvShape
	}{{"forward", forward}, {"kernel gradient", grad}} {
		s := tc.s
		r := rand.New(rand.NewPCG(5, 6))
		x := randSlice(r, tensorSize(s.XStrides, s.Batch, s.Channels, s.In))
		w := randSlice(r, tensorSize(s.WStrides, s.Channels, s.OutChannels, s.Kernel))
		ny := tensorSize(s.YStrides, s.Batch, s.OutChannels, s.Out)
		var first []float32
		for _, threads := range []int{1, 2, 4} {
			pool := NewPool(threads)
			y := make([]float32, ny)
			if err := pool.Conv(s, x, w, y); err != nil {
				t.Fatal(err)
			}
			pool.Close()
			if first == nil {
				first = y
				continue
			}
			if !slices.Equal(first, y) {
				t.Fatalf("%s, %d threads: results differ from 1 thread's", tc.name, threads)
			}
		}
	}
}

// tensorSize is the elements a tensor with these strides and sizes spans.
func tensorSize(st ConvStrides, major, minor int, spatial [3]int) int {
	return extent(st.Major, major, st.Minor, minor, st.Spatial, spatial)
}

func TestWinogradDeclinesOtherConvolutions(t *testing.T) {
	base := winogradCase{16, 8, 8, 64, 64, 1, 1} // 256 tiles
	for _, tc := range []struct {
		name   string
		change func(s *ConvShape)
	}{
		{"stride 2", func(s *ConvShape) { s.Stride[1] = 2 }},
		{"input dilation", func(s *ConvShape) { s.InputDilation[2] = 2 }},
		{"kernel dilation", func(s *ConvShape) { s.KernelDilation[1] = 2 }},
		{"groups", func(s *ConvShape) { s.Groups = 2 }},
		{"channels not contiguous", func(s *ConvShape) { s.XStrides.Minor = 2 }},
		{"output channels not contiguous", func(s *ConvShape) { s.YStrides.Minor = 2 }},
		{"few channels", func(s *ConvShape) { s.Channels = 16 }},
		{"5×5 kernel", func(s *ConvShape) { s.Kernel[1] = 5 }},
		{"three spatial axes", func(s *ConvShape) { s.In[0], s.Out[0] = 2, 2 }},
		{"too few tiles", func(s *ConvShape) { s.Batch = 15 }},
	} {
		s, _, _, _ := base.shape(false, 0)
		if _, ok := planWinograd(selectedKernel, &s); !ok && hasWinograd {
			t.Fatalf("the base case is not run with Winograd")
		}
		tc.change(&s)
		if _, ok := planWinograd(selectedKernel, &s); ok {
			t.Errorf("%s: planned for Winograd", tc.name)
		}
	}
}

// gradCase is the kernel gradient of a 3×3 convolution over n images of h×w with cin → cout
// channels and padding pad (dY is (h+2·pad−2)×(w+2·pad−2)), laid out as GoMLX emits it.
type gradCase struct{ n, h, w, cin, cout, pad int }

func (g gradCase) shape() (s ConvShape, nx, nw, ny int) {
	kh, kw := g.h+2*g.pad-2, g.w+2*g.pad-2
	s = ConvShape{Batch: g.cin, Channels: g.n, OutChannels: g.cout, Groups: 1,
		In: [3]int{1, g.h, g.w}, Out: [3]int{1, 3, 3}, Kernel: [3]int{1, kh, kw},
		Stride: [3]int{1, 1, 1}, PadLo: [3]int{0, g.pad, g.pad},
		InputDilation: [3]int{1, 1, 1}, KernelDilation: [3]int{1, 1, 1}}
	// x [n, h, w, cin] read with cin as the batch; w = dY [n, kh, kw, cout]; y [3, 3, cin, cout].
	s.XStrides = ConvStrides{Major: 1, Minor: g.h * g.w * g.cin, Spatial: [3]int{0, g.w * g.cin, g.cin}}
	s.WStrides = ConvStrides{Major: kh * kw * g.cout, Minor: 1, Spatial: [3]int{0, kw * g.cout, g.cout}}
	s.YStrides = ConvStrides{Major: g.cout, Minor: 1, Spatial: [3]int{0, 3 * g.cin * g.cout, g.cin * g.cout}}
	return s, g.n * g.h * g.w * g.cin, g.n * kh * kw * g.cout, 9 * g.cin * g.cout
}

func TestWinogradKernelGradientMatchesDirectLoop(t *testing.T) {
	if !hasWinograd {
		t.Skip("no vectorised Winograd transforms on this machine")
	}
	allowSmallWinograd(t)
	cases := []gradCase{
		{2, 4, 4, 32, 32, 1},  // ResNet's shape: dY as large as x
		{3, 7, 5, 40, 32, 1},  // odd sides: tiles past dY's edge
		{2, 8, 6, 32, 48, 0},  // no padding: dY smaller than x
		{1, 5, 5, 32, 32, 2},  // padding 2: dY larger than x
		{40, 8, 8, 32, 32, 1}, // several blocks of 256 tiles
		{2, 4, 4, 64, 296, 1}, // output channels past a panel
	}
	r := rand.New(rand.NewPCG(13, 14))
	for _, mk := range availableKernels() {
		for _, threads := range []int{1, 2, 3} {
			pool := newPoolWithKernel(threads, mk)
			for _, g := range cases {
				s, nx, nw, ny := g.shape()
				name := fmt.Sprintf("%s/threads%d/%+v", mk.name, threads, g)
				if _, ok := planWinogradGrad(mk, &s); !ok {
					t.Fatalf("%s: not run with Winograd", name)
				}
				x, w := randSlice(r, nx), randSlice(r, nw)
				y := randSlice(r, ny)
				if err := pool.Conv(s, x, w, y); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				closeEnough(t, name, y, refConv(s, x, w, ny), g.n*s.Kernel[1]*s.Kernel[2])
			}
			pool.Close()
		}
	}
}

func TestWinogradKernelGradientDeclinesWideLayers(t *testing.T) {
	s, _, _, _ := gradCase{64, 4, 4, 256, 512, 1}.shape()
	if _, ok := planWinogradGrad(selectedKernel, &s); !ok && hasWinograd {
		t.Fatalf("256×512 channels not run with Winograd")
	}
	s, _, _, _ = gradCase{64, 4, 4, 512, 512, 1}.shape()
	if _, ok := planWinogradGrad(selectedKernel, &s); ok {
		t.Errorf("512×512 channels planned for Winograd, beyond winogradMaxPairs")
	}
}

// TestDirectConvolutions: a pool told to convolve directly does not take the Winograd path
// for a convolution it would (its result is the direct algorithm's, not bit for bit
// Winograd's), and stays within float32 rounding of the reference loops.
func TestDirectConvolutions(t *testing.T) {
	if !hasWinograd {
		t.Skip("no Winograd kernels on this CPU")
	}
	s, _, _, _ := winogradCase{16, 8, 8, 64, 64, 1, 1}.shape(false, 0)
	if _, ok := planWinograd(selectedKernel, &s); !ok {
		t.Fatal("the case is not planned for Winograd")
	}
	r := rand.New(rand.NewPCG(7, 8))
	x := randSlice(r, tensorSize(s.XStrides, s.Batch, s.Channels, s.In))
	w := randSlice(r, tensorSize(s.WStrides, s.Channels, s.OutChannels, s.Kernel))
	ny := tensorSize(s.YStrides, s.Batch, s.OutChannels, s.Out)
	run := func(direct bool) []float32 {
		pool := NewPool(2)
		defer pool.Close()
		if direct {
			pool.DirectConvolutions()
		}
		y := make([]float32, ny)
		if err := pool.Conv(s, x, w, y); err != nil {
			t.Fatal(err)
		}
		return y
	}
	wino, direct := run(false), run(true)
	if slices.Equal(wino, direct) {
		t.Error("the direct pool's result is Winograd's bit for bit: it took the Winograd path")
	}
	want := refConv(s, x, w, ny)
	for i := range want {
		if d := math.Abs(float64(direct[i] - want[i])); d > 1e-4*(1+math.Abs(float64(want[i]))) {
			t.Fatalf("direct convolution differs from the reference at %d: %g vs %g", i, direct[i], want[i])
		}
	}
}

package augment

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestColorOpsHandComputed(t *testing.T) {
	var lut [256]uint8
	tests := []struct {
		name string
		give []uint8
		ch   int
		op   func([]uint8)
		want []uint8
	}{
		// Brightness: ⌊f·v⌋, clamped.
		{"brightness 1.5", []uint8{100, 0, 255}, 3, func(p []uint8) { brightness(p, 1.5, &lut) }, []uint8{150, 0, 255}},
		{"brightness 0.6", []uint8{101, 7, 10}, 3, func(p []uint8) { brightness(p, 0.6, &lut) }, []uint8{60, 4, 6}},
		{"brightness 1", []uint8{1, 128, 255}, 3, func(p []uint8) { brightness(p, 1, &lut) }, []uint8{1, 128, 255}},
		// Contrast, one channel: mean (0+100)/2 = 50; f 0.5 gives 50 ± 25.
		{"contrast gray", []uint8{0, 100}, 1, func(p []uint8) { contrast(p, 1, 0.5, &lut) }, []uint8{25, 75}},
		// Contrast, RGB: lumas 76 (red) and 150 (green), mean 113; f 2: 2v − 113.
		{"contrast rgb", []uint8{255, 0, 0, 0, 255, 0}, 3, func(p []uint8) { contrast(p, 3, 2, &lut) }, []uint8{255, 0, 0, 0, 255, 0}},
		{"contrast rgb 0.5", []uint8{255, 0, 0, 0, 255, 0}, 3, func(p []uint8) { contrast(p, 3, 0.5, &lut) }, []uint8{184, 56, 56, 56, 184, 56}},
		// Contrast 0: lumas 18 and 119, mean 68.5, floored.
		{"contrast 0", []uint8{10, 20, 30, 200, 100, 0}, 3, func(p []uint8) { contrast(p, 3, 0, &lut) }, []uint8{68, 68, 68, 68, 68, 68}},
		// Saturation: (200,100,50) has luma round(59.8+58.7+5.7) = 124; f 2: 2v − 124.
		{"saturation 2", []uint8{200, 100, 50}, 3, func(p []uint8) { saturation(p, 3, 2) }, []uint8{255, 76, 0}},
		{"saturation 0", []uint8{200, 100, 50}, 3, func(p []uint8) { saturation(p, 3, 0) }, []uint8{124, 124, 124}},
		{"saturation 0.5", []uint8{200, 100, 50}, 3, func(p []uint8) { saturation(p, 3, 0.5) }, []uint8{162, 112, 87}},
		{"saturation gray image", []uint8{200, 100, 50}, 1, func(p []uint8) { saturation(p, 1, 0) }, []uint8{200, 100, 50}},
		// Hue: pure red shifted by 1/3 turn is pure green, by 1/6 yellow, by −1/3 blue.
		{"hue red+1/3", []uint8{255, 0, 0}, 3, func(p []uint8) { hue(p, 3, 1.0/3) }, []uint8{0, 255, 0}},
		{"hue red+1/6", []uint8{255, 0, 0}, 3, func(p []uint8) { hue(p, 3, 1.0/6) }, []uint8{255, 255, 0}},
		{"hue red-1/3", []uint8{255, 0, 0}, 3, func(p []uint8) { hue(p, 3, -1.0/3) }, []uint8{0, 0, 255}},
		{"hue half turn", []uint8{200, 100, 50}, 3, func(p []uint8) { hue(p, 3, 0.5) }, []uint8{50, 150, 200}},
		// (200,100,50): max 200, min 50, C 150, hue 1/3 sextant; +1/12 turn (half a sextant) is
		// 5/6 sextant: middle = 50 + 150·5/6 = 175.
		{"hue 1/12", []uint8{200, 100, 50}, 3, func(p []uint8) { hue(p, 3, 1.0/12) }, []uint8{200, 175, 50}},
		{"hue gray pixel", []uint8{90, 90, 90}, 3, func(p []uint8) { hue(p, 3, 0.3) }, []uint8{90, 90, 90}},
		{"hue gray image", []uint8{255, 0, 0}, 1, func(p []uint8) { hue(p, 1, 0.3) }, []uint8{255, 0, 0}},
		// Grayscale: ITU-R 601-2, Pillow's rounding.
		{"grayscale", []uint8{255, 0, 0, 0, 255, 0, 0, 0, 255, 255, 255, 255}, 3, func(p []uint8) { grayscale(p, 3) },
			[]uint8{76, 76, 76, 150, 150, 150, 29, 29, 29, 255, 255, 255}},
		{"grayscale gray image", []uint8{255, 0, 0}, 1, func(p []uint8) { grayscale(p, 1) }, []uint8{255, 0, 0}},
		{"solarize 128", []uint8{0, 127, 128, 255}, 1, func(p []uint8) { solarize(p, 128, &lut) }, []uint8{0, 127, 127, 0}},
		{"solarize 256", []uint8{0, 127, 128, 255}, 1, func(p []uint8) { solarize(p, 256, &lut) }, []uint8{0, 127, 128, 255}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := slices.Clone(tt.give)
			tt.op(got)
			if !slices.Equal(got, tt.want) {
				t.Errorf("%v → %v, want %v", tt.give, got, tt.want)
			}
		})
	}
}

// torchvision's adjust_hue in float64: _rgb2hsv, h = (h + shift) mod 1, _hsv2rgb, then the
// uint8 conversion v·(255 + 1 − 0.001) truncated.
func torchvisionHue(r, g, b uint8, shift float64) [3]uint8 {
	rf, gf, bf := float64(r)/255, float64(g)/255, float64(b)/255
	maxc, minc := max(rf, gf, bf), min(rf, gf, bf)
	cr := maxc - minc
	div := maxc
	if cr == 0 {
		div = 1
	}
	s := cr / div
	crd := cr
	if cr == 0 {
		crd = 1
	}
	rc, gc, bc := (maxc-rf)/crd, (maxc-gf)/crd, (maxc-bf)/crd
	var h float64
	switch {
	case maxc == rf:
		h = bc - gc
	case maxc == gf:
		h = 2 + rc - bc
	default:
		h = 4 + gc - rc
	}
	h = math.Mod(h/6+1, 1)
	h = math.Mod(h+shift, 1)
	if h < 0 {
		h++
	}
	v := maxc
	i := math.Floor(h * 6)
	f := h*6 - i
	p := min(max(v*(1-s), 0), 1)
	q := min(max(v*(1-s*f), 0), 1)
	tt := min(max(v*(1-s*(1-f)), 0), 1)
	var out [3]float64
	switch int(i) % 6 {
	case 0:
		out = [3]float64{v, tt, p}
	case 1:
		out = [3]float64{q, v, p}
	case 2:
		out = [3]float64{p, v, tt}
	case 3:
		out = [3]float64{p, q, v}
	case 4:
		out = [3]float64{tt, p, v}
	default:
		out = [3]float64{v, p, q}
	}
	var res [3]uint8
	for k, x := range out {
		res[k] = uint8(x * (255 + 1 - 0.001))
	}
	return res
}

// The integer operations agree with torchvision's float formulas to within one level.
func TestColorOpsMatchTorchvisionFloat(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var lut [256]uint8
	exact, total, worst := 0, 0, 0
	check := func(name string, got []uint8, want []float64) {
		t.Helper()
		for i := range got {
			w := int(math.Min(math.Max(want[i], 0), 255)) // torchvision clamps, then truncates
			d := abs(int(got[i]) - w)
			worst = max(worst, d)
			total++
			if d == 0 {
				exact++
			}
			if d > 1 {
				t.Fatalf("%s: value %d is %d, torchvision %.3f", name, i, got[i], want[i])
			}
		}
	}
	for range 200 {
		img := randomImage(8, 8, 3, r)
		pix := img.Pix
		f := r.Float64() * 2
		// brightness
		got := slices.Clone(pix)
		brightness(got, f, &lut)
		want := make([]float64, len(pix))
		for i, v := range pix {
			want[i] = f * float64(v)
		}
		check("brightness", got, want)
		// contrast: blend with the mean of the (floored) grayscale; we use Pillow's rounded
		// luma, so compute the reference mean with it too.
		var sum float64
		for i := 0; i < len(pix); i += 3 {
			sum += float64(luma(pix[i], pix[i+1], pix[i+2]))
		}
		mean := sum / float64(len(pix)/3)
		got = slices.Clone(pix)
		contrast(got, 3, f, &lut)
		for i, v := range pix {
			want[i] = f*float64(v) + (1-f)*mean
		}
		check("contrast", got, want)
		// saturation
		got = slices.Clone(pix)
		saturation(got, 3, f)
		for i := 0; i < len(pix); i += 3 {
			l := float64(luma(pix[i], pix[i+1], pix[i+2]))
			for k := range 3 {
				want[i+k] = f*float64(pix[i+k]) + (1-f)*l
			}
		}
		check("saturation", got, want)
		// hue
		shift := r.Float64() - 0.5
		got = slices.Clone(pix)
		hue(got, 3, shift)
		for i := 0; i < len(pix); i += 3 {
			ref := torchvisionHue(pix[i], pix[i+1], pix[i+2], shift)
			for k := range 3 {
				want[i+k] = float64(ref[k])
			}
		}
		check("hue", got, want)
	}
	t.Logf("%d of %d values equal torchvision's float result, the rest within %d", exact, total, worst)
	if exact < total*9/10 {
		t.Errorf("only %d of %d values equal torchvision's", exact, total)
	}
}

func TestHueRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	img := randomImage(16, 16, 3, r)
	for _, shift := range []float64{0.05, 0.2, 0.5, -0.37} {
		got := slices.Clone(img.Pix)
		hue(got, 3, shift)
		hue(got, 3, -shift)
		for i := range got {
			if d := abs(int(got[i]) - int(img.Pix[i])); d > 2 {
				t.Fatalf("hue %g then %g moved value %d from %d to %d", shift, -shift, i, img.Pix[i], got[i])
			}
		}
	}
}

// The fast paths (tables, 32-bit arithmetic) compute exactly the documented fixed-point
// formulas, for factors on both sides of every fast path's limit.
func TestColorOpsExactFormulas(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	img := randomImage(16, 16, 3, r)
	var lut [256]uint8
	clamp := func(v int64) uint8 { return uint8(min(max(v, 0), 255)) }
	for _, f := range []float64{0, 0.3, 1, 1.7, 2.5, 2.5001, 2.6, 10, 64.5, 101} {
		F := int64(math.RoundToEven(f * 65536))
		got := slices.Clone(img.Pix)
		saturation(got, 3, f)
		for i := 0; i < len(got); i += 3 {
			l := int64(luma(img.Pix[i], img.Pix[i+1], img.Pix[i+2]))
			for k := range 3 {
				v := int64(img.Pix[i+k])
				if want := clamp(floorDiv(F*v+(65536-F)*l, 65536)); got[i+k] != want {
					t.Fatalf("saturation %g of %v: %d, want %d", f, img.Pix[i:i+3], got[i+k], want)
				}
			}
		}
		got = slices.Clone(img.Pix)
		brightness(got, f, &lut)
		for i, v := range img.Pix {
			if want := clamp(F * int64(v) / 65536); got[i] != want {
				t.Fatalf("brightness %g of %d: %d, want %d", f, v, got[i], want)
			}
		}
	}
}

func TestReciprocalDivision(t *testing.T) {
	for c := 1; c < 256; c++ {
		for a := 0; a < 6*256; a++ {
			if got := int((uint64(a) * recip[c]) >> 32); got != a/c {
				t.Fatalf("%d/%d by reciprocal = %d, want %d", a, c, got, a/c)
			}
		}
	}
}

// The AVX2 colour loops give the Go loops' bytes: hue for every shift sign and size, saturation
// on both of its Go paths and past the vector limit, grayscale, and contrast (whose luma sum
// is vectorised), on random pixels with gray ones and ties between channels, at lengths
// around the 8-pixel blocks.
func TestVectorColourEqualsGoLoops(t *testing.T) {
	if !hasVectorLoops {
		t.Skip("this build or CPU has no AVX2 loops")
	}
	rng := rand.New(rand.NewPCG(9, 10))
	var lut [256]uint8
	ops := map[string]func(pix []uint8, f float64){
		"hue":        func(pix []uint8, f float64) { hue(pix, 3, f-0.5) },
		"saturation": func(pix []uint8, f float64) { saturation(pix, 3, 10*f) },
		"grayscale":  func(pix []uint8, f float64) { grayscale(pix, 3) },
		"brightness": func(pix []uint8, f float64) { brightness(pix, 5*f, &lut) },
		"contrast":   func(pix []uint8, f float64) { contrast(pix, 3, 3*f, &lut) },
	}
	for name, op := range ops {
		for n := 1; n <= 300; n++ {
			pix := make([]uint8, 3*n)
			for i := range pix {
				pix[i] = uint8(rng.Uint32())
				if rng.IntN(8) == 0 && i >= 1 {
					pix[i] = pix[i-1] // ties: gray pixels and two equal channels
				}
			}
			f := rng.Float64()
			got, want := slices.Clone(pix), slices.Clone(pix)
			op(got, f)
			hasVectorLoops = false
			op(want, f)
			hasVectorLoops = true
			if !slices.Equal(got, want) {
				for i := range got {
					if got[i] != want[i] {
						t.Fatalf("%s of %d pixels, f %g: pixel %d %v is %v, the Go loop gives %v", name, n, f, i/3, pix[i/3*3:i/3*3+3], got[i/3*3:i/3*3+3], want[i/3*3:i/3*3+3])
					}
				}
			}
		}
	}
}

package transforms

import (
	"bytes"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"math/rand/v2"
	"testing"
)

func TestImageRoundTripsThroughPNG(t *testing.T) {
	for _, c := range []int{1, 3} {
		m := NewImage(5, 7, c)
		for i := range m.Pix {
			m.Pix[i] = uint8(i * 37)
		}
		var buf bytes.Buffer
		if err := png.Encode(&buf, m.Std()); err != nil {
			t.Fatal(err)
		}
		dec, err := png.Decode(&buf)
		if err != nil {
			t.Fatal(err)
		}
		got := FromStd(dec)
		if got.H != 5 || got.W != 7 || got.C != c || !bytes.Equal(got.Pix, m.Pix) {
			t.Errorf("%d channels: PNG round trip changed the image (%dx%dx%d)", c, got.H, got.W, got.C)
		}
	}
}

func TestFromStdConvertsJPEGToRGB(t *testing.T) {
	src := image.NewRGBA(image.Rect(0, 0, 16, 8))
	for i := 0; i < 16*8; i++ {
		src.Set(i%16, i/16, color.RGBA{200, 40, 90, 255})
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, src, &jpeg.Options{Quality: 95}); err != nil {
		t.Fatal(err)
	}
	dec, err := jpeg.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	m := FromStd(dec)
	if err := m.Validate(); err != nil || m.C != 3 {
		t.Fatalf("FromStd(jpeg) = %dx%dx%d, %v", m.H, m.W, m.C, err)
	}
	if r, g, b := m.Pix[0], m.Pix[1], m.Pix[2]; absDiff(r, 200) > 4 || absDiff(g, 40) > 4 || absDiff(b, 90) > 4 {
		t.Errorf("first pixel = %d,%d,%d, want about 200,40,90", r, g, b)
	}
}

// The row-wise YCbCr conversion must give the per-pixel reference's bytes for every
// subsampling ratio, also for sub-images whose bounds start at odd coordinates.
func TestFromYCbCrMatchesPerPixelConversion(t *testing.T) {
	ratios := []image.YCbCrSubsampleRatio{
		image.YCbCrSubsampleRatio444, image.YCbCrSubsampleRatio422, image.YCbCrSubsampleRatio420,
		image.YCbCrSubsampleRatio440, image.YCbCrSubsampleRatio411, image.YCbCrSubsampleRatio410,
	}
	for _, ratio := range ratios {
		src := image.NewYCbCr(image.Rect(0, 0, 37, 23), ratio)
		for i := range src.Y {
			src.Y[i] = uint8(i*7 + i/5)
		}
		for i := range src.Cb {
			src.Cb[i] = uint8(i * 13)
			src.Cr[i] = uint8(255 - i*11)
		}
		for _, sub := range []image.Rectangle{src.Bounds(), image.Rect(3, 5, 30, 20), image.Rect(4, 1, 9, 2)} {
			m := src.SubImage(sub).(*image.YCbCr)
			want := fromYCbCrPerPixel(m)
			if got := FromStd(m); !bytes.Equal(got.Pix, want.Pix) {
				t.Errorf("%v, bounds %v: the row-wise conversion differs from the per-pixel one", ratio, sub)
			}
			into := Image{Pix: make([]uint8, 1, 5000)} // a reused buffer, larger than needed
			FromStdInto(&into, m)
			if !bytes.Equal(into.Pix, want.Pix) || into.H != want.H || into.W != want.W || into.C != 3 {
				t.Errorf("%v, bounds %v: FromStdInto differs from the per-pixel conversion", ratio, sub)
			}
		}
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		give Image
		ok   bool
	}{
		{NewImage(2, 2, 3), true},
		{NewImage(2, 2, 1), true},
		{Image{Pix: make([]uint8, 8), H: 2, W: 2, C: 2}, false},
		{Image{Pix: make([]uint8, 11), H: 2, W: 2, C: 3}, false},
		{Image{H: 0, W: 2, C: 3}, false},
	}
	for _, tt := range tests {
		if err := tt.give.Validate(); (err == nil) != tt.ok {
			t.Errorf("Validate(%dx%dx%d, %d bytes) = %v", tt.give.H, tt.give.W, tt.give.C, len(tt.give.Pix), err)
		}
	}
}

func absDiff(a, b uint8) int {
	if a > b {
		return int(a - b)
	}
	return int(b - a)
}

// The AVX2 conversion gives the per-pixel reference's bytes: random planes (every clamp
// reached), widths around its 8-pixel blocks, the three ratios it takes.
func TestVectorYCbCrMatchesPerPixelConversion(t *testing.T) {
	if !hasYCbCrVec {
		t.Skip("this build or CPU has no AVX2 conversion")
	}
	rng := rand.New(rand.NewPCG(7, 8))
	ratios := []image.YCbCrSubsampleRatio{image.YCbCrSubsampleRatio444, image.YCbCrSubsampleRatio422, image.YCbCrSubsampleRatio420}
	for w := 1; w <= 80; w++ {
		for _, ratio := range ratios {
			src := image.NewYCbCr(image.Rect(0, 0, w, 1+rng.IntN(9)), ratio)
			for _, plane := range [][]uint8{src.Y, src.Cb, src.Cr} {
				for i := range plane {
					plane[i] = uint8(rng.Uint32())
				}
			}
			want := fromYCbCrPerPixel(src)
			if got := FromStd(src); !bytes.Equal(got.Pix, want.Pix) {
				t.Fatalf("%v, %v: the AVX2 conversion differs from the per-pixel one", ratio, src.Bounds())
			}
		}
	}
}

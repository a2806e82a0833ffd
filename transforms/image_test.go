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

// FromStd gives the bytes of color.NRGBAModel.Convert(At(x, y)) for every image type the
// decoders make, sub-images and partial alpha included, allocating its result and nothing a
// pixel: boxing a colour a pixel would make more garbage from a 16-bit PNG than its
// decoder's own pixels, none of it counted in the decode budget.
func TestFromStdMatchesNRGBAModelWithoutGarbage(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	r := image.Rect(0, 0, 37, 23)
	u16 := func() uint16 { return uint16(rng.Uint32()) }
	alpha := func() uint16 { return []uint16{0, 0xffff, u16()}[rng.IntN(3)] }
	nrgba, nrgba64, rgba64, cmyk := image.NewNRGBA(r), image.NewNRGBA64(r), image.NewRGBA64(r), image.NewCMYK(r)
	palette := color.Palette{color.NRGBA{10, 20, 30, 0}, color.NRGBA{200, 100, 50, 128}, color.RGBA{9, 9, 9, 255}, color.RGBA{0, 0, 0, 0}}
	paletted := image.NewPaletted(r, palette)
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			a := alpha()
			nrgba.SetNRGBA(x, y, color.NRGBA{uint8(u16()), uint8(u16()), uint8(u16()), uint8(a >> 8)})
			nrgba64.SetNRGBA64(x, y, color.NRGBA64{u16(), u16(), u16(), a})
			c := color.RGBA64{A: a}
			c.R, c.G, c.B = min(u16(), a), min(u16(), a), min(u16(), a) // premultiplied
			rgba64.SetRGBA64(x, y, c)
			cmyk.SetCMYK(x, y, color.CMYK{uint8(u16()), uint8(u16()), uint8(u16()), uint8(u16())})
			paletted.SetColorIndex(x, y, uint8(rng.IntN(len(palette))))
		}
	}
	sub := image.Rect(3, 2, 30, 21)
	for _, tc := range []struct {
		name string
		img  image.Image
	}{
		{"NRGBA", nrgba}, {"NRGBA64", nrgba64}, {"RGBA64", rgba64}, {"CMYK", cmyk}, {"Paletted", paletted},
		{"NRGBA, a sub-image", nrgba.SubImage(sub)}, {"NRGBA64, a sub-image", nrgba64.SubImage(sub)},
		{"Paletted, a sub-image", paletted.SubImage(sub)},
	} {
		b := tc.img.Bounds()
		want := make([]uint8, 0, b.Dx()*b.Dy()*3)
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				c := color.NRGBAModel.Convert(tc.img.At(x, y)).(color.NRGBA)
				want = append(want, c.R, c.G, c.B)
			}
		}
		got := FromStd(tc.img)
		if got.H != b.Dy() || got.W != b.Dx() || got.C != 3 || !bytes.Equal(got.Pix, want) {
			t.Errorf("%s: FromStd differs from color.NRGBAModel's conversion", tc.name)
		}
		most := 1.0 // its result
		if _, ok := tc.img.(*image.Paletted); ok {
			most += float64(len(palette)) // and the palette's colours, converted once
		}
		if allocs := testing.AllocsPerRun(3, func() { FromStd(tc.img) }); allocs > most {
			t.Errorf("%s: FromStd made %.0f allocations for %d pixels, want at most %.0f", tc.name, allocs, b.Dx()*b.Dy(), most)
		}
	}
}

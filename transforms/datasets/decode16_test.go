package datasets

import (
	"bytes"
	"compress/zlib"
	"encoding/binary"
	"hash/crc32"
	"image"
	"image/color"
	"image/png"
	"runtime"
	"testing"
)

// adam7PNG encodes img as a 16-bit RGBA PNG interlaced with Adam7, which image/png does not
// write: each pass's rows, unfiltered, one after another.
func adam7PNG(t testing.TB, img *image.NRGBA64) []byte {
	t.Helper()
	b := img.Bounds()
	w, h := b.Dx(), b.Dy()
	var raw []byte
	for _, p := range [7][4]int{{0, 0, 8, 8}, {4, 0, 8, 8}, {0, 4, 4, 8}, {2, 0, 4, 4}, {0, 2, 2, 4}, {1, 0, 2, 2}, {0, 1, 1, 2}} {
		x0, y0, dx, dy := p[0], p[1], p[2], p[3]
		if x0 >= w || y0 >= h {
			continue // an empty pass has no rows
		}
		for y := y0; y < h; y += dy {
			raw = append(raw, 0)
			for x := x0; x < w; x += dx {
				c := img.NRGBA64At(b.Min.X+x, b.Min.Y+y)
				for _, v := range []uint16{c.R, c.G, c.B, c.A} {
					raw = binary.BigEndian.AppendUint16(raw, v)
				}
			}
		}
	}
	var idat bytes.Buffer
	z := zlib.NewWriter(&idat)
	if _, err := z.Write(raw); err != nil {
		t.Fatal(err)
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	chunk := func(out []byte, kind string, body []byte) []byte {
		out = binary.BigEndian.AppendUint32(out, uint32(len(body)))
		out = append(out, kind...)
		out = append(out, body...)
		return binary.BigEndian.AppendUint32(out, crc32.ChecksumIEEE(append([]byte(kind), body...)))
	}
	ihdr := binary.BigEndian.AppendUint32(nil, uint32(w))
	ihdr = binary.BigEndian.AppendUint32(ihdr, uint32(h))
	ihdr = append(ihdr, 16, 6, 0, 0, 1) // 16-bit RGBA, Adam7
	out := chunk([]byte("\x89PNG\r\n\x1a\n"), "IHDR", ihdr)
	out = chunk(out, "IDAT", idat.Bytes())
	return chunk(out, "IEND", nil)
}

// TestDecodeAllocatesWhatTheBudgetCounts: decoding a 16-bit PNG, plain or interlaced,
// allocates no more than what the process's decode budget counts for it (the decoder's
// pixels, its passes', and the converted image) and a little for rows and zlib, so that the
// budget bounds the heap: the conversion to 8 bits boxes no colour a pixel, and an
// interlaced PNG's passes are counted.
func TestDecodeAllocatesWhatTheBudgetCounts(t *testing.T) {
	const w, h, slack = 1024, 768, 256 << 10
	rgba := image.NewNRGBA64(image.Rect(0, 0, w, h))
	rgb := image.NewRGBA64(rgba.Rect)
	grey := image.NewGray16(rgba.Rect)
	for y := range h {
		for x := range w {
			v := uint16(x*97 + y*13)
			rgba.SetNRGBA64(x, y, color.NRGBA64{v, v ^ 0x5555, uint16(y * 85), uint16(x * 64)})
			rgb.SetRGBA64(x, y, color.RGBA64{v, v ^ 0x5555, uint16(y * 85), 0xffff})
			grey.SetGray16(x, y, color.Gray16{v})
		}
	}
	encode := func(img image.Image) []byte {
		var buf bytes.Buffer
		if err := png.Encode(&buf, img); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	plain := encode(rgba)
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"16-bit RGBA", plain},
		{"16-bit RGB", encode(rgb)},
		{"16-bit grey", encode(grey)},
		{"16-bit RGBA, interlaced", adam7PNG(t, rgba)},
	} {
		hdr, err := DecodeHeader(tc.data, "", Limits{})
		if err != nil {
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		img, err := Decode(tc.data, "", Limits{})
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		alloc, counted := int64(after.TotalAlloc-before.TotalAlloc), hdr.heldBytes()
		t.Logf("%s %dx%d: allocated %d KiB, the budget counts %d KiB", tc.name, w, h, alloc>>10, counted>>10)
		if alloc > counted+slack {
			t.Errorf("%s: decoding allocated %d KiB, more than the %d KiB the decode budget counts and %d KiB", tc.name, alloc>>10, counted>>10, slack>>10)
		}
		if tc.name == "16-bit RGBA, interlaced" {
			want, err := Decode(plain, "", Limits{})
			if err != nil || !bytes.Equal(img.Pix, want.Pix) {
				t.Errorf("the interlaced PNG decodes to other pixels than the plain one (%v)", err)
			}
		}
	}
}

package datasets

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"image"
	"image/color"
	"image/png"
	"runtime"
	"testing"
	"time"

	"github.com/dcl-beam/dcl-beam/internal/testing/testfiles"
)

func TestDecode(t *testing.T) {
	var gray bytes.Buffer
	g := image.NewGray(image.Rect(0, 0, 5, 4))
	g.SetGray(2, 1, color.Gray{Y: 200})
	if err := png.Encode(&gray, g); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		data    []byte
		format  string
		limits  Limits
		wantHWC [3]int
		wantErr string
	}{
		{name: "jpeg", data: testfiles.JPEG(t, 16, 12, 3), format: FormatJPEG, wantHWC: [3]int{12, 16, 3}},
		{name: "png", data: testfiles.PNG(t, 7, 9, 2), format: FormatPNG, wantHWC: [3]int{9, 7, 3}},
		{name: "grayscale png", data: gray.Bytes(), format: FormatPNG, wantHWC: [3]int{4, 5, 1}},
		{name: "png named .JPEG (as ILSVRC-2012 has)", data: testfiles.PNG(t, 4, 4, 1), format: FormatJPEG, wantHWC: [3]int{4, 4, 3}},
		{name: "unknown format", data: testfiles.PNG(t, 4, 4, 1), format: "", wantHWC: [3]int{4, 4, 3}},
		{name: "not an image", data: []byte("hello, world"), format: FormatJPEG, wantErr: "not a jpeg image: starts with 68 65 6c"},
		{name: "empty", data: nil, wantErr: "empty file"},
		{name: "corrupt scan", data: testfiles.CorruptJPEG(t), format: FormatJPEG, wantErr: "decoding 24x24 jpeg"},
		{name: "bad header", data: []byte{0xFF, 0xD8, 0xFF, 0xC0, 0, 2}, wantErr: "reading jpeg header"},
		{name: "over a custom limit", data: testfiles.JPEG(t, 16, 16, 1), limits: Limits{MaxPixels: 255}, wantErr: "16x16 = 256 pixels, more than the limit of 255"},
		{name: "at a custom limit", data: testfiles.JPEG(t, 16, 16, 1), limits: Limits{MaxPixels: 256}, wantHWC: [3]int{16, 16, 3}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Decode(tt.data, tt.format, tt.limits)
			if tt.wantErr != "" {
				wantErrorMentions(t, err, tt.wantErr)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := [3]int{m.H, m.W, m.C}; got != tt.wantHWC || m.Validate() != nil {
				t.Errorf("image %v, want %v (%v)", got, tt.wantHWC, m.Validate())
			}
		})
	}
}

func TestDecodePixels(t *testing.T) {
	m, err := Decode(testfiles.PNG(t, 7, 9, 2), FormatPNG, Limits{})
	if err != nil {
		t.Fatal(err)
	}
	src := testfiles.Photo(7, 9, 2)
	for _, xy := range [][2]int{{0, 0}, {6, 8}, {3, 4}} {
		x, y := xy[0], xy[1]
		c := src.RGBAAt(x, y)
		i := (y*7 + x) * 3
		if got := [3]uint8{m.Pix[i], m.Pix[i+1], m.Pix[i+2]}; got != [3]uint8{c.R, c.G, c.B} {
			t.Errorf("pixel (%d,%d) = %v, want %v", x, y, got, [3]uint8{c.R, c.G, c.B})
		}
	}
}

// hugeJPEG is a real JPEG whose frame header was patched to claim 65535×65535 pixels, the
// most a JPEG can (its dimensions are 16-bit): 4.3 gigapixels.
func hugeJPEG(t testing.TB) []byte {
	data := testfiles.JPEG(t, 16, 16, 1)
	i := bytes.Index(data, []byte{0xFF, 0xC0})
	if i < 0 {
		t.Fatal("no SOF0 marker in the encoded JPEG")
	}
	binary.BigEndian.PutUint16(data[i+5:], 65535)
	binary.BigEndian.PutUint16(data[i+7:], 65535)
	return data
}

// hugePNG is a valid PNG signature and header claiming 100000×100000 pixels, with a tiny
// (and wrong) image data chunk.
func hugePNG() []byte {
	chunk := func(kind string, body []byte) []byte {
		b := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
		b = append(b, kind...)
		b = append(b, body...)
		return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(append([]byte(kind), body...)))
	}
	ihdr := binary.BigEndian.AppendUint32(nil, 100000)
	ihdr = binary.BigEndian.AppendUint32(ihdr, 100000)
	ihdr = append(ihdr, 8, 2, 0, 0, 0) // 8-bit RGB
	out := []byte("\x89PNG\r\n\x1a\n")
	out = append(out, chunk("IHDR", ihdr)...)
	out = append(out, chunk("IDAT", []byte{0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01})...)
	return append(out, chunk("IEND", nil)...)
}

// TestDecodeRefusesHugeHeaders: the header is checked before any pixel memory is taken.
// Without the check the decoders would try to allocate gigabytes (13 GB for the JPEG, 40 GB
// for the PNG) and the test would die; with it, the refusal allocates next to nothing.
func TestDecodeRefusesHugeHeaders(t *testing.T) {
	tests := []struct {
		name string
		data []byte
		want string
	}{
		{"jpeg 65535x65535", hugeJPEG(t), "jpeg header claims 65535x65535 = 4294836225 pixels, more than the limit of 64000000"},
		{"png 100000x100000", hugePNG(), "png header claims 100000x100000 = 10000000000 pixels"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := Decode(tt.data, "", Limits{})
			runtime.ReadMemStats(&after)
			wantErrorMentions(t, err, tt.want, "refused before decoding")
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 1<<20 {
				t.Errorf("refusing the image allocated %d bytes", grew)
			}
		})
	}
}

// pngHeader is a PNG signature and header of a w×h image of the given bit depth and colour
// type, with an empty image data chunk: enough for DecodeHeader.
func pngHeader(w, h int, depth, colorType byte) []byte {
	return pngHeaderInterlaced(w, h, depth, colorType, 0)
}

// pngHeaderInterlaced is pngHeader with the header's interlace method (1: Adam7).
func pngHeaderInterlaced(w, h int, depth, colorType, interlace byte) []byte {
	chunk := func(kind string, body []byte) []byte {
		b := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
		b = append(b, kind...)
		b = append(b, body...)
		return binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(append([]byte(kind), body...)))
	}
	ihdr := binary.BigEndian.AppendUint32(nil, uint32(w))
	ihdr = binary.BigEndian.AppendUint32(ihdr, uint32(h))
	ihdr = append(ihdr, depth, colorType, 0, 0, interlace)
	out := []byte("\x89PNG\r\n\x1a\n")
	out = append(out, chunk("IHDR", ihdr)...)
	if colorType == 3 {
		out = append(out, chunk("PLTE", []byte{0, 0, 0})...)
	}
	out = append(out, chunk("IDAT", nil)...)
	return append(out, chunk("IEND", nil)...)
}

// TestDecodeBytesCountBytesPerPixel: the decoding bound counts what the decoder allocates a
// pixel, so a 16-bit image is refused at half the pixels of an 8-bit one, and a progressive
// JPEG (whose coefficients the decoder keeps) or an interlaced PNG (whose passes it decodes
// apart) at less than a baseline one.
func TestDecodeBytesCountBytesPerPixel(t *testing.T) {
	baseline := testfiles.JPEG(t, 100, 100, 1)
	progressive := bytes.Clone(baseline)
	i := bytes.Index(progressive, []byte{0xFF, 0xC0})
	progressive[i+1] = 0xC2
	tests := []struct {
		name     string
		data     []byte
		want     int64
		channels int
	}{
		{"8-bit grey", pngHeader(100, 100, 8, 0), 10000, 1},
		{"16-bit grey", pngHeader(100, 100, 16, 0), 20000, 1},
		{"8-bit RGBA", pngHeader(100, 100, 8, 6), 40000, 3},
		{"16-bit RGBA", pngHeader(100, 100, 16, 6), 80000, 3},
		{"16-bit RGB", pngHeader(100, 100, 16, 2), 80000, 3},
		{"palette", pngHeader(100, 100, 8, 3), 10000, 3},
		{"16-bit RGBA, interlaced", pngHeaderInterlaced(100, 100, 16, 6, 1), 160000, 3},
		{"palette, interlaced", pngHeaderInterlaced(100, 100, 8, 3, 1), 20000, 3},
		{"baseline JPEG", baseline, 30000, 3},
		{"progressive JPEG", progressive, 30000 + 120000, 3},
	}
	for _, tt := range tests {
		h, err := DecodeHeader(tt.data, "", Limits{})
		if err != nil || h.DecodeBytes != tt.want || h.Channels != tt.channels {
			t.Errorf("%s: %d bytes, %d channels, %v; want %d and %d", tt.name, h.DecodeBytes, h.Channels, err, tt.want, tt.channels)
		}
	}
	// At the default bound: 64 megapixels of 8-bit RGBA pass, of 16-bit RGBA do not.
	if _, err := DecodeHeader(pngHeader(8000, 8000, 8, 6), "", Limits{}); err != nil {
		t.Errorf("8-bit 8000x8000: %v", err)
	}
	_, err := DecodeHeader(pngHeader(8000, 8000, 16, 6), "", Limits{})
	wantErrorMentions(t, err, "png header claims 8000x8000 pixels of 8 bytes each to decode, 488 MiB, more than the limit of 256 MiB: refused before decoding")
}

// TestDecodeBudgetHoldsForTheProcess: decodings that would together take more than the
// process's budget wait for each other, and a held image counts until it is released.
func TestDecodeBudgetHoldsForTheProcess(t *testing.T) {
	data := testfiles.PNG(t, 100, 100, 1) // 40,000 bytes to decode, 30,000 converted
	prev := SetDecodeBudget(75000)
	defer SetDecodeBudget(prev)
	_, release, err := DecodeHeld(data, "", Limits{})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		_, r, _ := DecodeHeld(data, "", Limits{}) // needs 70,000 with 30,000 held
		r()
		close(done)
	}()
	select {
	case <-done:
		t.Fatal("a second decoding went past the budget while the first image was held")
	case <-time.After(200 * time.Millisecond):
	}
	release()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the second decoding did not go on when the first image was released")
	}
}

package jpeg

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	stdjpeg "image/jpeg"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/cputime"
	"github.com/dcl-beam/dcl-beam/internal/testing/mutate"
	"github.com/dcl-beam/dcl-beam/internal/testing/testfiles"
)

// corpus is every JPEG of the standard library's image tests (baseline and progressive, every
// subsampling, restart markers, gray, CMYK, RGB, truncated) and encodings of photo-like
// images at many sizes and qualities.
func corpus(t testing.TB) map[string][]byte {
	files := map[string][]byte{}
	root, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		t.Fatalf("go env GOROOT: %v", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(root)), "src", "image", "testdata")
	names, _ := filepath.Glob(filepath.Join(dir, "*.jpeg"))
	if len(names) < 20 {
		t.Fatalf("%s: want the standard library's JPEG test files, found %d", dir, len(names))
	}
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		files[filepath.Base(n)] = b
	}
	for i, size := range [][2]int{{1, 1}, {7, 3}, {17, 33}, {64, 48}, {500, 375}, {333, 101}} {
		for _, q := range []int{1, 10, 50, 75, 90, 95, 100} {
			var buf bytes.Buffer
			if err := stdjpeg.Encode(&buf, testfiles.Photo(size[0], size[1], i), &stdjpeg.Options{Quality: q}); err != nil {
				t.Fatal(err)
			}
			files[strings.Join([]string{"photo", itoa(size[0]), itoa(size[1]), itoa(q)}, "-")] = buf.Bytes()
		}
	}
	// The benchmark's photograph, with the noise of a real one: long codes, large coefficients
	// and many stuffed 0xff bytes.
	files["photo-noisy-500-375"] = testfiles.PhotoJPEG(t, 500, 375, 1)
	gray := image.NewGray(image.Rect(0, 0, 61, 40))
	for i := range gray.Pix {
		gray.Pix[i] = uint8(i * 7)
	}
	var buf bytes.Buffer
	if err := stdjpeg.Encode(&buf, gray, &stdjpeg.Options{Quality: 80}); err != nil {
		t.Fatal(err)
	}
	files["gray"] = buf.Bytes()
	return files
}

func itoa(i int) string {
	return string(rune('0'+i/100%10)) + string(rune('0'+i/10%10)) + string(rune('0'+i%10))
}

func decodeBoth(data []byte) (got, want image.Image, gotErr, wantErr error) {
	got, gotErr = Decode(bytes.NewReader(data))
	want, wantErr = stdjpeg.Decode(bytes.NewReader(data))
	return
}

// The fork decodes every file of the corpus to the standard library's image, pixel for pixel,
// and fails where it fails, also on every truncation and on single corrupted bytes.
func TestDecodesAsTheStandardLibrary(t *testing.T) {
	for name, data := range corpus(t) {
		got, want, gotErr, wantErr := decodeBoth(data)
		if (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
			t.Errorf("%s: error %v, the standard library's %v", name, gotErr, wantErr)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: the image differs from the standard library's", name)
		}
		step := max(1, len(data)/40)
		if testing.Short() {
			step = max(1, len(data)/8)
		}
		for cut := 0; cut < len(data); cut += step {
			if got, want, gotErr, wantErr := decodeBoth(data[:cut]); (gotErr == nil) != (wantErr == nil) || !reflect.DeepEqual(got, want) {
				t.Errorf("%s cut at %d: %v, the standard library %v", name, cut, gotErr, wantErr)
			}
			bad := bytes.Clone(data)
			bad[cut] ^= 0x5a
			if got, want, gotErr, wantErr := decodeBoth(bad); (gotErr == nil) != (wantErr == nil) || !reflect.DeepEqual(got, want) {
				t.Errorf("%s with byte %d changed: %v, the standard library %v", name, cut, gotErr, wantErr)
			}
		}
	}
}

// BenchmarkDecode: image/jpeg and the fork on an ILSVRC-size photograph (500×375) and on a
// small one (32×32, where a decoder's fixed costs show).
func BenchmarkDecode(b *testing.B) {
	for _, size := range [][2]int{{500, 375}, {32, 32}} {
		data := testfiles.PhotoJPEG(b, size[0], size[1], 1)
		for _, d := range []struct {
			name string
			f    func() error
		}{
			{"std", func() error { _, err := stdjpeg.Decode(bytes.NewReader(data)); return err }},
			{"fork", func() error { _, err := Decode(bytes.NewReader(data)); return err }},
		} {
			b.Run(d.name+"/"+strconv.Itoa(size[0])+"x"+strconv.Itoa(size[1]), func(b *testing.B) {
				cpu0 := cputime.Process()
				for b.Loop() {
					if err := d.f(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64((cputime.Process()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
			})
		}
	}
}

// FuzzDecodesAsTheStandardLibrary: any bytes decode to the standard library's image or fail with
// its error (go test -fuzz FuzzDecodesAsTheStandardLibrary ./internal/jpeg; the seeds are
// the corpus's small files).
func FuzzDecodesAsTheStandardLibrary(f *testing.F) {
	for _, data := range smallCorpus(f) {
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := decodesAsTheStandardLibrary(data); err != nil {
			t.Fatal(err)
		}
	})
}

// Every test run decodes a second's worth of mutations of the corpus's small files as the
// standard library does.
func TestMutatedJPEGsDecodeAsTheStandardLibrary(t *testing.T) {
	mutate.Run(t, smallCorpus(t), decodesAsTheStandardLibrary)
}

// smallCorpus is the corpus's files under 8 KiB, by name.
func smallCorpus(t testing.TB) [][]byte {
	var out [][]byte
	files := corpus(t)
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if data := files[name]; len(data) < 8<<10 {
			out = append(out, data)
		}
	}
	return out
}

// decodesAsTheStandardLibrary reports how data's decoding differs from the standard
// library's: the image, or the error. A file past the bound on scans
// (MaxScansPerComponent), which the standard library decodes however long it takes, is
// the one difference.
func decodesAsTheStandardLibrary(data []byte) error {
	if cfg, err := stdjpeg.DecodeConfig(bytes.NewReader(data)); err == nil && cfg.Width*cfg.Height > 1e6 {
		return nil // too large to decode twice per input
	}
	got, want, gotErr, wantErr := decodeBoth(data)
	if gotErr != nil && strings.Contains(gotErr.Error(), "scans of one component") {
		return nil
	}
	if (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
		return fmt.Errorf("error %v, the standard library's %v", gotErr, wantErr)
	}
	if !reflect.DeepEqual(got, want) {
		return errors.New("the image differs from the standard library's")
	}
	return nil
}

// The IDCT's shortcuts compute what the full butterflies compute: random blocks with zero
// rows and columns, extreme values included (corrupt files give any int32 the dequantiser
// makes).
func TestIDCTShortcutsAreExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	values := []func() int32{
		func() int32 { return int32(rng.IntN(4096)) - 2048 },
		func() int32 { return int32(rng.IntN(1<<20)) - 1<<19 },
		func() int32 { return int32(rng.Uint32()) },
	}
	for range 200000 {
		var b block
		value := values[rng.IntN(len(values))]
		rows, cols := rng.Uint32(), rng.Uint32() // which rows and columns hold values past the DC
		for i := range b {
			if i == 0 || (rows>>(i/8)&1 == 1 && cols>>(i%8)&1 == 1 && rng.IntN(3) == 0) {
				b[i] = value()
			}
		}
		got, want := b, b
		idct(&got)
		idctShortcuts = false
		idct(&want)
		idctShortcuts = true
		if got != want {
			t.Fatalf("block %v: the shortcuts give %v, the butterflies %v", b, got, want)
		}
	}
}

// DecodeRegion gives Decode's pixels inside the region, for every file of the corpus that
// decodes and random regions (empty, a pixel, edges, the whole image).
func TestDecodeRegionIsDecodeInside(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for name, data := range corpus(t) {
		want, err := Decode(bytes.NewReader(data))
		if err != nil {
			continue
		}
		bounds := want.Bounds()
		for k := range 12 {
			x0, y0 := rng.IntN(bounds.Dx()), rng.IntN(bounds.Dy())
			region := image.Rect(x0, y0, x0+1+rng.IntN(bounds.Dx()-x0), y0+1+rng.IntN(bounds.Dy()-y0))
			if k == 0 {
				region = bounds
			}
			got, err := DecodeRegion(bytes.NewReader(data), region)
			if err != nil {
				t.Fatalf("%s, region %v: %v", name, region, err)
			}
			for y := region.Min.Y; y < region.Max.Y; y++ {
				for x := region.Min.X; x < region.Max.X; x++ {
					if got.At(x, y) != want.At(x, y) {
						t.Fatalf("%s, region %v: pixel (%d, %d) is %v, Decode gives %v", name, region, x, y, got.At(x, y), want.At(x, y))
					}
				}
			}
		}
	}
}

// A region that covers the image decodes as Decode does, and fails where it fails: on every
// file of the corpus, truncated anywhere, its end marker included (the reader's DecodeBase
// relies on it).
func TestDecodeRegionOfTheWholeImageIsDecode(t *testing.T) {
	for name, data := range corpus(t) {
		cuts := []int{len(data), len(data) - 1, len(data) - 2} // whole, and the EOI marker cut
		for cut := len(data) - 3; cut > 0; cut -= max(1, len(data)/40) {
			cuts = append(cuts, cut)
		}
		for _, cut := range cuts {
			whole := image.Rect(0, 0, 1<<20, 1<<20)
			if cfg, err := stdjpeg.DecodeConfig(bytes.NewReader(data)); err == nil {
				whole = image.Rect(0, 0, cfg.Width, cfg.Height)
			}
			got, gotErr := DecodeRegion(bytes.NewReader(data[:cut]), whole)
			want, wantErr := Decode(bytes.NewReader(data[:cut]))
			if (gotErr == nil) != (wantErr == nil) || (gotErr != nil && gotErr.Error() != wantErr.Error()) {
				t.Fatalf("%s cut at %d: DecodeRegion of the whole image fails with %v, Decode with %v", name, cut, gotErr, wantErr)
			}
			if wantErr != nil {
				continue
			}
			// Only the pixels: the samples of blocks past the image's edge, which no pixel
			// reads, are not reconstructed.
			b := want.Bounds()
			if got.Bounds() != b {
				t.Fatalf("%s cut at %d: bounds %v, Decode gives %v", name, cut, got.Bounds(), b)
			}
			for y := b.Min.Y; y < b.Max.Y; y++ {
				for x := b.Min.X; x < b.Max.X; x++ {
					if got.At(x, y) != want.At(x, y) {
						t.Fatalf("%s cut at %d: pixel (%d, %d) is %v, Decode gives %v", name, cut, x, y, got.At(x, y), want.At(x, y))
					}
				}
			}
		}
	}
}

// Every entry of a table's fast look-up is what the look-up table and the slow path decode
// from the same bits (the code's value, then RECEIVE and EXTEND of its size, when its extra
// bits fit too), and every code that fits has its entries: on random tables, full and
// partial, with codes of every length up to 16 bits, and on overfull ones, which get none.
func TestFastLookUpIsTheSlowPath(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	for table := range 300 {
		var counts [maxCodeLength]int32
		left, total := int32(2), int32(0) // codes of the current length still free
		for i := range counts {
			c := rng.Int32N(min(left, 256-total) + 1)
			if table%10 == 0 && i == 7 {
				c = left + 1 + rng.Int32N(3) // overfull
			}
			counts[i], total = c, total+c
			left = (left - c) * 2
			if left < 0 {
				left = 0
			}
		}
		if total == 0 || total > maxNCodes {
			continue
		}
		seg := []byte{0x10} // Tc = 1 (AC), Th = 0
		for _, c := range counts {
			seg = append(seg, byte(c))
		}
		for range total {
			seg = append(seg, byte(rng.IntN(256)))
		}
		var d decoder
		d.r = bytes.NewReader(seg)
		if err := d.processDHT(len(seg)); err != nil {
			t.Fatalf("table %d: %v", table, err)
		}
		h := &d.huff[1][0]
		overfull := false
		code := int32(0)
		for i, c := range counts {
			if code += c; code > 1<<(i+1) {
				overfull = true
			}
			code <<= 1
		}
		for k := range int32(1) << fastBits {
			e := h.fast[k]
			if overfull {
				if e != 0 {
					t.Fatalf("table %d, overfull: fast entry %d is %#x", table, k, e)
				}
				continue
			}
			d.bits = bits{a: uint64(k)<<32 | uint64(rng.Uint32()), n: fastBits + 32}
			value, err := d.decodeHuffman(h)
			if err != nil {
				if e != 0 {
					t.Fatalf("table %d: fast entry %d is %#x, the slow path fails: %v", table, k, e, err)
				}
				continue
			}
			codeLen := fastBits + 32 - d.bits.n
			size := int32(value & 0x0f)
			ac, err := d.receiveExtend(value & 0x0f)
			if err != nil {
				t.Fatal(err)
			}
			want := int32(0)
			if codeLen <= fastBits {
				want = int32(value)<<9 | codeLen<<5 | codeLen
				if size != 0 && codeLen+size <= fastBits {
					want = ac<<17 | int32(value)<<9 | codeLen<<5 | (codeLen + size)
				}
			}
			if e != want {
				t.Fatalf("table %d: fast entry %d is %#x, the slow path gives %#x (code %d bits, value %#x)", table, k, e, want, codeLen, value)
			}
		}
	}
}

// The AVX2 reconstruction writes the pixels the Go one writes: random blocks and quantisation
// tables, small and extreme values, with zero rows and columns and without.
func TestReconstructAVX2IsGo(t *testing.T) {
	if !hasReconstructVec {
		t.Skip("no AVX2 reconstruction on this machine or build")
	}
	rng := rand.New(rand.NewPCG(17, 18))
	values := []func() int32{
		func() int32 { return int32(rng.IntN(64)) - 32 },
		func() int32 { return int32(rng.IntN(4096)) - 2048 },
		func() int32 { return int32(rng.Uint32()) },
	}
	const stride = 13
	for range 100000 {
		var d decoder
		d.nComp, d.comp[0].tq = 1, uint8(rng.IntN(maxTq+1))
		d.img1 = image.NewGray(image.Rect(0, 0, stride, 8))
		value := values[rng.IntN(len(values))]
		rows, cols := rng.Uint32(), rng.Uint32()
		var b block
		for i := range b {
			if i == 0 || (rows>>(i/8)&1 == 1 && cols>>(i%8)&1 == 1) {
				b[i] = value()
			}
			d.quant[d.comp[0].tq][i] = int32(rng.IntN(256)) + 1
		}
		d.deriveQuantNatural(d.comp[0].tq)
		in := b
		if err := d.reconstructBlock(&b, 0, 0, 0); err != nil {
			t.Fatal(err)
		}
		got := bytes.Clone(d.img1.Pix)
		hasReconstructVec = false
		err := d.reconstructBlock(&b, 0, 0, 0)
		hasReconstructVec = true
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, d.img1.Pix) {
			t.Fatalf("block %v: AVX2 writes %v, Go %v", in, got, d.img1.Pix)
		}
	}
}

package augment

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"io"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/dcl-beam/dcl-beam/internal/cputime"
	jpegdec "github.com/dcl-beam/dcl-beam/internal/jpeg"
	"github.com/dcl-beam/dcl-beam/transforms"
)

// rate reports n items per wall second and per CPU second of this process (the latter is what
// to quote on a shared machine, where wall time includes waiting for a core).
func rate(b *testing.B, n int, cpuStart time.Duration, unit string) {
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), unit+"/s")
	if cpu := cputime.Process() - cpuStart; cpu > 0 {
		b.ReportMetric(float64(n)/cpu.Seconds(), unit+"/cpu-s")
	}
}

func cpuPerOp(b *testing.B, cpuStart time.Duration) {
	if cpu := cputime.Process() - cpuStart; cpu > 0 {
		b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
	}
}

// BenchmarkSimCLRCIFARPair: two simclr-cifar views of a 32×32 image per iteration. Goal:
// ≥ 20,000 views/s on one core (-cpu 1).
func BenchmarkSimCLRCIFARPair(b *testing.B) {
	a, err := New(mustPreset(b, SimCLRCIFAR, 32))
	if err != nil {
		b.Fatal(err)
	}
	src := photoImage(32, 32, 3, 1)
	var dst transforms.Image
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("cifar10/data_batch_1.bin#%d", i)
	}
	i := 0
	cpu0 := cputime.Process()
	for b.Loop() {
		key := keys[i%len(keys)]
		for view := range 2 {
			if err := a.ViewInto(&dst, src, 1, key, 0, view); err != nil {
				b.Fatal(err)
			}
		}
		i++
	}
	rate(b, 2*i, cpu0, "views")
}

// photoJPEG encodes a photo-like h×w image (smooth shading, edges, fine texture and sensor
// noise) at the given quality; at 500×375, quality 93, texture 30 and noise 17 it is close to ImageNet's mean
// file size (~110 KB).
func photoJPEG(tb testing.TB, h, w, quality int, texture, noise float64, seed uint64) []byte {
	tb.Helper()
	r := rand.New(rand.NewPCG(seed, 3))
	m := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := range h {
		for x := range w {
			fx, fy := float64(x), float64(y)
			base := 120 + 60*math.Sin(fx/37+fy/53) + 30*math.Cos(fx*fy/9000)
			if (x/60+y/45)%3 == 0 { // objects with hard edges
				base -= 50
			}
			tex := texture * math.Sin(fx/2.3) * math.Cos(fy/3.1)
			n := r.NormFloat64() * noise
			c := func(o float64) uint8 { return uint8(max(0, min(255, base+o+tex+n))) }
			m.SetRGBA(x, y, color.RGBA{c(20 * math.Sin(fy/40)), c(-10), c(30 * math.Cos(fx/60)), 255})
		}
	}
	var buf bytes.Buffer
	if err := jpeg.Encode(&buf, m, &jpeg.Options{Quality: quality}); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

func decodeJPEG(tb testing.TB, data []byte) transforms.Image {
	m, err := jpegdec.Decode(bytes.NewReader(data))
	if err != nil {
		tb.Fatal(err)
	}
	return transforms.FromStd(m)
}

// BenchmarkImageNet: decode a ~110 KB 500×375 JPEG (internal/jpeg, the decoder the toolkit
// uses, + transforms.FromStd) and make
// two simclr-imagenet 224 views, per iteration. Goal: ≥ 150 images/s on one core. The
// sub-benchmarks split the time; "pipeline" reports the decode share.
func BenchmarkImageNet(b *testing.B) {
	h, w, size := 375, 500, 224
	if testing.Short() {
		h, w, size = 48, 64, 32
	}
	files := make([][]byte, 8)
	for i := range files {
		files[i] = photoJPEG(b, h, w, 93, 30, 17, uint64(i))
	}
	var total int
	for _, f := range files {
		total += len(f)
	}
	a, err := New(mustPreset(b, SimCLRImageNet, size))
	if err != nil {
		b.Fatal(err)
	}
	var dst transforms.Image
	b.Run("decode", func(b *testing.B) {
		i := 0
		cpu0 := cputime.Process()
		for b.Loop() {
			decodeJPEG(b, files[i%len(files)])
			i++
		}
		b.ReportMetric(float64(total)/float64(len(files))/1000, "KB/file")
		rate(b, i, cpu0, "images")
	})
	// The decode, split: the JPEG decoder alone (and image/jpeg's, which gives the same
	// image), then transforms.FromStd.
	ycc := make([]image.Image, len(files))
	for i, f := range files {
		m, err := jpeg.Decode(bytes.NewReader(f))
		if err != nil {
			b.Fatal(err)
		}
		ycc[i] = m
	}
	for _, d := range []struct {
		name   string
		decode func(io.Reader) (image.Image, error)
	}{{"jpeg-only", jpegdec.Decode}, {"image-jpeg-only", jpeg.Decode}} {
		b.Run(d.name, func(b *testing.B) {
			i := 0
			cpu0 := cputime.Process()
			for b.Loop() {
				if _, err := d.decode(bytes.NewReader(files[i%len(files)])); err != nil {
					b.Fatal(err)
				}
				i++
			}
			rate(b, i, cpu0, "images")
		})
	}
	b.Run("fromstd-only", func(b *testing.B) {
		i := 0
		cpu0 := cputime.Process()
		for b.Loop() {
			transforms.FromStd(ycc[i%len(files)])
			i++
		}
		rate(b, i, cpu0, "images")
	})
	decoded := make([]transforms.Image, len(files))
	for i, f := range files {
		decoded[i] = decodeJPEG(b, f)
	}
	b.Run("views", func(b *testing.B) {
		i := 0
		cpu0 := cputime.Process()
		for b.Loop() {
			for view := range 2 {
				if err := a.ViewInto(&dst, decoded[i%len(files)], 1, fmt.Sprint(i), 0, view); err != nil {
					b.Fatal(err)
				}
			}
			i++
		}
		rate(b, i, cpu0, "images")
	})
	b.Run("pipeline", func(b *testing.B) {
		var decoding time.Duration
		i := 0
		cpu0 := cputime.Process()
		for b.Loop() {
			t0 := time.Now()
			img := decodeJPEG(b, files[i%len(files)])
			decoding += time.Since(t0)
			for view := range 2 {
				if err := a.ViewInto(&dst, img, 1, fmt.Sprint(i), 0, view); err != nil {
					b.Fatal(err)
				}
			}
			i++
		}
		rate(b, i, cpu0, "images")
		b.ReportMetric(decoding.Seconds()/b.Elapsed().Seconds(), "decode-share")
	})
}

// BenchmarkSteps times single steps on a 224 view, to see where a view's time goes.
func BenchmarkSteps(b *testing.B) {
	h, w, size := 375, 500, 224
	if testing.Short() {
		h, w, size = 48, 64, 32
	}
	src := photoImage(h, w, 3, 1)
	a, _ := New(mustPreset(b, SimCLRImageNet, size))
	var dst transforms.Image
	crop := Plan{CropTop: h / 8, CropLeft: w / 8, CropH: h * 3 / 4, CropW: w * 3 / 4}
	steps := []struct {
		name string
		p    Plan
	}{
		{"crop-resize", crop},
		{"crop-resize-flip", func() Plan { p := crop; p.Flip = true; return p }()},
		{"upscale", Plan{CropTop: 10, CropLeft: 10, CropH: size / 2, CropW: size / 2}},
	}
	for _, s := range steps {
		b.Run(s.name, func(b *testing.B) {
			cpu0 := cputime.Process()
			for b.Loop() {
				if err := a.Apply(&dst, src, s.p); err != nil {
					b.Fatal(err)
				}
			}
			cpuPerOp(b, cpu0)
		})
	}
	view := photoImage(size, size, 3, 2)
	pix := make([]uint8, len(view.Pix))
	for _, s := range []struct {
		name string
		f    func()
	}{
		{"brightness", func() { brightness(pix, 1.3, &a.lut) }},
		{"contrast", func() { contrast(pix, 3, 1.3, &a.lut) }},
		{"saturation", func() { saturation(pix, 3, 1.3) }},
		{"hue", func() { hue(pix, 3, 0.13) }},
		{"grayscale", func() { grayscale(pix, 3) }},
		{"blur-sigma-1", func() { a.blur(pix, size, size, 3, a.blurKernel(a.cfg.BlurKernelSize(), 1)) }},
		{"blur-sigma-2", func() { a.blur(pix, size, size, 3, a.blurKernel(a.cfg.BlurKernelSize(), 2)) }},
	} {
		b.Run(s.name, func(b *testing.B) {
			cpu0 := cputime.Process()
			for b.Loop() {
				copy(pix, view.Pix)
				s.f()
			}
			cpuPerOp(b, cpu0)
		})
	}
}

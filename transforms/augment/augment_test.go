package augment

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/testing/fashionmnist"
	"github.com/dcl-beam/dcl-beam/transforms"
)

// Golden digests (first 8 bytes of SHA-256) of a few views per preset. Any change to the
// sampling, the seeding or the arithmetic changes them: if the change is intended, every
// shard ever written changes with it, so bump seedDomain's version and update these.
// They were checked identical on linux/amd64 with GOAMD64=v1 and v3 (v3 fuses multiply-adds),
// GOARCH=386, and linux/arm64 under qemu-aarch64-static (arm64 fuses too, and its math.Exp
// is different assembly).
func TestGoldenViews(t *testing.T) {
	tests := []struct {
		preset      string
		size        int
		h, w, c     int
		epoch, view int
		want        string
	}{
		{SimCLRCIFAR, 32, 32, 32, 3, 0, 0, "68f2a90910d48c07"},
		{SimCLRCIFAR, 32, 32, 32, 3, 0, 1, "6e87d970f03fe0e8"},
		{SimCLRCIFAR, 32, 32, 32, 3, 1, 0, "f0891cfea86cd191"},
		{SimCLRCIFAR, 28, 28, 28, 1, 0, 0, "a99115515686570b"},
		{SimCLRCIFAR, 96, 96, 96, 3, 3, 1, "5e547c82eb86a5a5"},
		{SimCLRImageNet, 224, 375, 500, 3, 0, 0, "5f59462dfee97483"},
		{SimCLRImageNet, 224, 375, 500, 3, 0, 1, "e3dc693e8c371e15"},
		{SimCLRImageNet, 64, 100, 80, 3, 2, 0, "422d36667702d93b"},
		{BYOL, 224, 333, 500, 3, 0, 0, "d55ccbb09cbc1a32"},
		{BYOL, 224, 333, 500, 3, 0, 1, "600d740ddc6dc586"},
		{BYOL, 96, 96, 96, 3, 5, 1, "d20d6c9b98227384"},
		{None, 224, 375, 500, 3, 0, 0, "addcb22d45d47455"},
		{None, 32, 32, 32, 3, 0, 0, "c648f06ad0273326"},
		{None, 28, 28, 28, 1, 0, 0, "de828b398f9281fc"},
	}
	for _, tt := range tests {
		a, err := New(mustPreset(t, tt.preset, tt.size))
		if err != nil {
			t.Fatal(err)
		}
		src := photoImage(tt.h, tt.w, tt.c, 11)
		got, err := a.View(src, 2022, "golden/key", tt.epoch, tt.view)
		if err != nil {
			t.Fatal(err)
		}
		if d := digest(got.Pix); d != tt.want {
			t.Errorf("%s size %d on %dx%dx%d epoch %d view %d: digest %s, golden %s",
				tt.preset, tt.size, tt.h, tt.w, tt.c, tt.epoch, tt.view, d, tt.want)
		}
	}
}

// Same inputs give the same bytes whatever the Augmenter did before; different seed, key,
// epoch or view give different views.
func TestViewsArePureFunctions(t *testing.T) {
	for _, name := range []string{SimCLRCIFAR, SimCLRImageNet, BYOL} {
		cfg := mustPreset(t, name, 48)
		src := photoImage(60, 70, 3, 1)
		fresh, err := View(cfg, src, 7, "k", 3, 1)
		if err != nil {
			t.Fatal(err)
		}
		a, _ := New(cfg)
		// Dirty the scratch buffers with other sizes first.
		for i, m := range []transforms.Image{photoImage(300, 200, 3, 2), photoImage(5, 9, 1, 3), photoImage(60, 70, 3, 4)} {
			if _, err := a.View(m, uint64(i), "other", 0, 0); err != nil {
				t.Fatal(err)
			}
		}
		dst := transforms.NewImage(1, 1, 1)
		if err := a.ViewInto(&dst, src, 7, "k", 3, 1); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(dst.Pix, fresh.Pix) || dst.H != 48 || dst.W != 48 || dst.C != 3 {
			t.Fatalf("%s: the reused Augmenter gave a different view", name)
		}
		seen := map[string]string{digest(fresh.Pix): "base"}
		for _, v := range []struct {
			what        string
			seed        uint64
			key         string
			epoch, view int
		}{{"seed", 8, "k", 3, 1}, {"key", 7, "k2", 3, 1}, {"epoch", 7, "k", 4, 1}, {"view", 7, "k", 3, 0}} {
			out, err := a.View(src, v.seed, v.key, v.epoch, v.view)
			if err != nil {
				t.Fatal(err)
			}
			d := digest(out.Pix)
			if prev, dup := seen[d]; dup {
				t.Errorf("%s: changing the %s gave the same view as %s", name, v.what, prev)
			}
			seen[d] = v.what
		}
	}
}

func TestFlipMirrors(t *testing.T) {
	a, _ := New(mustPreset(t, SimCLRCIFAR, 24))
	src := photoImage(40, 50, 3, 5)
	for _, box := range []Plan{{CropTop: 3, CropLeft: 7, CropH: 30, CropW: 33}, {CropH: 24, CropW: 24}, {CropTop: 1, CropLeft: 2, CropH: 5, CropW: 6}} {
		var plain, flipped transforms.Image
		if err := a.Apply(&plain, src, box); err != nil {
			t.Fatal(err)
		}
		box.Flip = true
		if err := a.Apply(&flipped, src, box); err != nil {
			t.Fatal(err)
		}
		for y := range 24 {
			for x := range 24 {
				for c := range 3 {
					if plain.Pix[(y*24+x)*3+c] != flipped.Pix[(y*24+23-x)*3+c] {
						t.Fatalf("box %+v: flipped view is not the mirror image at (%d,%d)", box, y, x)
					}
				}
			}
		}
	}
}

// The evaluation transform leaves an image of the output size unchanged and computes only
// the centre window of the full resize.
func TestEval(t *testing.T) {
	src := photoImage(32, 32, 3, 9)
	got, err := View(mustPreset(t, None, 32), src, 1, "k", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Pix, src.Pix) {
		t.Error("evaluation of a 32x32 image at size 32 changed it")
	}
	// Window of the full resize == the full resize, cropped.
	big := photoImage(375, 500, 3, 10)
	a, _ := New(mustPreset(t, None, 224))
	var eval transforms.Image
	if err := a.Apply(&eval, big, Plan{}); err != nil {
		t.Fatal(err)
	}
	full := make([]uint8, 256*341*3)
	(&Augmenter{}).resample(full, big.Pix, 500, 3, resizeJob{bh: 375, bw: 500, fullH: 256, fullW: 341, outH: 256, outW: 341})
	top, left := 16, 58 // round((256-224)/2), round((341-224)/2) = round(58.5), to even
	for y := range 224 {
		if !bytes.Equal(eval.Pix[y*224*3:(y+1)*224*3], full[((top+y)*341+left)*3:][:224*3]) {
			t.Fatalf("row %d of the evaluation view differs from the full resize, cropped", y)
		}
	}
	for _, p := range []Plan{{}, {Flip: true, Gray: true, CropH: 1, CropW: 1}} {
		var again transforms.Image
		if err := a.Apply(&again, big, p); err != nil || !bytes.Equal(again.Pix, eval.Pix) {
			t.Fatalf("evaluation depends on the plan %+v (err %v)", p, err)
		}
	}
}

// One-channel images stay one channel; saturation, hue and grayscale leave them unchanged.
func TestOneChannel(t *testing.T) {
	cfg := mustPreset(t, SimCLRCIFAR, 28)
	a, _ := New(cfg)
	src := photoImage(28, 28, 1, 3)
	base := Plan{CropTop: 2, CropLeft: 3, CropH: 20, CropW: 17}
	var want, got transforms.Image
	if err := a.Apply(&want, src, base); err != nil {
		t.Fatal(err)
	}
	p := base
	p.Jitter, p.Order, p.Brightness, p.Contrast, p.Saturation, p.Hue, p.Gray = true, [4]JitterOp{2, 3, 0, 1}, 1, 1, 0.2, 0.3, true
	if err := a.Apply(&got, src, p); err != nil {
		t.Fatal(err)
	}
	if got.C != 1 || !bytes.Equal(got.Pix, want.Pix) {
		t.Error("saturation, hue or grayscale changed a one-channel image")
	}
	p.Contrast = 0.5
	if err := a.Apply(&got, src, p); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(got.Pix, want.Pix) {
		t.Error("contrast did not change a one-channel image")
	}
}

func TestBadInput(t *testing.T) {
	a, _ := New(mustPreset(t, SimCLRCIFAR, 32))
	tests := []struct {
		name        string
		img         transforms.Image
		epoch, view int
		want        string
	}{
		{"short buffer", transforms.Image{Pix: make([]uint8, 10), H: 4, W: 4, C: 3}, 0, 0, "needs 48 bytes"},
		{"zero size", transforms.Image{H: 0, W: 4, C: 3}, 0, 0, "must be positive"},
		{"four channels", transforms.NewImage(4, 4, 4), 0, 0, "4 channels"},
		{"negative epoch", transforms.NewImage(4, 4, 3), -1, 0, "epoch -1"},
		{"negative view", transforms.NewImage(4, 4, 3), 0, -2, "view -2"},
	}
	for _, tt := range tests {
		_, err := a.View(tt.img, 1, "bad/key", tt.epoch, tt.view)
		if err == nil || !bytes.Contains([]byte(err.Error()), []byte(tt.want)) || !bytes.Contains([]byte(err.Error()), []byte("bad/key")) {
			t.Errorf("%s: error %v, want one naming the key and containing %q", tt.name, err, tt.want)
		}
	}
	var dst transforms.Image
	for _, p := range []Plan{{CropH: 5, CropW: 4}, {CropTop: -1, CropH: 2, CropW: 2}, {CropH: 0, CropW: 2}, {CropLeft: 3, CropH: 2, CropW: 2}} {
		if err := a.Apply(&dst, transforms.NewImage(4, 4, 3), p); err == nil {
			t.Errorf("plan %+v outside a 4x4 image accepted", p)
		}
	}
	if err := a.Apply(&dst, transforms.NewImage(4, 4, 3), Plan{CropH: 4, CropW: 4, Blur: true}); err == nil {
		t.Error("blur with sigma 0 accepted")
	}
}

// checkView runs one view and checks its shape; it is the body of the fuzz test.
func checkView(t *testing.T, cfg Config, h, w, c int, seed uint64, view int) {
	t.Helper()
	src := randomImage(h, w, c, rand.New(rand.NewPCG(seed, 0)))
	a, err := New(cfg)
	if err != nil {
		t.Fatalf("config %s: %v", cfg, err)
	}
	out, err := a.View(src, seed, "fuzz", int(seed%3), view)
	if err != nil {
		t.Fatalf("%dx%dx%d %s: %v", h, w, c, cfg, err)
	}
	if out.H != cfg.Size || out.W != cfg.Size || out.C != c || len(out.Pix) != cfg.Size*cfg.Size*c {
		t.Fatalf("%dx%dx%d %s: got %dx%dx%d with %d bytes", h, w, c, cfg, out.H, out.W, out.C, len(out.Pix))
	}
}

func TestTinyAndExtremeImages(t *testing.T) {
	for _, name := range Presets() {
		for _, size := range []int{1, 3, 32, 224} {
			cfg := mustPreset(t, name, size)
			cfg.BlurP, cfg.SolarizeP, cfg.JitterP, cfg.GrayP = PerView{1, 1}, PerView{1, 1}, 1, 1
			for _, hw := range [][2]int{{1, 1}, {1, 2}, {2, 1}, {1, 1000}, {1000, 1}, {3, 700}, {2, 2}} {
				for _, c := range []int{1, 3} {
					for seed := range uint64(3) {
						checkView(t, cfg, hw[0], hw[1], c, seed, int(seed%2))
					}
				}
			}
		}
	}
}

// FuzzView: random image sizes and configurations never panic and always give the requested
// size. The seed corpus runs as a unit test; `go test -fuzz FuzzView` explores further.
func FuzzView(f *testing.F) {
	f.Add(uint16(1), uint16(1), true, uint64(1), uint16(32), uint8(0), 0.08, 1.0, 0.75, 1.3333, uint8(0), 0.5)
	f.Add(uint16(375), uint16(500), true, uint64(2), uint16(224), uint8(1), 0.08, 1.0, 0.75, 1.3333, uint8(23), 2.0)
	f.Add(uint16(2), uint16(900), false, uint64(3), uint16(28), uint8(2), 0.5, 0.5, 0.01, 100.0, uint8(1), 0.1)
	f.Add(uint16(600), uint16(1), true, uint64(4), uint16(5), uint8(3), 1.0, 1.0, 5.0, 5.0, uint8(255), 50.0)
	f.Fuzz(func(t *testing.T, h, w uint16, rgb bool, seed uint64, size uint16, preset uint8,
		s0, s1, r0, r1 float64, kernel uint8, sigma float64) {
		h, w, size = h%700+1, w%700+1, size%300+1
		c := 1
		if rgb {
			c = 3
		}
		cfg := mustPreset(t, Presets()[int(preset)%len(Presets())], int(size))
		cfg.CropScale, cfg.CropRatio = [2]float64{s0, s1}, [2]float64{r0, r1}
		cfg.BlurKernel, cfg.BlurSigma = int(kernel)|1, [2]float64{sigma, sigma}
		cfg.BlurP, cfg.JitterP, cfg.SolarizeP = PerView{1, 1}, 1, PerView{0.5, 0.5}
		if cfg.Validate() != nil {
			return // invalid configurations are refused by New, tested in TestValidate
		}
		checkView(t, cfg, int(h), int(w), c, seed, int(seed%2))
	})
}

// Real data: Fashion-MNIST from Debian's dataset-fashion-mnist.
func TestFashionMNIST(t *testing.T) {
	const n = 200
	data := fashionmnist.Load(t, "test", n)
	a, _ := New(mustPreset(t, SimCLRCIFAR, 28))
	changed := 0
	for i := range n {
		img := transforms.Image{Pix: data.Image(i), H: 28, W: 28, C: 1}
		key := fmt.Sprintf("fashion-mnist/t10k/%d", i)
		v0, err := a.View(img, 1, key, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		v1, _ := a.View(img, 1, key, 0, 1)
		again, _ := a.View(img, 1, key, 0, 0)
		if v0.C != 1 || v0.H != 28 || !bytes.Equal(v0.Pix, again.Pix) {
			t.Fatalf("%s: bad or non-deterministic view", key)
		}
		if !bytes.Equal(v0.Pix, v1.Pix) {
			changed++
		}
	}
	if changed < n*95/100 {
		t.Errorf("only %d of %d images have two different views", changed, n)
	}
}

// A reused Augmenter allocates nothing per view once its buffers have grown.
func TestViewIntoDoesNotAllocate(t *testing.T) {
	if testing.CoverMode() != "" {
		t.Skip("coverage instrumentation allocates")
	}
	for _, name := range []string{SimCLRCIFAR, SimCLRImageNet, BYOL, None} {
		a, _ := New(mustPreset(t, name, 32))
		src := photoImage(40, 50, 3, 1)
		var dst transforms.Image
		i := 0
		allocs := testing.AllocsPerRun(200, func() {
			if err := a.ViewInto(&dst, src, 1, "cifar10/data_batch_1.bin#12345", i, i%2); err != nil {
				t.Fatal(err)
			}
			i++
		})
		if allocs != 0 {
			t.Errorf("%s: %g allocations per view", name, allocs)
		}
	}
}

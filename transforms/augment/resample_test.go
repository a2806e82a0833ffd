package augment

import (
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/dcl-beam/dcl-beam/transforms"
)

type pillowReference struct {
	Pillow string `json:"pillow"`
	Cases  []struct {
		Kind                   string
		H, W, C                int
		Top, Left, CH, CW, Out int
		Resize                 int
		Flip                   bool
		Want                   string
	}
	LumaGrid string `json:"luma_grid"`
	Luma     string `json:"luma"`
}

func loadPillowReference(t *testing.T) pillowReference {
	t.Helper()
	b, err := os.ReadFile("testdata/pillow_reference.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref pillowReference
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatalf("testdata/pillow_reference.json: %v", err)
	}
	return ref
}

// The crops and resizes are byte-identical to Pillow's (what torchvision runs on PIL images);
// testdata/pillow_reference.py wrote the expected bytes with Pillow itself.
func TestResampleMatchesPillow(t *testing.T) {
	ref := loadPillowReference(t)
	if len(ref.Cases) == 0 {
		t.Fatal("no cases in testdata/pillow_reference.json")
	}
	for _, tc := range ref.Cases {
		want, err := hex.DecodeString(tc.Want)
		if err != nil {
			t.Fatal(err)
		}
		src := sourceImage(tc.H, tc.W, tc.C)
		cfg, _ := Preset(SimCLRCIFAR, tc.Out)
		plan := Plan{CropTop: tc.Top, CropLeft: tc.Left, CropH: tc.CH, CropW: tc.CW, Flip: tc.Flip}
		if tc.Kind == "eval" {
			cfg, _ = Preset(None, tc.Out)
			cfg.Resize = tc.Resize
		}
		a, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var got transforms.Image
		if err := a.Apply(&got, src, plan); err != nil {
			t.Fatal(err)
		}
		if string(got.Pix) != string(want) {
			diff := 0
			for i := range want {
				if got.Pix[i] != want[i] {
					diff++
				}
			}
			t.Errorf("%+v: %d of %d bytes differ from Pillow %s", tc, diff, len(want), ref.Pillow)
		}
	}
}

// Hand-computed Pillow bilinear: upscaling [0 100] to 4 samples and antialiased downscaling
// [0 100 200 250] to 2 samples (support 2, weights 3/7, 3/7, 1/7 and 1/7, 3/7, 3/7).
func TestResampleHandComputed(t *testing.T) {
	tests := []struct {
		give []uint8
		out  int
		want []uint8
	}{
		{give: []uint8{0, 100}, out: 4, want: []uint8{0, 25, 75, 100}},
		{give: []uint8{0, 100, 200, 250}, out: 2, want: []uint8{71, 207}},
		{give: []uint8{9, 9, 9, 9, 9}, out: 3, want: []uint8{9, 9, 9}},
		{give: []uint8{200}, out: 3, want: []uint8{200, 200, 200}},
	}
	for _, tt := range tests {
		a := &Augmenter{}
		got := make([]uint8, tt.out)
		a.resample(got, tt.give, len(tt.give), 1, resizeJob{bh: 1, bw: len(tt.give), fullH: 1, fullW: tt.out, outH: 1, outW: tt.out})
		if string(got) != string(tt.want) {
			t.Errorf("resize %v to %d = %v, want %v", tt.give, tt.out, got, tt.want)
		}
		// The same along the other axis.
		a.resample(got, tt.give, 1, 1, resizeJob{bh: len(tt.give), bw: 1, fullH: tt.out, fullW: 1, outH: tt.out, outW: 1})
		if string(got) != string(tt.want) {
			t.Errorf("vertical resize %v to %d = %v, want %v", tt.give, tt.out, got, tt.want)
		}
	}
}

func TestLumaMatchesPillow(t *testing.T) {
	ref := loadPillowReference(t)
	grid, _ := hex.DecodeString(ref.LumaGrid)
	want, _ := hex.DecodeString(ref.Luma)
	if len(grid) != 3*len(want) || len(want) == 0 {
		t.Fatalf("luma grid of %d bytes for %d values", len(grid), len(want))
	}
	for i := range want {
		if got := luma(grid[3*i], grid[3*i+1], grid[3*i+2]); got != want[i] {
			t.Errorf("luma%v = %d, Pillow says %d", grid[3*i:3*i+3], got, want[i])
		}
	}
}

// The AVX2 passes compute the Go loops' integers: random boxes, sizes up and down, flips, one
// and three channels, odd widths and boxes that end at the buffer's last byte, resampled
// with and without them, byte for byte.
func TestVectorResampleEqualsGoLoops(t *testing.T) {
	if !hasVectorLoops {
		t.Skip("this build or CPU has no AVX2 resampler")
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 400 {
		h, w, ch := 1+rng.IntN(90), 1+rng.IntN(90), []int{1, 3}[rng.IntN(2)]
		src := make([]uint8, h*w*ch)
		for j := range src {
			src[j] = uint8(rng.Uint32())
		}
		bh, bw := 1+rng.IntN(h), 1+rng.IntN(w)
		if i%4 == 0 { // the box reaches the end of src
			bh, bw = h-rng.IntN(h), w-rng.IntN(w)
		}
		j := resizeJob{top: h - bh, left: w - bw, bh: bh, bw: bw, fullH: 1 + rng.IntN(70), fullW: 1 + rng.IntN(70), flip: rng.IntN(2) == 0}
		if i%4 != 0 {
			j.top, j.left = rng.IntN(h-bh+1), rng.IntN(w-bw+1)
		}
		j.outH, j.outW = j.fullH, j.fullW
		got, want := make([]uint8, j.outH*j.outW*ch), make([]uint8, j.outH*j.outW*ch)
		(&Augmenter{}).resample(got, src, w, ch, j)
		hasVectorLoops = false
		(&Augmenter{}).resample(want, src, w, ch, j)
		hasVectorLoops = true
		if string(got) != string(want) {
			t.Fatalf("%dx%dx%d, %+v: the AVX2 passes differ from the Go loops", h, w, ch, j)
		}
	}
}

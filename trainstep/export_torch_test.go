package trainstep

import (
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/dcl-beam/dcl-beam/transforms"
	"github.com/dcl-beam/dcl-beam/transforms/datasets"
)

// torchPython returns a python3 that has torch, torchvision and numpy: $DCL_TORCH_PYTHON, or
// the first of python3 on PATH and Debian's /usr/bin/python3 (where `make deps` installs
// python3-torch) that imports them; "" if none does.
func torchPython() string {
	candidates := []string{"python3", "/usr/bin/python3"}
	if p := os.Getenv("DCL_TORCH_PYTHON"); p != "" {
		candidates = []string{p}
	}
	for _, p := range candidates {
		if exec.Command(p, "-c", "import torch, torchvision, numpy").Run() == nil {
			return p
		}
	}
	return ""
}

// TestExportMatchesPyTorch exports an encoder of every kind of model after two training steps
// (the batch-norm running averages have moved from 0 and 1), loads it in PyTorch as the
// module file written beside it says (strict=True, weights read by the test's own safetensors
// reader), and compares PyTorch's features with the encoder's (what dcl embed writes). It
// needs python3 with torch, torchvision and numpy (`make deps` installs Debian's) and skips
// without them.
func TestExportMatchesPyTorch(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a full-width ResNet-18 step")
	}
	python := torchPython()
	if python == "" {
		t.Skip("no python3 with torch, torchvision and numpy (make deps-torch installs Debian's python3-torch)")
	}
	tests := []struct {
		model            string
		width, channels  int
		size             int
		dataset          string
		torchvisionModel bool
	}{
		{ResNet18CIFAR, 64, 3, 32, datasets.Folder, true},
		{SmallCNN, 4, 1, 28, datasets.IDX, false},
		{MLP, 4, 1, 6, datasets.IDX, false},
	}
	for _, tt := range tests {
		t.Run(tt.model, func(t *testing.T) {
			ctx := context.Background()
			src, err := NewMemorySource(tt.dataset, syntheticPairs(3, 8, 2, tt.size, tt.size, tt.channels))
			if err != nil {
				t.Fatal(err)
			}
			cfg := testStepConfig(tt.model)
			cfg.Model.BaseWidth, cfg.Model.Channels = tt.width, tt.channels
			out := t.TempDir()
			run := testRunConfig(t, out)
			run.Epochs = 1 // two steps
			if _, err := Train(ctx, cfg, run, quietOptions(t, src)); err != nil {
				t.Fatal(err)
			}
			enc, err := LoadEncoder(ctx, newTestBackend(t), out)
			if err != nil {
				t.Fatal(err)
			}
			defer enc.Close()
			r := rand.New(rand.NewPCG(5, 6))
			const n = 4
			var images []transforms.Image
			var raw []byte
			for range n {
				img := transforms.NewImage(tt.size, tt.size, tt.channels)
				for i := range img.Pix {
					img.Pix[i] = uint8(r.IntN(256))
				}
				images = append(images, img)
				raw = append(raw, img.Pix...)
			}
			want, err := enc.Embed(images, Backbone)
			if err != nil {
				t.Fatal(err)
			}
			wantProj, err := enc.Embed(images, Projection)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			model, imagesPath, featsPath := filepath.Join(dir, "encoder.safetensors"), filepath.Join(dir, "images.u8"), filepath.Join(dir, "features.f32")
			exp, err := SaveTorch(ctx, out, model, true)
			if err != nil {
				t.Fatal(err)
			}
			if (exp.Info.Torchvision != "") != tt.torchvisionModel {
				t.Errorf("torchvision model %q", exp.Info.Torchvision)
			}
			if err := os.WriteFile(imagesPath, raw, 0o644); err != nil {
				t.Fatal(err)
			}
			script, err := filepath.Abs(filepath.Join("testdata", "torch_features.py"))
			if err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(python, script, model, imagesPath, "4", featsPath)
			if msg, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("PyTorch: %v\n%s", err, msg)
			}
			data, err := os.ReadFile(featsPath)
			if err != nil {
				t.Fatal(err)
			}
			dim, pdim := len(want[0]), len(wantProj[0])
			if len(data) != 4*n*(dim+pdim) {
				t.Fatalf("PyTorch wrote %d bytes, want %d×(%d+%d) float32", len(data), n, dim, pdim)
			}
			for part, w := range map[string][][]float32{"feature": want, "projection": wantProj} {
				d := len(w[0])
				base := 0
				if part == "projection" {
					base = n * dim
				}
				for i := range n {
					for j := range d {
						got := math.Float32frombits(binary.LittleEndian.Uint32(data[4*(base+i*d+j):]))
						if diff := math.Abs(float64(got - w[i][j])); diff > 1e-4*(1+math.Abs(float64(w[i][j]))) {
							t.Fatalf("image %d %s %d: PyTorch %v, dcl %v", i, part, j, got, w[i][j])
						}
					}
				}
			}
		})
	}
}

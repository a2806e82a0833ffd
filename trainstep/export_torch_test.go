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

// TestExportMatchesPyTorch loads an export of a trained resnet18-cifar into torchvision with
// strict=True, as the README's snippet does, and compares its features with the encoder's
// (what dcl embed writes). It needs python3 with torch, torchvision and safetensors, and
// skips without them.
func TestExportMatchesPyTorch(t *testing.T) {
	if testing.Short() {
		t.Skip("trains a full-width ResNet-18 step")
	}
	if err := exec.Command("python3", "-c", "import torch, torchvision, safetensors.torch, numpy").Run(); err != nil {
		t.Skip("python3 with torch, torchvision, safetensors and numpy is not available")
	}
	ctx := context.Background()
	src, err := NewMemorySource(datasets.Folder, syntheticPairs(3, 8, 2, 32, 32, 3))
	if err != nil {
		t.Fatal(err)
	}
	cfg := testStepConfig(ResNet18CIFAR)
	cfg.Model.BaseWidth, cfg.Model.Channels = 64, 3
	out := t.TempDir()
	run := testRunConfig(t, out)
	run.Epochs = 1 // two steps: the batch-norm running averages move away from 0 and 1
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
		img := transforms.NewImage(32, 32, 3)
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
	dir := t.TempDir()
	model, imagesPath, featsPath := filepath.Join(dir, "encoder.safetensors"), filepath.Join(dir, "images.u8"), filepath.Join(dir, "features.f32")
	if _, err := SaveTorch(ctx, out, model, false); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(imagesPath, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("python3", filepath.Join("testdata", "torch_features.py"), model, imagesPath, "4", featsPath)
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("PyTorch: %v\n%s", err, msg)
	}
	data, err := os.ReadFile(featsPath)
	if err != nil {
		t.Fatal(err)
	}
	dim := len(want[0])
	if len(data) != 4*n*dim {
		t.Fatalf("PyTorch wrote %d bytes of features, want %d×%d float32", len(data), n, dim)
	}
	for i := range n {
		for j := range dim {
			got := math.Float32frombits(binary.LittleEndian.Uint32(data[4*(i*dim+j):]))
			if d := math.Abs(float64(got - want[i][j])); d > 1e-4*(1+math.Abs(float64(want[i][j]))) {
				t.Fatalf("image %d feature %d: PyTorch %v, dcl %v", i, j, got, want[i][j])
			}
		}
	}
}

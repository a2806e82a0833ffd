package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/safetensors"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/trainstep"
)

// exportFixture is a small resnet18-cifar checkpoint (base width 1, 8×8 RGB).
var exportFixture = filepath.Join("..", "..", "trainstep", "testdata", "gomlx-v0.26-resnet18-cifar.dclckpt")

// TestExportCommand: the file follows the safetensors specification and holds what
// trainstep.ExportTorch maps, and the sidecar describes the input.
func TestExportCommand(t *testing.T) {
	output := filepath.Join(t.TempDir(), "encoder.safetensors")
	code, stdout, stderr := runDCL("export", "--checkpoint", exportFixture, "--output", output, "--projector")
	if code != exitOK {
		t.Fatalf("dcl export = %d\n%s\n%s", code, stdout, stderr)
	}
	var res trainstep.TorchExport
	if err := json.Unmarshal([]byte(stdout), &res); err != nil || res.Output != output {
		t.Fatalf("dcl export printed %q (%v)", stdout, err)
	}
	data, err := os.ReadFile(output)
	if err != nil {
		t.Fatal(err)
	}
	got, meta, err := safetensors.Decode(data)
	if err != nil {
		t.Fatalf("%s: %v", output, err)
	}
	if meta["format"] != "pt" || meta["torchvision_model"] != "resnet18" {
		t.Errorf("metadata %v", meta)
	}
	want, _, err := trainstep.ExportTorch(context.Background(), exportFixture, true)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]safetensors.Tensor{}
	for _, x := range got {
		byName[x.Name] = x
	}
	if len(got) != len(want) || len(got) != res.Tensors {
		t.Errorf("file holds %d tensors, the export %d, the result says %d", len(got), len(want), res.Tensors)
	}
	for _, w := range want {
		g, ok := byName[w.Name]
		if !ok || g.DType != w.DType || !slices.Equal(g.Shape, w.Shape) || string(g.Data) != string(w.Data) {
			t.Errorf("%s differs in the file", w.Name)
		}
	}
	if x := byName["conv1.weight"]; !slices.Equal(x.Shape, []int{1, 3, 3, 3}) {
		t.Errorf("conv1.weight has shape %v, want OIHW [1 3 3 3]", x.Shape)
	}
	var info trainstep.TorchInfo
	if err := storage.LoadJSON(context.Background(), trainstep.TorchSidecarPath(output), &info); err != nil {
		t.Fatal(err)
	}
	if info.Model != trainstep.ResNet18CIFAR || info.InputSize != [2]int{8, 8} || info.Channels != 3 || info.FeatureDim != 8 ||
		len(info.Mean) != 3 || info.Std[0] != 0.229 || !info.Projector || info.ProjectionDim != 4 || info.Module != "encoder.py" {
		t.Errorf("sidecar %+v", info)
	}
	if module, err := os.ReadFile(trainstep.TorchModulePath(output)); err != nil || !strings.Contains(string(module), "def build():") {
		t.Errorf("module file: %v\n%s", err, module)
	}
}

func TestExportCommandRejects(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name string
		give []string
		code int
		want string
	}{
		{"no output", []string{"--checkpoint", exportFixture}, exitUsage, "required"},
		{"wrong extension", []string{"--checkpoint", exportFixture, "--output", filepath.Join(dir, "x.pt")}, exitUsage, ".safetensors"},
		{"missing checkpoint", []string{"--checkpoint", filepath.Join(dir, "none.dclckpt"), "--output", filepath.Join(dir, "x.safetensors")}, exitError, "none.dclckpt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runDCL(append([]string{"export"}, tt.give...)...)
			if code != tt.code || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, stderr %q: want %d and %q", code, stderr, tt.code, tt.want)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "x.safetensors")); err == nil {
		t.Error("a failed export left a file")
	}
}

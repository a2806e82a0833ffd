package trainstep

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/safetensors"
)

// torchvisionResNetKeys lists torchvision's resnet18 or resnet50 state-dict keys without fc,
// written from torchvision's module tree (models/resnet.py).
func torchvisionResNetKeys(bottleneck bool) []string {
	bn := func(p string) []string {
		return []string{p + ".weight", p + ".bias", p + ".running_mean", p + ".running_var", p + ".num_batches_tracked"}
	}
	keys := append([]string{"conv1.weight"}, bn("bn1")...)
	blocks, convs := []int{2, 2, 2, 2}, 2
	if bottleneck {
		blocks, convs = []int{3, 4, 6, 3}, 3
	}
	for l, n := range blocks {
		for b := range n {
			p := fmt.Sprintf("layer%d.%d.", l+1, b)
			for c := 1; c <= convs; c++ {
				keys = append(keys, fmt.Sprintf("%sconv%d.weight", p, c))
				keys = append(keys, bn(fmt.Sprintf("%sbn%d", p, c))...)
			}
			// Block 0 changes the shape in every stage but resnet18's first.
			if b == 0 && (l > 0 || bottleneck) {
				keys = append(keys, p+"downsample.0.weight")
				keys = append(keys, bn(p+"downsample.1")...)
			}
		}
	}
	slices.Sort(keys)
	return keys
}

func resnet50Checkpoint(t *testing.T, name string, size int) string {
	t.Helper()
	cfg := testStepConfig(name)
	cfg.Model.BaseWidth, cfg.Model.Channels = 1, 3
	s, err := NewStep(newTestBackend(t), cfg, size, size)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Finalize()
	path := filepath.Join(t.TempDir(), CheckpointName(5))
	if err := SaveCheckpoint(context.Background(), path, s, nil, TrainState{StepsDone: 5, ImageHeight: size, ImageWidth: size}); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestExportTorchNames: the names are torchvision's, each once, and the values are the
// checkpoint's in PyTorch's layouts (OIHW kernels, [out, in] dense weights).
func TestExportTorchNames(t *testing.T) {
	tests := []struct {
		name       string
		checkpoint func(t *testing.T) string
		bottleneck bool
	}{
		{ResNet18CIFAR, func(*testing.T) string { return filepath.Join("testdata", "gomlx-v0.26-resnet18-cifar.dclckpt") }, false},
		{ResNet50CIFAR, func(t *testing.T) string { return resnet50Checkpoint(t, ResNet50CIFAR, 32) }, true},
		{ResNet50, func(t *testing.T) string { return resnet50Checkpoint(t, ResNet50, 64) }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := tt.checkpoint(t)
			for _, projector := range []bool{false, true} {
				got, info, err := ExportTorch(context.Background(), path, projector)
				if err != nil {
					t.Fatal(err)
				}
				want := torchvisionResNetKeys(tt.bottleneck)
				if projector {
					want = append(want, "projector.0.weight", "projector.1.weight", "projector.1.bias", "projector.1.running_mean",
						"projector.1.running_var", "projector.1.num_batches_tracked", "projector.3.weight", "projector.3.bias")
					slices.Sort(want)
				}
				var names []string
				for _, x := range got {
					names = append(names, x.Name)
				}
				slices.Sort(names)
				if !slices.Equal(names, want) {
					t.Errorf("projector %v: names\n%v\nwant\n%v", projector, names, want)
				}
				if info.Model != tt.name || info.FeatureDim == 0 || len(info.Mean) != 3 || info.Projector != projector {
					t.Errorf("info %+v", info)
				}
				checkTorchValues(t, path, got)
			}
		})
	}
}

// checkTorchValues compares each exported tensor with its checkpoint variable, element by
// element through the index maps (not the export's loops).
func checkTorchValues(t *testing.T, path string, got []safetensors.Tensor) {
	t.Helper()
	raw := variableBytes(t, path)
	vars := map[string][]float32{}
	for k, b := range raw {
		v := make([]float32, len(b)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		vars[k] = v
	}
	ckpt, err := ReadCheckpoint(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	dims := map[string][]int{}
	for _, e := range ckpt.Header.Variables {
		dims[e.Scope+"/"+e.Name] = e.Dims
	}
	checked := 0
	for _, x := range got {
		if x.DType == safetensors.I64 {
			if binary.LittleEndian.Uint64(x.Data) != uint64(ckpt.Header.State.StepsDone) {
				t.Errorf("%s = %d, want the steps done", x.Name, binary.LittleEndian.Uint64(x.Data))
			}
			continue
		}
		src := exportSource(x.Name)
		v, ok := vars[src]
		if !ok {
			t.Errorf("%s: no checkpoint variable %s", x.Name, src)
			continue
		}
		vals, _ := x.Float32s()
		d := dims[src]
		at := func(idx ...int) float32 { // row-major index into the checkpoint variable
			off := 0
			for i, n := range d {
				off = off*n + idx[i]
			}
			return v[off]
		}
		for flat, val := range vals {
			var want float32
			switch len(d) {
			case 4: // torch [o, i, y, x] = ours [y, x, i, o]
				o, i, y, xx := flat/(x.Shape[1]*x.Shape[2]*x.Shape[3]), flat/(x.Shape[2]*x.Shape[3])%x.Shape[1], flat/x.Shape[3]%x.Shape[2], flat%x.Shape[3]
				want = at(y, xx, i, o)
			case 2: // torch [o, i] = ours [i, o]
				want = at(flat%x.Shape[1], flat/x.Shape[1])
			default:
				want = at(flat)
			}
			if val != want {
				t.Fatalf("%s[%d] = %v, want %v (from %s)", x.Name, flat, val, want, src)
			}
		}
		checked++
	}
	if checked == 0 {
		t.Error("no tensor checked")
	}
}

// exportSource is the inverse of the name mapping, spelled out for the test.
func exportSource(torch string) string {
	r := strings.NewReplacer(
		".running_mean", "/running_mean", ".running_var", "/running_var",
		"downsample.0.weight", "shortcut_conv/weights", "downsample.1.weight", "shortcut_bn/scale", "downsample.1.bias", "shortcut_bn/offset")
	s := strings.ReplaceAll(r.Replace(torch), "downsample.1/", "shortcut_bn/")
	if strings.HasPrefix(s, "projector.") {
		s = strings.NewReplacer("projector.0.weight", "fc1/weights", "projector.1.weight", "bn1/scale", "projector.1.bias", "bn1/offset",
			"projector.1/", "bn1/", "projector.3.weight", "fc2/weights", "projector.3.bias", "fc2/bias").Replace(s)
		return "/model/projector/" + s
	}
	s = strings.NewReplacer("conv1.weight", "conv1/weights", "conv2.weight", "conv2/weights", "conv3.weight", "conv3/weights").Replace(s)
	for _, k := range []string{"bn1", "bn2", "bn3"} {
		s = strings.NewReplacer(k+".weight", k+"/scale", k+".bias", k+"/offset", k+"/", k+"/").Replace(s)
	}
	if strings.HasPrefix(s, "conv1/") {
		s = "stem/conv/" + strings.TrimPrefix(s, "conv1/")
	} else if strings.HasPrefix(s, "bn1/") {
		s = "stem/bn/" + strings.TrimPrefix(s, "bn1/")
	} else {
		// layerN.B.rest → layerN/blockB/rest
		parts := strings.SplitN(s, ".", 3)
		s = parts[0] + "/block" + parts[1] + "/" + parts[2]
	}
	return "/model/backbone/" + s
}

// TestExportTorchRejects: every model has a PyTorch counterpart, and paths that are not
// variables of one get no name.
func TestExportTorchRejects(t *testing.T) {
	for _, name := range ModelNames() {
		if _, ok := torchArchs[name]; !ok {
			t.Errorf("model %s has no PyTorch counterpart: export would refuse it", name)
		}
	}
	for _, rel := range []string{"weights", "layer1/conv/kernel"} {
		if name, ok := torchModuleName(rel); ok {
			t.Errorf("%s maps to %s in a module: want no name", rel, name)
		}
	}
	for _, rel := range []string{"stem/extra/weights", "layer1/block0/conv1/bias", "layer5/block0/conv1/weights", "head/weights"} {
		if name, ok := torchBackboneName(rel); ok {
			t.Errorf("%s maps to %s: want no name", rel, name)
		}
	}
}

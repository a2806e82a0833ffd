package trainstep

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/gomlx/ml/model"

	"github.com/dcl-beam/dcl-beam/internal/safetensors"
	"github.com/dcl-beam/dcl-beam/internal/storage"
)

// TorchInfo describes an exported encoder for whoever loads it in PyTorch: which torchvision
// model to build, how to change its stem, and how to prepare its input. It is the JSON sidecar
// `dcl export` writes beside the weights.
type TorchInfo struct {
	// Model is this toolkit's model name; Torchvision the torchvision constructor whose
	// state-dict names the weights carry.
	Model       string `json:"model"`
	Torchvision string `json:"torchvision_model"`
	// Stem says how conv1 and maxpool differ from torchvision's ImageNet stem.
	Stem string `json:"stem"`
	// InputSize is the [height, width] the encoder was trained on.
	InputSize [2]int `json:"input_size"`
	Channels  int    `json:"channels"`
	// BaseWidth is the first stage's channel count; torchvision's models have 64.
	BaseWidth int `json:"base_width"`
	// Mean and Std normalise each channel of pixels scaled to [0, 1]: x = (p/255 - mean) / std.
	Mean          []float64 `json:"mean"`
	Std           []float64 `json:"std"`
	Layout        string    `json:"layout"`
	FeatureDim    int       `json:"feature_dim"`
	Projector     bool      `json:"projector"`
	ProjectionDim int       `json:"projection_dim,omitempty"`
	Checkpoint    string    `json:"checkpoint"`
	StepsDone     int       `json:"steps_done"`
}

// torchArch is what an exportable model corresponds to in torchvision.
type torchArch struct{ torchvision, stem string }

var torchArchs = map[string]torchArch{
	ResNet18CIFAR: {"resnet18", "conv1 = Conv2d(channels, base_width, 3, stride 1, padding 1, no bias); maxpool = Identity; fc = Identity"},
	ResNet50CIFAR: {"resnet50", "conv1 = Conv2d(channels, base_width, 3, stride 1, padding 1, no bias); maxpool = Identity; fc = Identity"},
	ResNet50:      {"resnet50", "torchvision's (7x7 stride-2 conv1, 3x3 stride-2 maxpool); fc = Identity"},
}

// ProjectorPrefix starts the names of the projector's tensors in an export, so that the
// backbone's load strictly into a torchvision model and the projector's into
// nn.Sequential(Linear(f, f, bias=False), BatchNorm1d(f), ReLU(), Linear(f, projection_dim)).
const ProjectorPrefix = "projector."

// ExportTorch returns the backbone of the checkpoint at path (a file or a run's folder), and
// with projector its projector, under torchvision's state-dict names, in PyTorch's layouts:
// convolution kernels OIHW, dense weights [out, in]. Every backbone variable must map to one
// name; an unmapped one is an error naming it.
func ExportTorch(ctx context.Context, path string, projector bool) ([]safetensors.Tensor, *TorchInfo, error) {
	path, err := ResolveCheckpoint(ctx, path)
	if err != nil {
		return nil, nil, err
	}
	ckpt, err := ReadCheckpoint(ctx, path)
	if err != nil {
		return nil, nil, err
	}
	h := ckpt.Header
	m, err := NewModel(h.Step.Model)
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint %s: %w", path, err)
	}
	cfg := m.Config()
	arch, ok := torchArchs[cfg.Name]
	if !ok {
		return nil, nil, fmt.Errorf("checkpoint %s holds a %s model, which has no torchvision counterpart: export takes %s",
			path, cfg.Name, strings.Join(slices.Sorted(maps.Keys(torchArchs)), ", "))
	}
	info := &TorchInfo{
		Model: cfg.Name, Torchvision: arch.torchvision, Stem: arch.stem,
		InputSize: [2]int{h.State.ImageHeight, h.State.ImageWidth}, Channels: cfg.Channels, BaseWidth: cfg.BaseWidth,
		Mean: cfg.Mean, Std: cfg.Std, Layout: "NCHW", FeatureDim: m.FeatureDim(), Projector: projector,
		Checkpoint: path, StepsDone: h.State.StepsDone,
	}
	if projector {
		info.ProjectionDim = cfg.ProjectionDim
	}
	backbonePrefix := model.RootScopePath + modelScope + model.ScopeSeparator + backboneScope + model.ScopeSeparator
	projectorPrefix := model.RootScopePath + modelScope + model.ScopeSeparator + projectorScope + model.ScopeSeparator
	var out []safetensors.Tensor
	seen := map[string]string{} // torch name → variable
	for _, e := range h.Variables {
		full := variablePath(e.Scope, e.Name)
		var name string
		var ok bool
		switch {
		case strings.HasPrefix(full, backbonePrefix):
			name, ok = torchBackboneName(strings.TrimPrefix(full, backbonePrefix))
		case projector && strings.HasPrefix(full, projectorPrefix):
			name, ok = torchProjectorName(strings.TrimPrefix(full, projectorPrefix))
		default:
			continue
		}
		if !ok {
			return nil, nil, fmt.Errorf("checkpoint %s: model variable %s has no torchvision name", path, full)
		}
		if other, dup := seen[name]; dup {
			return nil, nil, fmt.Errorf("checkpoint %s: variables %s and %s both map to %s", path, other, full, name)
		}
		seen[name] = full
		if e.DType != dtypes.Float32.String() {
			return nil, nil, fmt.Errorf("checkpoint %s: variable %s is %s, export takes float32", path, full, e.DType)
		}
		values := make([]float32, e.Bytes/4)
		for i := range values {
			values[i] = math.Float32frombits(binary.LittleEndian.Uint32(ckpt.data[e.Offset+4*int64(i):]))
		}
		shape, values := torchLayout(e.Name, e.Dims, values)
		out = append(out, safetensors.Float32(name, shape, values))
		if e.Name == bnMeanName {
			// PyTorch's batch norm counts its updates; one per step here.
			counter := strings.TrimSuffix(name, bnMeanName) + "num_batches_tracked"
			out = append(out, safetensors.Int64Scalar(counter, int64(h.State.StepsDone)))
		}
	}
	if len(out) == 0 {
		return nil, nil, fmt.Errorf("checkpoint %s holds no backbone variables", path)
	}
	return out, info, nil
}

// torchParams maps this package's variable names to PyTorch's parameter and buffer names.
var torchParams = map[string]string{
	weightsName: "weight", biasName: "bias", bnScaleName: "weight", bnOffsetName: "bias",
	bnMeanName: "running_mean", bnVarianceName: "running_var",
}

var blockLayer = regexp.MustCompile(`^layer([1-4])/block(\d+)/(conv[1-3]|bn[1-3]|shortcut_conv|shortcut_bn)/(\w+)$`)

// torchBackboneName maps a variable path below /model/backbone to torchvision's ResNet name.
func torchBackboneName(rel string) (string, bool) {
	var module, param string
	switch {
	case strings.HasPrefix(rel, "stem/conv/"):
		module, param = "conv1", strings.TrimPrefix(rel, "stem/conv/")
	case strings.HasPrefix(rel, "stem/bn/"):
		module, param = "bn1", strings.TrimPrefix(rel, "stem/bn/")
	default:
		m := blockLayer.FindStringSubmatch(rel)
		if m == nil {
			return "", false
		}
		layer := m[3]
		switch layer {
		case "shortcut_conv":
			layer = "downsample.0"
		case "shortcut_bn":
			layer = "downsample.1"
		}
		module, param = "layer"+m[1]+"."+m[2]+"."+layer, m[4]
	}
	p, ok := torchParams[param]
	if !ok || strings.Contains(module, "conv") && param != weightsName {
		return "", false
	}
	return module + "." + p, true
}

// torchProjector maps the projector's layers to the indices of the nn.Sequential above.
var torchProjector = map[string]string{"fc1": "0", "bn1": "1", "fc2": "3"}

func torchProjectorName(rel string) (string, bool) {
	layer, param, ok := strings.Cut(rel, "/")
	idx, okLayer := torchProjector[layer]
	p, okParam := torchParams[param]
	if !ok || !okLayer || !okParam {
		return "", false
	}
	return ProjectorPrefix + idx + "." + p, true
}

// torchLayout turns weights into PyTorch's layouts: HWIO convolution kernels into OIHW, [in,
// out] dense weights into [out, in]. Other variables are vectors and stay as they are.
func torchLayout(name string, dims []int, v []float32) ([]int, []float32) {
	if name != weightsName {
		return dims, v
	}
	switch len(dims) {
	case 4:
		kh, kw, in, out := dims[0], dims[1], dims[2], dims[3]
		t := make([]float32, len(v))
		for y := range kh {
			for x := range kw {
				for i := range in {
					for o := range out {
						t[((o*in+i)*kh+y)*kw+x] = v[((y*kw+x)*in+i)*out+o]
					}
				}
			}
		}
		return []int{out, in, kh, kw}, t
	case 2:
		in, out := dims[0], dims[1]
		t := make([]float32, len(v))
		for i := range in {
			for o := range out {
				t[o*in+i] = v[i*out+o]
			}
		}
		return []int{out, in}, t
	}
	return dims, v
}

// TorchExtension ends the name of an exported encoder; its sidecar has the same name ending in
// .json instead.
const TorchExtension = ".safetensors"

// TorchSidecarPath is the JSON description written beside an export at output.
func TorchSidecarPath(output string) string {
	return strings.TrimSuffix(output, TorchExtension) + ".json"
}

// TorchExport is what SaveTorch wrote.
type TorchExport struct {
	Output  string     `json:"output"`
	Sidecar string     `json:"sidecar"`
	Tensors int        `json:"tensors"`
	Bytes   int        `json:"bytes"`
	Info    *TorchInfo `json:"info"`
}

// SaveTorch writes ExportTorch's tensors to output (a .safetensors file, local or gs://) and
// their TorchInfo to TorchSidecarPath(output), each atomically.
func SaveTorch(ctx context.Context, checkpoint, output string, projector bool) (*TorchExport, error) {
	if !strings.HasSuffix(output, TorchExtension) {
		return nil, fmt.Errorf("export %s: the name must end in %s (the sidecar takes its name with .json)", output, TorchExtension)
	}
	tensors, info, err := ExportTorch(ctx, checkpoint, projector)
	if err != nil {
		return nil, err
	}
	data, err := safetensors.Encode(tensors, map[string]string{
		"format": "pt", "model": info.Model, "torchvision_model": info.Torchvision, "checkpoint": info.Checkpoint,
	})
	if err != nil {
		return nil, fmt.Errorf("export %s: %w", output, err)
	}
	if err := storage.WriteFile(ctx, output, data); err != nil {
		return nil, err
	}
	sidecar := TorchSidecarPath(output)
	if err := storage.SaveJSON(ctx, sidecar, info); err != nil {
		return nil, err
	}
	return &TorchExport{Output: output, Sidecar: sidecar, Tensors: len(tensors), Bytes: len(data), Info: info}, nil
}

package trainstep

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/gomlx/ml/model"

	"github.com/dcl-beam/dcl-beam/internal/safetensors"
	"github.com/dcl-beam/dcl-beam/internal/storage"
)

// TorchInfo describes an exported encoder for whoever loads it in PyTorch: which module to
// build (torchvision's, with its stem changed, or the one in the module file written beside
// the weights), and how to prepare its input. It is the JSON sidecar `dcl export` writes.
type TorchInfo struct {
	// Model is this toolkit's model name; Torchvision the torchvision constructor whose
	// state-dict names the weights carry, empty for a model torchvision lacks.
	Model       string `json:"model"`
	Torchvision string `json:"torchvision_model,omitempty"`
	// Stem says how conv1 and maxpool differ from torchvision's ImageNet stem.
	Stem string `json:"stem,omitempty"`
	// Module is the PyTorch module file written beside the weights (its name): build() in it
	// makes the backbone, whose state dict the weights fill with strict=True.
	Module string `json:"module"`
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

// torchArch is what a model is in PyTorch: a torchvision ResNet (torchvision and stem set),
// or a module of the module file's own (class set), whose state-dict names are the
// variables' paths below the backbone with "." for "/".
type torchArch struct {
	torchvision, stem string
	class             string
	// build is the body of the module file's build(): the expression that makes the backbone.
	build func(info *TorchInfo) string
}

const cifarStem = "conv1 = Conv2d(channels, base_width, 3, stride 1, padding 1, no bias); maxpool = Identity; fc = Identity"

func torchvisionBuild(info *TorchInfo) string {
	b := fmt.Sprintf("model = torchvision.models.%s()\n", info.Torchvision)
	if info.Stem == cifarStem {
		b += fmt.Sprintf("    model.conv1 = nn.Conv2d(%d, %d, 3, 1, 1, bias=False)\n    model.maxpool = nn.Identity()\n", info.Channels, info.BaseWidth)
	} else if info.Channels != 3 {
		b += fmt.Sprintf("    model.conv1 = nn.Conv2d(%d, %d, 7, 2, 3, bias=False)\n", info.Channels, info.BaseWidth)
	}
	return b + "    model.fc = nn.Identity()\n    return model"
}

var torchArchs = map[string]torchArch{
	ResNet18CIFAR: {torchvision: "resnet18", stem: cifarStem, build: torchvisionBuild},
	ResNet50CIFAR: {torchvision: "resnet50", stem: cifarStem, build: torchvisionBuild},
	ResNet50:      {torchvision: "resnet50", stem: "torchvision's (7x7 stride-2 conv1, 3x3 stride-2 maxpool); fc = Identity", build: torchvisionBuild},
	SmallCNN: {class: "SmallCNN", build: func(info *TorchInfo) string {
		return fmt.Sprintf("return SmallCNN(channels=%d, width=%d)", info.Channels, info.BaseWidth)
	}},
	MLP: {class: "MLP", build: func(info *TorchInfo) string {
		return fmt.Sprintf("return MLP(inputs=%d, width=%d)", info.Channels*info.InputSize[0]*info.InputSize[1], info.BaseWidth)
	}},
}

// torchModuleClasses are the PyTorch classes of the models torchvision lacks, as models.go
// builds them: same layers, same order, same padding, batch norm with bnEpsilon and
// bnMomentum, images NCHW.
const torchModuleClasses = `
def _conv_bn_relu(cin, cout, stride):
    return nn.Sequential(OrderedDict(
        conv=nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
        bn=nn.BatchNorm2d(cout, eps=%[1]g, momentum=%[2]g),
        relu=nn.ReLU()))


class SmallCNN(nn.Module):
    """dcl's small-cnn: four conv-BN-ReLU layers and a global average pool."""

    def __init__(self, channels=1, width=32):
        super().__init__()
        self.layer1 = _conv_bn_relu(channels, width, 1)
        self.layer2 = _conv_bn_relu(width, 2 * width, 2)
        self.layer3 = _conv_bn_relu(2 * width, 4 * width, 2)
        self.layer4 = _conv_bn_relu(4 * width, 4 * width, 1)

    def forward(self, x):
        return self.layer4(self.layer3(self.layer2(self.layer1(x)))).mean((2, 3))


class MLP(nn.Module):
    """dcl's mlp: two dense-BN-ReLU layers over the pixels flattened in HWC order."""

    def __init__(self, inputs, width=32):
        super().__init__()
        self.fc1 = nn.Linear(inputs, 4 * width, bias=False)
        self.bn1 = nn.BatchNorm1d(4 * width, eps=%[1]g, momentum=%[2]g)
        self.fc2 = nn.Linear(4 * width, 4 * width, bias=False)
        self.bn2 = nn.BatchNorm1d(4 * width, eps=%[1]g, momentum=%[2]g)

    def forward(self, x):
        x = x.permute(0, 2, 3, 1).flatten(1)
        return torch.relu(self.bn2(self.fc2(torch.relu(self.bn1(self.fc1(x))))))
`

// torchModuleFile is the module file: build() and a reader of the weights that needs no
// safetensors package (Debian has none).
const torchModuleFile = `r"""The encoder of model %[1]s, written by dcl export: build() makes its backbone
in PyTorch, whose state dict the weights beside this file fill with strict=True:

    import runpy
    m = runpy.run_path(%[2]s)
    model = m["build"]()
    model.load_state_dict(m["load_state_dict"](%[3]s), strict=True)
    model.eval()

Feed it NCHW images scaled to [0, 1] and normalised with the sidecar's mean and std: it
returns the backbone's features. An export with --projector also holds the projector, which
build_projector() makes and load_state_dict(path, "projector") fills.
"""
import hashlib
import json
import struct
from collections import OrderedDict

import torch
import torch.nn as nn
%[4]s%[5]s

def build():
    """The backbone, %[6]s."""
    %[7]s


def build_projector(features=%[8]d, projection=%[9]d):
    """The projector: Linear (no bias), BatchNorm1d, ReLU, Linear."""
    return nn.Sequential(
        nn.Linear(features, features, bias=False),
        nn.BatchNorm1d(features, eps=%[10]g, momentum=%[11]g),
        nn.ReLU(),
        nn.Linear(features, projection))


_DTYPES = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64}
_PROJECTOR = %[12]s
_CHECKSUM = %[13]s


def load_state_dict(path, part="backbone"):
    """The state dict of the backbone, or of the projector (part="projector"), from a
    safetensors file, without the safetensors package: an 8-byte header length, a JSON
    header, the raw data, whose SHA-256 the header's metadata holds."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    want = header.get("__metadata__", {}).get(_CHECKSUM)
    if want is None:
        raise ValueError(f"{path}: no {_CHECKSUM} in the metadata: not a file dcl export wrote")
    if hashlib.sha256(data).hexdigest() != want:
        raise ValueError(f"{path}: the tensor data do not match their SHA-256 in the metadata: the file is damaged")
    out = OrderedDict()
    for name, e in header.items():
        if name == "__metadata__" or name.startswith(_PROJECTOR) != (part == "projector"):
            continue
        begin, end = e["data_offsets"]
        t = torch.frombuffer(bytearray(data[begin:end]), dtype=_DTYPES[e["dtype"]])
        out[name.removeprefix(_PROJECTOR)] = t.reshape(e["shape"]).clone()
    return out
`

// ProjectorPrefix starts the names of the projector's tensors in an export, so that the
// backbone's load strictly into the backbone module and the projector's into
// nn.Sequential(Linear(f, f, bias=False), BatchNorm1d(f), ReLU(), Linear(f, projection_dim)).
const ProjectorPrefix = "projector."

// ExportTorch returns the backbone of the checkpoint at path (a file or a run's folder), and
// with projector its projector, under PyTorch's state-dict names (torchvision's for the
// ResNets), in PyTorch's layouts: convolution kernels OIHW, dense weights [out, in]. Every
// backbone variable must map to one name; an unmapped one is an error naming it.
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
		return nil, nil, fmt.Errorf("checkpoint %s holds a %s model, which export does not know: it takes %s",
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
	backboneName := torchBackboneName
	if arch.torchvision == "" {
		backboneName = torchModuleName
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
			name, ok = backboneName(strings.TrimPrefix(full, backbonePrefix))
		case projector && strings.HasPrefix(full, projectorPrefix):
			name, ok = torchProjectorName(strings.TrimPrefix(full, projectorPrefix))
		default:
			continue
		}
		if !ok {
			return nil, nil, fmt.Errorf("checkpoint %s: model variable %s has no PyTorch name", path, full)
		}
		if other, dup := seen[name]; dup {
			return nil, nil, fmt.Errorf("checkpoint %s: variables %s and %s both map to %s", path, other, full, name)
		}
		seen[name] = full
		if e.DType != dtypes.Float32.String() {
			return nil, nil, fmt.Errorf("checkpoint %s: variable %s is %s, export takes float32", path, full, e.DType)
		}
		raw := ckpt.raw(e)
		values := make([]float32, len(raw)/4)
		for i := range values {
			values[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
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

// torchModule returns the module file for an export named weights (the base name of the
// .safetensors file) and the file's own base name.
func torchModule(info *TorchInfo, weights, module string) string {
	arch := torchArchs[info.Model]
	imports, classes, what := "", "", info.Model
	if arch.torchvision != "" {
		imports = "import torchvision\n"
		what = fmt.Sprintf("torchvision's %s (%s)", arch.torchvision, arch.stem)
	} else {
		classes = fmt.Sprintf(torchModuleClasses, bnEpsilon, bnMomentum)
	}
	return fmt.Sprintf(torchModuleFile, pyString(info.Model), pyString(module), pyString(weights), imports, classes, what, arch.build(info),
		info.FeatureDim, max(info.ProjectionDim, DefaultProjectionDim), bnEpsilon, bnMomentum, pyString(ProjectorPrefix), pyString(TorchChecksumKey))
}

// pyString is the one way a string reaches generated Python: a double-quoted literal of
// printable ASCII in which nothing but its own quotes is a quote and no backslash is taken
// for anything but the start of an escape, so that it is the same string in plain code and
// in a raw docstring, and no name can end either. Bytes that are not UTF-8 become the lone
// surrogates Python's file functions turn back into those bytes (surrogateescape).
func pyString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, "\\udc%02x", s[0])
		case r >= 0x20 && r < 0x7f && r != '"' && r != '\\':
			b.WriteRune(r)
		case r < 0x100:
			fmt.Fprintf(&b, "\\x%02x", r)
		case r < 0x10000:
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			fmt.Fprintf(&b, "\\U%08x", r)
		}
		s = s[size:]
	}
	b.WriteByte('"')
	return b.String()
}

// torchParams maps this package's variable names to PyTorch's parameter and buffer names.
var torchParams = map[string]string{
	weightsName: "weight", biasName: "bias", bnScaleName: "weight", bnOffsetName: "bias",
	bnMeanName: "running_mean", bnVarianceName: "running_var",
}

var blockLayer = regexp.MustCompile(`^layer([1-4])/block(\d+)/(conv[1-3]|bn[1-3]|shortcut_conv|shortcut_bn)/(\w+)$`)

// torchModuleName maps a variable path below /model/backbone to the name in a module of the
// module file: the path with "." for "/", and PyTorch's parameter name.
func torchModuleName(rel string) (string, bool) {
	i := strings.LastIndex(rel, "/")
	if i < 0 {
		return "", false
	}
	p, ok := torchParams[rel[i+1:]]
	if !ok {
		return "", false
	}
	return strings.ReplaceAll(rel[:i], "/", ".") + "." + p, true
}

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

// TorchChecksumKey names the metadata entry of an export that holds the SHA-256 of its
// tensor data (what follows the header), which the module file's reader checks.
const TorchChecksumKey = "dcl_data_sha256"

// dataSHA256 is the SHA-256, in hexadecimal, of a safetensors file's data.
func dataSHA256(file []byte) string {
	n := binary.LittleEndian.Uint64(file[:8])
	sum := sha256.Sum256(file[8+n:])
	return hex.EncodeToString(sum[:])
}

// TorchExtension ends the name of an exported encoder; its sidecar has the same name ending in
// .json instead, its module file .py.
const TorchExtension = ".safetensors"

// TorchSidecarPath is the JSON description written beside an export at output.
func TorchSidecarPath(output string) string {
	return strings.TrimSuffix(output, TorchExtension) + ".json"
}

// TorchModulePath is the PyTorch module file written beside an export at output.
func TorchModulePath(output string) string {
	return strings.TrimSuffix(output, TorchExtension) + ".py"
}

// TorchExport is what SaveTorch wrote.
type TorchExport struct {
	Output  string     `json:"output"`
	Sidecar string     `json:"sidecar"`
	Module  string     `json:"module"`
	Tensors int        `json:"tensors"`
	Bytes   int        `json:"bytes"`
	Info    *TorchInfo `json:"info"`
}

// SaveTorch writes ExportTorch's tensors to output (a .safetensors file, local or gs://), the
// module file to TorchModulePath(output) and their TorchInfo to TorchSidecarPath(output),
// each atomically.
func SaveTorch(ctx context.Context, checkpoint, output string, projector bool) (*TorchExport, error) {
	if !strings.HasSuffix(output, TorchExtension) {
		return nil, fmt.Errorf("export %s: the name must end in %s (the sidecar takes its name with .json)", output, TorchExtension)
	}
	tensors, info, err := ExportTorch(ctx, checkpoint, projector)
	if err != nil {
		return nil, err
	}
	meta := map[string]string{"format": "pt", "model": info.Model, "checkpoint": info.Checkpoint}
	if info.Torchvision != "" {
		meta["torchvision_model"] = info.Torchvision
	}
	data, err := safetensors.Encode(tensors, meta)
	if err != nil {
		return nil, fmt.Errorf("export %s: %w", output, err)
	}
	// The data's checksum goes in the header, which moves the data but leaves it as it is.
	meta[TorchChecksumKey] = dataSHA256(data)
	if data, err = safetensors.Encode(tensors, meta); err != nil {
		return nil, fmt.Errorf("export %s: %w", output, err)
	}
	module := TorchModulePath(output)
	info.Module = storage.Base(module)
	if err := storage.WriteFile(ctx, output, data); err != nil {
		return nil, err
	}
	if err := storage.WriteFile(ctx, module, []byte(torchModule(info, storage.Base(output), info.Module))); err != nil {
		return nil, err
	}
	sidecar := TorchSidecarPath(output)
	if err := storage.SaveJSON(ctx, sidecar, info); err != nil {
		return nil, err
	}
	return &TorchExport{Output: output, Sidecar: sidecar, Module: module, Tensors: len(tensors), Bytes: len(data), Info: info}, nil
}

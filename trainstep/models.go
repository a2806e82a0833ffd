package trainstep

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph"
	"github.com/gomlx/gomlx/pkg/ml/context"
)

// Model names, as the --model flag spells them.
const (
	// SmallCNN is four conv-BN-ReLU layers and a global average pool: for tests, the demo and
	// 28×28 grayscale Fashion-MNIST; fast on a CPU.
	SmallCNN = "small-cnn"
	// ResNet18CIFAR is ResNet-18 with the CIFAR stem (3×3 convolution, stride 1, no max-pool),
	// for 32–96 px images (CIFAR-10/100, STL-10), as in the paper's Section 4.1.
	ResNet18CIFAR = "resnet18-cifar"
	// ResNet50 is ResNet-50 (v1.5, stride on the 3×3 convolutions) with the ImageNet stem
	// (7×7 convolution, stride 2, 3×3 max-pool), for 224 px images.
	ResNet50 = "resnet50"
	// ResNet50CIFAR is ResNet-50 with the CIFAR stem (3×3 convolution, stride 1, no
	// max-pool), for 32–96 px images: the paper's ResNet-50@500-epoch CIFAR experiments
	// (Table 4 and the temperature ablation) follow the PyTorch implementation it cites, which
	// adapts the stem this way.
	ResNet50CIFAR = "resnet50-cifar"
	// MLP is two dense-BN-ReLU layers over the flattened pixels: no convolutions, so it trains
	// on any backend; for tests of everything around the model.
	MLP = "mlp"
)

// DefaultProjectionDim is the projector's output width (SimCLR's and the paper's 128).
const DefaultProjectionDim = 128

// ModelConfig describes an encoder. It is stored in every checkpoint; two configurations
// with the same Name, BaseWidth, ProjectionDim and Channels have the same variables.
type ModelConfig struct {
	// Name is SmallCNN, ResNet18CIFAR or ResNet50.
	Name string `json:"name"`
	// BaseWidth is the channel count of the first stage (0: the model's default, 32 for the
	// small CNN and 64 for the ResNets); tests use small widths.
	BaseWidth int `json:"base_width"`
	// ProjectionDim is the projector's output width (0: DefaultProjectionDim).
	ProjectionDim int `json:"projection_dim"`
	// Channels is the input's channel count, 1 (grayscale) or 3.
	Channels int `json:"channels"`
	// Mean and Std normalise the input per channel after scaling it to [0, 1]; empty: the
	// defaults of Normalization for Dataset.
	Mean []float64 `json:"mean"`
	Std  []float64 `json:"std"`
	// Dataset names the data the normalisation came from (informational).
	Dataset string `json:"dataset,omitempty"`
}

type architecture struct {
	name             string
	defaultWidth     int
	minSize, maxSize int
	features         func(width int) int
	backbone         func(n *net, ctx *context.Context, x *Node, width int) *Node
}

var architectures = []architecture{
	{SmallCNN, 32, 8, 128, func(w int) int { return 4 * w }, smallCNN},
	{ResNet18CIFAR, 64, 32, 96, func(w int) int { return 8 * w }, resnet18CIFAR},
	{ResNet50, 64, 64, 512, func(w int) int { return 32 * w }, resnet50},
	{ResNet50CIFAR, 64, 32, 96, func(w int) int { return 32 * w }, resnet50CIFAR},
	{MLP, 32, 1, 64, func(w int) int { return 4 * w }, mlp},
}

// ModelNames lists the models NewModel accepts.
func ModelNames() []string {
	var names []string
	for _, a := range architectures {
		names = append(names, a.name)
	}
	return names
}

// Model is an encoder (backbone and projector) that builds GoMLX graphs. It holds no weights:
// they live in a context.Context, under the scope "model".
type Model struct {
	cfg  ModelConfig
	arch architecture
}

// NewModel checks cfg, fills in its defaults and returns the model.
func NewModel(cfg ModelConfig) (*Model, error) {
	i := slices.IndexFunc(architectures, func(a architecture) bool { return a.name == cfg.Name })
	if i < 0 {
		return nil, fmt.Errorf("unknown model %q: want one of %s", cfg.Name, strings.Join(ModelNames(), ", "))
	}
	arch := architectures[i]
	if cfg.BaseWidth == 0 {
		cfg.BaseWidth = arch.defaultWidth
	}
	if cfg.ProjectionDim == 0 {
		cfg.ProjectionDim = DefaultProjectionDim
	}
	switch {
	case cfg.BaseWidth < 1:
		return nil, fmt.Errorf("model %s: base width %d must be positive", cfg.Name, cfg.BaseWidth)
	case cfg.ProjectionDim < 1:
		return nil, fmt.Errorf("model %s: projection dimension %d must be positive", cfg.Name, cfg.ProjectionDim)
	case cfg.Channels != 1 && cfg.Channels != 3:
		return nil, fmt.Errorf("model %s: %d input channels, want 1 or 3", cfg.Name, cfg.Channels)
	}
	if len(cfg.Mean) == 0 && len(cfg.Std) == 0 {
		cfg.Mean, cfg.Std = Normalization(cfg.Dataset, cfg.Channels)
	}
	if len(cfg.Mean) != cfg.Channels || len(cfg.Std) != cfg.Channels {
		return nil, fmt.Errorf("model %s: normalisation has %d means and %d standard deviations for %d channels",
			cfg.Name, len(cfg.Mean), len(cfg.Std), cfg.Channels)
	}
	for _, s := range cfg.Std {
		if !(s > 0) {
			return nil, fmt.Errorf("model %s: normalisation standard deviation %v must be positive", cfg.Name, s)
		}
	}
	cfg.Mean, cfg.Std = slices.Clone(cfg.Mean), slices.Clone(cfg.Std)
	return &Model{cfg: cfg, arch: arch}, nil
}

// Config returns the configuration with its defaults filled in.
func (m *Model) Config() ModelConfig { return m.cfg }

// FeatureDim is the width of the backbone's features (512 for ResNet-18, 2048 for ResNet-50).
func (m *Model) FeatureDim() int { return m.arch.features(m.cfg.BaseWidth) }

// SameVariables reports whether a model of configuration other has the same variables as m,
// so that its weights can be loaded into m; if not, the error says what differs.
func (m *Model) SameVariables(other ModelConfig) error {
	if other.Name != m.cfg.Name {
		return fmt.Errorf("it holds a %s model, not %s", other.Name, m.cfg.Name)
	}
	if other.BaseWidth != m.cfg.BaseWidth || other.ProjectionDim != m.cfg.ProjectionDim || other.Channels != m.cfg.Channels {
		return fmt.Errorf("its %s has base width %d, projection %d, %d channels; this one has %d, %d, %d",
			other.Name, other.BaseWidth, other.ProjectionDim, other.Channels, m.cfg.BaseWidth, m.cfg.ProjectionDim, m.cfg.Channels)
	}
	return nil
}

// CheckImageSize reports images the model is not meant for: another channel count, or sides
// outside the model's range (32–96 px for resnet18-cifar and resnet50-cifar, 64–512 for
// resnet50, 8–128 for the small CNN).
func (m *Model) CheckImageSize(h, w, c int) error {
	if c != m.cfg.Channels {
		return fmt.Errorf("images have %d channels but the %s model was set up for %d", c, m.cfg.Name, m.cfg.Channels)
	}
	if min(h, w) < m.arch.minSize || max(h, w) > m.arch.maxSize {
		return fmt.Errorf("images are %dx%d but %s expects sides of %d to %d px", h, w, m.cfg.Name, m.arch.minSize, m.arch.maxSize)
	}
	return nil
}

// Normalization returns the per-channel mean and standard deviation of a dataset's pixels
// (scaled to [0, 1]) for the names the readers use; ImageNet's for unknown RGB data and 0.5,
// 0.25 for unknown grayscale data.
func Normalization(dataset string, channels int) (mean, std []float64) {
	key := strings.NewReplacer("-", "", "_", "", " ", "").Replace(strings.ToLower(dataset))
	if channels == 1 {
		switch {
		case strings.HasPrefix(key, "fashionmnist"):
			return []float64{0.2860}, []float64{0.3530}
		case strings.HasPrefix(key, "mnist"):
			return []float64{0.1307}, []float64{0.3081}
		}
		return []float64{0.5}, []float64{0.25}
	}
	switch {
	case strings.HasPrefix(key, "cifar100"):
		return []float64{0.5071, 0.4865, 0.4409}, []float64{0.2673, 0.2564, 0.2762}
	case strings.HasPrefix(key, "cifar10"):
		return []float64{0.4914, 0.4822, 0.4465}, []float64{0.2470, 0.2435, 0.2616}
	case strings.HasPrefix(key, "stl10"):
		return []float64{0.4467, 0.4398, 0.4066}, []float64{0.2603, 0.2566, 0.2713}
	}
	return []float64{0.485, 0.456, 0.406}, []float64{0.229, 0.224, 0.225}
}

// normalizeImages turns uint8 [B, H, W, C] images into normalised float32.
func (m *Model) normalizeImages(images *Node) *Node {
	g := images.Graph()
	x := DivScalar(ConvertDType(images, dtypes.Float32), 255)
	mean := make([]float32, len(m.cfg.Mean))
	invStd := make([]float32, len(m.cfg.Std))
	for i := range mean {
		mean[i], invStd[i] = float32(m.cfg.Mean[i]), float32(1/m.cfg.Std[i])
	}
	x = Sub(x, ExpandLeftToRank(Const(g, mean), 4))
	return Mul(x, ExpandLeftToRank(Const(g, invStd), 4))
}

// Backbone maps uint8 images [B, H, W, C] to features [B, FeatureDim]. train selects batch
// statistics (and running-average updates) in batch norm; seed is where new weights come from.
func (m *Model) Backbone(ctx *context.Context, images *Node, train bool, seed uint64) *Node {
	if images.Rank() != 4 || images.Shape().Dim(3) != m.cfg.Channels {
		panic(fmt.Sprintf("model %s: images %s, want [batch, height, width, %d]", m.cfg.Name, images.Shape(), m.cfg.Channels))
	}
	n := &net{train: train, seed: seed}
	x := m.normalizeImages(images)
	return m.arch.backbone(n, ctx.In(modelScope).In(backboneScope), x, m.cfg.BaseWidth)
}

// Project maps backbone features to the projection [B, ProjectionDim]: Linear (no bias) →
// BN → ReLU → Linear, as the paper's CIFAR code (SimCLR's projector with batch norm).
func (m *Model) Project(ctx *context.Context, features *Node, train bool, seed uint64) *Node {
	n := &net{train: train, seed: seed}
	ctx = ctx.In(modelScope).In(projectorScope)
	h := n.dense(ctx.In("fc1"), features, m.FeatureDim(), false)
	h = relu(n.batchNorm(ctx.In("bn1"), h))
	return n.dense(ctx.In("fc2"), h, m.cfg.ProjectionDim, true)
}

func mlp(n *net, ctx *context.Context, x *Node, w int) *Node {
	x = Reshape(x, x.Shape().Dim(0), -1)
	x = relu(n.batchNorm(ctx.In("bn1"), n.dense(ctx.In("fc1"), x, 4*w, false)))
	return relu(n.batchNorm(ctx.In("bn2"), n.dense(ctx.In("fc2"), x, 4*w, false)))
}

func convBNReLU(n *net, ctx *context.Context, x *Node, out, k, stride int) *Node {
	return relu(n.batchNorm(ctx.In("bn"), n.conv(ctx.In("conv"), x, out, k, stride)))
}

func smallCNN(n *net, ctx *context.Context, x *Node, w int) *Node {
	x = convBNReLU(n, ctx.In("layer1"), x, w, 3, 1)
	x = convBNReLU(n, ctx.In("layer2"), x, 2*w, 3, 2)
	x = convBNReLU(n, ctx.In("layer3"), x, 4*w, 3, 2)
	x = convBNReLU(n, ctx.In("layer4"), x, 4*w, 3, 1)
	return globalAvgPool(x)
}

// basicBlock is ResNet-18's residual block: two 3×3 convolutions, a 1×1 projection shortcut
// when the shape changes.
func basicBlock(n *net, ctx *context.Context, x *Node, out, stride int) *Node {
	shortcut := x
	if stride != 1 || x.Shape().Dim(-1) != out {
		shortcut = n.batchNorm(ctx.In("shortcut_bn"), n.conv(ctx.In("shortcut_conv"), x, out, 1, stride))
	}
	y := relu(n.batchNorm(ctx.In("bn1"), n.conv(ctx.In("conv1"), x, out, 3, stride)))
	y = n.batchNorm(ctx.In("bn2"), n.conv(ctx.In("conv2"), y, out, 3, 1))
	return relu(Add(y, shortcut))
}

// bottleneck is ResNet-50's block (v1.5: the stride is on the 3×3 convolution).
func bottleneck(n *net, ctx *context.Context, x *Node, mid, stride int) *Node {
	out := 4 * mid
	shortcut := x
	if stride != 1 || x.Shape().Dim(-1) != out {
		shortcut = n.batchNorm(ctx.In("shortcut_bn"), n.conv(ctx.In("shortcut_conv"), x, out, 1, stride))
	}
	y := relu(n.batchNorm(ctx.In("bn1"), n.conv(ctx.In("conv1"), x, mid, 1, 1)))
	y = relu(n.batchNorm(ctx.In("bn2"), n.conv(ctx.In("conv2"), y, mid, 3, stride)))
	y = n.batchNorm(ctx.In("bn3"), n.conv(ctx.In("conv3"), y, out, 1, 1))
	return relu(Add(y, shortcut))
}

func resnet18CIFAR(n *net, ctx *context.Context, x *Node, w int) *Node {
	x = convBNReLU(n, ctx.In("stem"), x, w, 3, 1)
	for stage, blocks := range []int{2, 2, 2, 2} {
		width := w << stage
		for b := 0; b < blocks; b++ {
			stride := 1
			if b == 0 && stage > 0 {
				stride = 2
			}
			x = basicBlock(n, ctx.Inf("layer%d", stage+1).Inf("block%d", b), x, width, stride)
		}
	}
	return globalAvgPool(x)
}

func resnet50(n *net, ctx *context.Context, x *Node, w int) *Node {
	x = convBNReLU(n, ctx.In("stem"), x, w, 7, 2)
	return bottleneckStages(n, ctx, maxPool3x3s2(x), w)
}

func resnet50CIFAR(n *net, ctx *context.Context, x *Node, w int) *Node {
	x = convBNReLU(n, ctx.In("stem"), x, w, 3, 1)
	return bottleneckStages(n, ctx, x, w)
}

// bottleneckStages is ResNet-50 after its stem: 3, 4, 6 and 3 bottleneck blocks.
func bottleneckStages(n *net, ctx *context.Context, x *Node, w int) *Node {
	for stage, blocks := range []int{3, 4, 6, 3} {
		mid := w << stage
		for b := 0; b < blocks; b++ {
			stride := 1
			if b == 0 && stage > 0 {
				stride = 2
			}
			x = bottleneck(n, ctx.Inf("layer%d", stage+1).Inf("block%d", b), x, mid, stride)
		}
	}
	return globalAvgPool(x)
}

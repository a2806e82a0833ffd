package trainstep

import (
	"fmt"
	"slices"
	"strings"

	"github.com/gomlx/compute/dtypes"
	. "github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/ml/model"

	"github.com/dcl-beam/dcl-beam/internal/registry"
	"github.com/dcl-beam/dcl-beam/transforms/datasets"
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
	// Mean and Std normalise the input per channel after scaling it to [0, 1]; empty:
	// Normalization(Dataset, Channels).
	Mean []float64 `json:"mean"`
	Std  []float64 `json:"std"`
	// Dataset names the data the normalisation comes from: a name of the dataset registry
	// (package transforms/datasets), or empty for none.
	Dataset string `json:"dataset,omitempty"`
}

type architecture struct {
	name             string
	defaultWidth     int
	minSize, maxSize int
	features         func(width int) int
	backbone         func(n *net, scope *model.Scope, x *Node, width int) *Node
}

// models is the model registry: an encoder is one architecture registered here.
var models = registry.New[architecture]("model")

func init() {
	for _, a := range []architecture{
		{SmallCNN, 32, 8, 128, func(w int) int { return 4 * w }, smallCNN},
		{ResNet18CIFAR, 64, 32, 96, func(w int) int { return 8 * w }, resnet18CIFAR},
		{ResNet50, 64, 64, 512, func(w int) int { return 32 * w }, resnet50},
		{ResNet50CIFAR, 64, 32, 96, func(w int) int { return 32 * w }, resnet50CIFAR},
		{MLP, 32, 1, 64, func(w int) int { return 4 * w }, mlp},
	} {
		models.Register(a.name, a)
	}
}

// ModelNames lists the models NewModel accepts, in registration order.
func ModelNames() []string { return models.Names() }

// Model is an encoder (backbone and projector) that builds GoMLX graphs. It holds no weights:
// they live in a GoMLX model.Store, under the scope "model".
type Model struct {
	cfg  ModelConfig
	arch architecture
}

// NewModel checks cfg, fills in its defaults and returns the model.
func NewModel(cfg ModelConfig) (*Model, error) {
	arch, ok := models.Lookup(cfg.Name)
	if !ok {
		return nil, fmt.Errorf("unknown model %q: want one of %s", cfg.Name, strings.Join(ModelNames(), ", "))
	}
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
		var err error
		if cfg.Mean, cfg.Std, err = Normalization(cfg.Dataset, cfg.Channels); err != nil {
			return nil, fmt.Errorf("model %s: input normalisation: %w", cfg.Name, err)
		}
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

// Normalization returns the per-channel mean and standard deviation a model normalises its
// input with: the dataset's, from its descriptor in the dataset registry (an unknown dataset
// is an error). A model with no dataset named (random benchmark batches) takes those of the
// registry's datasets of unknown images: an image folder's for RGB (ImageNet's statistics),
// raw IDX files' for grey.
func Normalization(dataset string, channels int) (mean, std []float64, err error) {
	if dataset == "" {
		dataset = datasets.Folder
		if channels == 1 {
			dataset = datasets.IDX
		}
	}
	return datasets.Normalization(dataset, channels)
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

// Backbone maps uint8 images [B, H, W, C] to float32 features [B, FeatureDim], in float32
// arithmetic. train selects batch statistics (and running-average updates) in batch norm;
// seed is where new weights come from.
func (m *Model) Backbone(scope *model.Scope, images *Node, train bool, seed uint64) *Node {
	return m.backbone(&net{train: train, updateStats: train, seed: seed, dtype: dtypes.Float32}, scope, images)
}

// Project maps backbone features to the float32 projection [B, ProjectionDim], in float32
// arithmetic: Linear (no bias) → BN → ReLU → Linear, as the paper's CIFAR code (SimCLR's
// projector with batch norm).
func (m *Model) Project(scope *model.Scope, features *Node, train bool, seed uint64) *Node {
	return m.project(&net{train: train, updateStats: train, seed: seed, dtype: dtypes.Float32}, scope, features)
}

// backbone is Backbone with n's settings (precision included); the features are float32
// whatever n's precision, as Step.Features and the projector expect.
func (m *Model) backbone(n *net, scope *model.Scope, images *Node) *Node {
	if images.Rank() != 4 || images.Shape().Dim(3) != m.cfg.Channels {
		panic(fmt.Sprintf("model %s: images %s, want [batch, height, width, %d]", m.cfg.Name, images.Shape(), m.cfg.Channels))
	}
	x := m.normalizeImages(images)
	return toFloat32(m.arch.backbone(n, scope.At(modelScope).At(backboneScope), x, m.cfg.BaseWidth))
}

// project is Project with n's settings; the projection is float32 whatever n's precision, so
// the loss (its normalisation and reductions included) runs in float32.
func (m *Model) project(n *net, scope *model.Scope, features *Node) *Node {
	scope = scope.At(modelScope).At(projectorScope)
	h := n.dense(scope.In("fc1"), features, m.FeatureDim(), false)
	h = relu(n.batchNorm(scope.In("bn1"), h))
	return toFloat32(n.dense(scope.In("fc2"), h, m.cfg.ProjectionDim, true))
}

func mlp(n *net, scope *model.Scope, x *Node, w int) *Node {
	x = Reshape(x, x.Shape().Dim(0), -1)
	x = relu(n.batchNorm(scope.In("bn1"), n.dense(scope.In("fc1"), x, 4*w, false)))
	return relu(n.batchNorm(scope.In("bn2"), n.dense(scope.In("fc2"), x, 4*w, false)))
}

func convBNReLU(n *net, scope *model.Scope, x *Node, out, k, stride int) *Node {
	return relu(n.batchNorm(scope.In("bn"), n.conv(scope.In("conv"), x, out, k, stride)))
}

func smallCNN(n *net, scope *model.Scope, x *Node, w int) *Node {
	x = convBNReLU(n, scope.In("layer1"), x, w, 3, 1)
	x = convBNReLU(n, scope.In("layer2"), x, 2*w, 3, 2)
	x = convBNReLU(n, scope.In("layer3"), x, 4*w, 3, 2)
	x = convBNReLU(n, scope.In("layer4"), x, 4*w, 3, 1)
	return globalAvgPool(x)
}

// basicBlock is ResNet-18's residual block: two 3×3 convolutions, a 1×1 projection shortcut
// when the shape changes.
func basicBlock(n *net, scope *model.Scope, x *Node, out, stride int) *Node {
	shortcut := x
	if stride != 1 || x.Shape().Dim(-1) != out {
		shortcut = n.batchNorm(scope.In("shortcut_bn"), n.conv(scope.In("shortcut_conv"), x, out, 1, stride))
	}
	y := relu(n.batchNorm(scope.In("bn1"), n.conv(scope.In("conv1"), x, out, 3, stride)))
	y = n.batchNorm(scope.In("bn2"), n.conv(scope.In("conv2"), y, out, 3, 1))
	return relu(Add(y, shortcut))
}

// bottleneck is ResNet-50's block (v1.5: the stride is on the 3×3 convolution).
func bottleneck(n *net, scope *model.Scope, x *Node, mid, stride int) *Node {
	out := 4 * mid
	shortcut := x
	if stride != 1 || x.Shape().Dim(-1) != out {
		shortcut = n.batchNorm(scope.In("shortcut_bn"), n.conv(scope.In("shortcut_conv"), x, out, 1, stride))
	}
	y := relu(n.batchNorm(scope.In("bn1"), n.conv(scope.In("conv1"), x, mid, 1, 1)))
	y = relu(n.batchNorm(scope.In("bn2"), n.conv(scope.In("conv2"), y, mid, 3, stride)))
	y = n.batchNorm(scope.In("bn3"), n.conv(scope.In("conv3"), y, out, 1, 1))
	return relu(Add(y, shortcut))
}

func resnet18CIFAR(n *net, scope *model.Scope, x *Node, w int) *Node {
	x = convBNReLU(n, scope.In("stem"), x, w, 3, 1)
	for stage, blocks := range []int{2, 2, 2, 2} {
		width := w << stage
		for b := 0; b < blocks; b++ {
			stride := 1
			if b == 0 && stage > 0 {
				stride = 2
			}
			x = basicBlock(n, scope.At("layer%d", stage+1).In("block%d", b), x, width, stride)
		}
	}
	return globalAvgPool(x)
}

func resnet50(n *net, scope *model.Scope, x *Node, w int) *Node {
	x = convBNReLU(n, scope.In("stem"), x, w, 7, 2)
	return bottleneckStages(n, scope, maxPool3x3s2(x), w)
}

func resnet50CIFAR(n *net, scope *model.Scope, x *Node, w int) *Node {
	x = convBNReLU(n, scope.In("stem"), x, w, 3, 1)
	return bottleneckStages(n, scope, x, w)
}

// bottleneckStages is ResNet-50 after its stem: 3, 4, 6 and 3 bottleneck blocks.
func bottleneckStages(n *net, scope *model.Scope, x *Node, w int) *Node {
	for stage, blocks := range []int{3, 4, 6, 3} {
		mid := w << stage
		for b := 0; b < blocks; b++ {
			stride := 1
			if b == 0 && stage > 0 {
				stride = 2
			}
			x = bottleneck(n, scope.At("layer%d", stage+1).In("block%d", b), x, mid, stride)
		}
	}
	return globalAvgPool(x)
}

package trainstep

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/gomlx/compute"
	"github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
)

// TestModelShapes runs each model forward in inference mode at a tiny size and checks the
// feature and projection widths and the parameter counts (full-width ResNet-18 and -50 have
// torchvision's counts: 11.17 M and 23.5 M backbone weights).
func TestModelShapes(t *testing.T) {
	backend := newTestBackend(t)
	for _, tc := range []struct {
		model      string
		width      int
		size, c    int
		wantFeat   int
		wantParams int // backbone + projector weights; 0: not checked
	}{
		{SmallCNN, 4, 8, 1, 16, 0},
		{ResNet18CIFAR, 2, 8, 3, 16, 0},
		{ResNet50, 2, 16, 3, 64, 0},
		{ResNet50CIFAR, 2, 8, 3, 64, 0},
		{MLP, 4, 5, 3, 16, 0},
	} {
		t.Run(tc.model, func(t *testing.T) {
			cfg := testStepConfig(tc.model)
			cfg.Model.BaseWidth, cfg.Model.Channels, cfg.Model.ProjectionDim = tc.width, tc.c, 8
			s, err := NewStep(backend, cfg, tc.size, tc.size)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Finalize()
			if got := s.Model().FeatureDim(); got != tc.wantFeat {
				t.Errorf("FeatureDim = %d, want %d", got, tc.wantFeat)
			}
			b := RandomBatch(1, 3, tc.size, tc.size, tc.c)
			feats, proj, err := s.Features(b.View1, 3, tc.size, tc.size, tc.c)
			if err != nil {
				t.Fatal(err)
			}
			if len(feats) != 3 || len(feats[0]) != tc.wantFeat || len(proj[0]) != 8 {
				t.Fatalf("features %d×%d, projection %d×%d; want 3×%d and 3×8", len(feats), len(feats[0]), len(proj), len(proj[0]), tc.wantFeat)
			}
			for _, v := range feats[0] {
				if math.IsNaN(float64(v)) || v < 0 {
					t.Fatalf("backbone feature %v: want finite, ≥ 0 after the final ReLU and pooling", v)
				}
			}
		})
	}
}

// TestResNetParameterCounts: at full width the backbones have torchvision's weight counts
// (ResNet-18 with a 3×3 stem: 11,168,832; ResNet-50: 23,508,032, both without the classifier;
// ResNet-50 with the CIFAR stem: 23,500,352).
func TestResNetParameterCounts(t *testing.T) {
	backend := newTestBackend(t)
	for _, tc := range []struct {
		model string
		size  int
		want  int
	}{
		{ResNet18CIFAR, 32, 11168832},
		{ResNet50, 64, 23508032},
		// ResNet-50 with a 3×3×3×64 stem instead of 7×7×3×64: 9,408 − 1,728 fewer weights.
		{ResNet50CIFAR, 32, 23500352},
	} {
		cfg := testStepConfig(tc.model)
		cfg.Model.BaseWidth, cfg.Model.Channels = 0, 3
		s, err := NewStep(backend, cfg, tc.size, tc.size)
		if err != nil {
			t.Fatal(err)
		}
		backbone := 0
		for v := range s.Store().IterVariables() {
			if v.Trainable && strings.HasPrefix(v.Scope(), "/model/backbone") {
				backbone += v.Shape().Size()
			}
		}
		s.Finalize()
		if backbone != tc.want {
			t.Errorf("%s backbone has %d weights, want %d", tc.model, backbone, tc.want)
		}
	}
}

// TestMaxPoolMatchesLoops checks the 3×3/2 max-pool against loops, on odd and even sizes
// (PyTorch's MaxPool2d(3, 2, padding=1)), values and gradient: the gradient of Σ c·pool(x)
// sends each window's c to its largest input. The inputs are negative and positive normal
// draws, so a zero padding would show, and have no ties.
// It runs on GoMLX's pure-Go backend too: v0.26's had neither select-and-scatter nor Pad
// (docs/engine.md, bug 6), and this pool was a maximum of nine strided slices.
func TestMaxPoolMatchesLoops(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backend func(testing.TB) compute.Backend
	}{
		{"cpu", newTestBackend},
		{"go", newGoBackend},
	} {
		t.Run(tc.name, func(t *testing.T) { checkMaxPool(t, tc.backend(t)) })
	}
}

func checkMaxPool(t *testing.T, backend compute.Backend) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, size := range [][2]int{{5, 5}, {6, 7}, {8, 8}, {1, 2}} {
		h, w := size[0], size[1]
		outH, outW := (h-1)/2+1, (w-1)/2+1
		x := make([]float32, 2*h*w*3)
		for i := range x {
			x[i] = float32(r.NormFloat64())
		}
		c := make([]float32, 2*outH*outW*3)
		for i := range c {
			c[i] = float32(r.NormFloat64())
		}
		out, err := graph.CallOnceN(backend, func(x, c *graph.Node) []*graph.Node {
			pooled := maxPool3x3s2(x)
			return []*graph.Node{pooled, graph.Gradient(graph.ReduceAllSum(graph.Mul(pooled, c)), x)[0]}
		}, tensors.FromFlatDataAndDimensions(x, 2, h, w, 3), tensors.FromFlatDataAndDimensions(c, 2, outH, outW, 3))
		if err != nil {
			t.Fatal(err)
		}
		if dims := out[0].Shape().Dimensions; dims[1] != outH || dims[2] != outW {
			t.Fatalf("%dx%d: output %v, want %dx%d", h, w, dims, outH, outW)
		}
		flat := tensors.MustCopyFlatData[float32](out[0])
		grad := tensors.MustCopyFlatData[float32](out[1])
		wantGrad := make([]float32, len(x))
		for b := 0; b < 2; b++ {
			for oy := 0; oy < outH; oy++ {
				for ox := 0; ox < outW; ox++ {
					for ch := 0; ch < 3; ch++ {
						want, arg := float32(math.Inf(-1)), -1
						for dy := -1; dy <= 1; dy++ {
							for dx := -1; dx <= 1; dx++ {
								y, xx := 2*oy+dy, 2*ox+dx
								if i := ((b*h+y)*w+xx)*3 + ch; y >= 0 && y < h && xx >= 0 && xx < w && x[i] > want {
									want, arg = x[i], i
								}
							}
						}
						o := ((b*outH+oy)*outW+ox)*3 + ch
						if g := flat[o]; g != want {
							t.Fatalf("%dx%d: pool[%d,%d,%d,%d] = %v, want %v", h, w, b, oy, ox, ch, g, want)
						}
						wantGrad[arg] += c[o]
					}
				}
			}
		}
		for i := range grad {
			if math.Abs(float64(grad[i]-wantGrad[i])) > 1e-6 {
				t.Fatalf("%dx%d: gradient[%d] = %v, want %v", h, w, i, grad[i], wantGrad[i])
			}
		}
	}
}

func TestNewModelRejects(t *testing.T) {
	for _, tc := range []struct {
		cfg  ModelConfig
		want string
	}{
		{ModelConfig{Name: "vgg16", Channels: 3}, `unknown model "vgg16"`},
		{ModelConfig{Name: SmallCNN, Channels: 2}, "2 input channels"},
		{ModelConfig{Name: SmallCNN, Channels: 3, BaseWidth: -1}, "base width -1"},
		{ModelConfig{Name: SmallCNN, Channels: 1, Mean: []float64{0.5}, Std: []float64{0}}, "must be positive"},
		{ModelConfig{Name: SmallCNN, Channels: 3, Mean: []float64{0.5}, Std: []float64{0.2}}, "1 means and 1 standard deviations for 3 channels"},
	} {
		if _, err := NewModel(tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewModel(%+v) error = %v, want %q", tc.cfg, err, tc.want)
		}
	}
	m, err := NewModel(ModelConfig{Name: ResNet50, Channels: 3})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.CheckImageSize(32, 32, 3); err == nil || !strings.Contains(err.Error(), "resnet50 expects sides of 64 to 512") {
		t.Errorf("resnet50 on 32 px: %v", err)
	}
	if err := m.CheckImageSize(224, 224, 1); err == nil || !strings.Contains(err.Error(), "1 channels") {
		t.Errorf("resnet50 on grayscale: %v", err)
	}
}

func TestNormalization(t *testing.T) {
	for _, tc := range []struct {
		dataset  string
		channels int
		mean0    float64
	}{
		{"cifar10", 3, 0.4914}, {"cifar100", 3, 0.5071}, {"stl10", 3, 0.4467}, {"imagenet", 3, 0.485},
		{"fashion-mnist", 1, 0.2860}, {"mnist", 1, 0.1307}, {"idx", 1, 0.5}, {"folder", 3, 0.485},
		{"", 1, 0.5}, {"", 3, 0.485}, // no dataset named: random batches
	} {
		mean, std, err := Normalization(tc.dataset, tc.channels)
		if err != nil || len(mean) != tc.channels || len(std) != tc.channels || mean[0] != tc.mean0 {
			t.Errorf("Normalization(%q, %d) = %v, %v, %v; want mean[0] %v", tc.dataset, tc.channels, mean, std, err, tc.mean0)
		}
	}
	// A dataset missing from the registry is an error, not ImageNet's statistics.
	for _, name := range []string{"CIFAR-100", "svhn"} {
		if _, _, err := Normalization(name, 3); err == nil {
			t.Errorf("Normalization(%q): no error", name)
		}
		if _, err := NewModel(ModelConfig{Name: SmallCNN, Channels: 3, Dataset: name}); err == nil || !strings.Contains(err.Error(), "unknown dataset") {
			t.Errorf("NewModel with dataset %q: %v, want an unknown-dataset error", name, err)
		}
	}
}

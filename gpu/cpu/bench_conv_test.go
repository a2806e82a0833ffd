package cpu

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/cputime"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // GoMLX graphs read best unqualified

	"github.com/dcl-beam/dcl-beam/gpu/kernels"
)

// netConv is one convolution of a network: its input's side and channels, its output
// channels, kernel side and stride.
type netConv struct {
	name                   string
	side, in, out, k, step int
}

// resnet18Convs are the distinct convolutions of ResNet-18 with the CIFAR stem on 32×32 images.
var resnet18Convs = []netConv{
	{"stem", 32, 3, 64, 3, 1},
	{"layer1", 32, 64, 64, 3, 1},
	{"layer2-down", 32, 64, 128, 3, 2},
	{"layer2", 16, 128, 128, 3, 1},
	{"layer2-shortcut", 32, 64, 128, 1, 2},
	{"layer3-down", 16, 128, 256, 3, 2},
	{"layer3", 8, 256, 256, 3, 1},
	{"layer3-shortcut", 16, 128, 256, 1, 2},
	{"layer4-down", 8, 256, 512, 3, 2},
	{"layer4", 4, 512, 512, 3, 1},
	{"layer4-shortcut", 8, 256, 512, 1, 2},
}

// resnet50Convs are the distinct convolutions of ResNet-50 (torchvision's, stride on the 3×3)
// on 224×224 images.
var resnet50Convs = []netConv{
	{"stem", 224, 3, 64, 7, 2},
	{"layer1-reduce", 56, 64, 64, 1, 1},
	{"layer1", 56, 64, 64, 3, 1},
	{"layer1-expand", 56, 64, 256, 1, 1},
	{"layer1-in", 56, 256, 64, 1, 1},
	{"layer2-reduce", 56, 256, 128, 1, 1},
	{"layer2-down", 56, 128, 128, 3, 2},
	{"layer2", 28, 128, 128, 3, 1},
	{"layer2-expand", 28, 128, 512, 1, 1},
	{"layer2-shortcut", 56, 256, 512, 1, 2},
	{"layer2-in", 28, 512, 128, 1, 1},
	{"layer3-reduce", 28, 512, 256, 1, 1},
	{"layer3-down", 28, 256, 256, 3, 2},
	{"layer3", 14, 256, 256, 3, 1},
	{"layer3-expand", 14, 256, 1024, 1, 1},
	{"layer3-shortcut", 28, 512, 1024, 1, 2},
	{"layer3-in", 14, 1024, 256, 1, 1},
	{"layer4-reduce", 14, 1024, 512, 1, 1},
	{"layer4-down", 14, 512, 512, 3, 2},
	{"layer4", 7, 512, 512, 3, 1},
	{"layer4-expand", 7, 512, 2048, 1, 1},
	{"layer4-shortcut", 14, 1024, 2048, 1, 2},
	{"layer4-in", 7, 2048, 512, 1, 1},
}

// smallCNNConvs are the convolutions of the small CNN on 28×28 grayscale images.
var smallCNNConvs = []netConv{
	{"conv1", 28, 1, 32, 3, 1},
	{"conv2", 28, 32, 64, 3, 2},
	{"conv3", 14, 64, 128, 3, 2},
	{"conv4", 7, 128, 128, 3, 1},
}

// gradientConvs returns the three convolutions GoMLX emits for a channels-last convolution and
// its two gradients (forward, gradient wrt input, gradient wrt kernel), as lowered here.
func gradientConvs(b *testing.B, be *Backend, batch, side, in, out, k, stride int) (fwd, dx, dw kernels.ConvShape) {
	var seen []kernels.ConvShape
	be.onConv = func(cs kernels.ConvShape) { seen = append(seen, cs) }
	defer func() { be.onConv = nil }()
	g := NewGraph(be, "conv-gradients")
	x := Parameter(g, "x", shapes.Make(dtypes.Float32, batch, side, side, in))
	w := Parameter(g, "w", shapes.Make(dtypes.Float32, k, k, in, out))
	y := Convolve(x, w).StridePerAxis(stride, stride).PaddingPerDim([][2]int{{k / 2, k / 2}, {k / 2, k / 2}}).Done()
	_ = Gradient(ReduceAllSum(y), x, w)
	g.Finalize()
	if len(seen) != 3 {
		b.Fatalf("%d convolutions lowered, want 3", len(seen))
	}
	return seen[0], seen[1], seen[2]
}

// BenchmarkConvResNet18 times each distinct convolution of ResNet-18 (CIFAR stem) at batch 64,
// forward and both gradients as GoMLX expresses them, in GFLOP/s of useful work
// (2·batch·outputPixels·outChannels·inChannels·k²; the input gradient of a strided
// convolution also multiplies the zeros its input dilation inserts). Under -short: batch 2.
func BenchmarkConvResNet18(b *testing.B) {
	batch := 64
	if testing.Short() {
		batch = 2
	}
	benchmarkConvs(b, resnet18Convs, batch)
}

// BenchmarkConvResNet50 times each distinct convolution of ResNet-50 at 224×224, batch 16 (the
// step benchmark's two views of 8 images), as BenchmarkConvResNet18 does. Under -short:
// batch 1.
func BenchmarkConvResNet50(b *testing.B) {
	batch := 16
	if testing.Short() {
		batch = 1
	}
	benchmarkConvs(b, resnet50Convs, batch)
}

// BenchmarkConvSmallCNN times each convolution of the small CNN on 28×28 grayscale images at
// batch 128 (the step benchmark's two views of 64), as BenchmarkConvResNet18 does. Under
// -short: batch 2.
func BenchmarkConvSmallCNN(b *testing.B) {
	batch := 128
	if testing.Short() {
		batch = 2
	}
	benchmarkConvs(b, smallCNNConvs, batch)
}

func benchmarkConvs(b *testing.B, convs []netConv, batch int) {
	be := benchBackendFor(b)
	r := rand.New(rand.NewPCG(7, 8))
	for _, c := range convs {
		fwd, dx, dw := gradientConvs(b, be, batch, c.side, c.in, c.out, c.k, c.step)
		outSide := (c.side+2*(c.k/2)-c.k)/c.step + 1
		flops := 2 * float64(batch*outSide*outSide*c.out*c.in*c.k*c.k)
		for _, v := range []struct {
			role string
			cs   kernels.ConvShape
		}{{"forward", fwd}, {"grad-input", dx}, {"grad-kernel", dw}} {
			b.Run(fmt.Sprintf("%s/%s", c.name, v.role), func(b *testing.B) {
				cs := v.cs
				x := randFloats(r, tensorSize(cs.XStrides, cs.Batch, cs.Channels, cs.In))
				w := randFloats(r, tensorSize(cs.WStrides, cs.Channels/cs.Groups, cs.OutChannels, cs.Kernel))
				y := make([]float32, tensorSize(cs.YStrides, cs.Batch, cs.OutChannels, cs.Out))
				b.ResetTimer()
				cpu0 := cputime.Process()
				for range b.N {
					if err := be.pool.Conv(cs, x, w, y); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(flops*float64(b.N)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
				b.ReportMetric(flops*float64(b.N)/(cputime.Process()-cpu0).Seconds()/1e9, "cpu-GFLOP/s")
			})
		}
	}
}

// tensorSize is the number of elements a tensor with these strides spans.
func tensorSize(st kernels.ConvStrides, major, minor int, spatial [3]int) int {
	n := 1 + (major-1)*st.Major + (minor-1)*st.Minor
	for d := range 3 {
		n += (spatial[d] - 1) * st.Spatial[d]
	}
	return n
}

func randFloats(r *rand.Rand, n int) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = r.Float32()*2 - 1
	}
	return s
}

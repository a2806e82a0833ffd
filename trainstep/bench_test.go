package trainstep

import (
	"bufio"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/gpu/cpu"
	"github.com/dcl-beam/dcl-beam/internal/cputime"

	"github.com/gomlx/compute"
	. "github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
)

// peakRSSMiB is the process's peak resident memory (VmHWM): meaningful when one benchmark runs
// alone (-bench 'StepResNet18$').
func peakRSSMiB() float64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// benchmarkStep times one training step (forward and backward of 2·batch images, loss,
// update) and reports ms per image and the peak RSS.
// With DCL_PROFILE_OPS set it runs on a CPU backend that times each operation, and logs the
// times per operation kind; DCL_PROFILE_OPS=shapes times them per kind and inputs' shapes (per
// layer). With DCL_PROFILE_OUT=FILE the table goes to FILE too, whole (a benchmark's log is cut
// short).
func benchmarkStep(b *testing.B, cfg StepConfig, batch, size int) {
	var backend compute.Backend
	var profiled *cpu.Backend
	if prof := os.Getenv("DCL_PROFILE_OPS"); prof != "" {
		be, err := cpu.New(cpu.Config{ProfileOps: true, ProfileShapes: prof == "shapes"})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(be.Finalize)
		backend, profiled = be, be
	} else {
		backend = newTestBackend(b)
	}
	s, err := NewStep(backend, cfg, size, size)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Finalize()
	data := RandomBatch(1, batch, size, size, cfg.Model.Channels)
	if _, err := s.Run(data, 0.01); err != nil { // compiles the graph
		b.Fatal(err)
	}
	if profiled != nil {
		profiled.ResetOpStats() // the first run's times include first use of its memory
	}
	b.ResetTimer()
	cpu0 := cputime.Process().Seconds()
	for b.Loop() {
		if _, err := s.Run(data, 0.01); err != nil {
			b.Fatal(err)
		}
	}
	images := float64(b.N) * float64(2*batch)
	b.ReportMetric(b.Elapsed().Seconds()*1000/images, "ms/image")
	// CPU time per image is what the step costs on a dedicated machine (divided by the cores
	// it uses): other processes' turns do not inflate it.
	b.ReportMetric((cputime.Process().Seconds()-cpu0)*1000/images, "cpu-ms/image")
	b.ReportMetric(peakRSSMiB(), "peak-RSS-MiB")
	if profiled != nil {
		table := cpu.FormatOpStats(profiled.OpStats())
		if out := os.Getenv("DCL_PROFILE_OUT"); out != "" {
			if err := os.WriteFile(out, []byte(table), 0o644); err != nil {
				b.Fatal(err)
			}
		}
		b.Logf("operation times over %d steps:\n%s", b.N, table)
	}
}

// BenchmarkStepResNet18 is one resnet18-cifar training step at batch 64 (128 images of
// 32×32×3); -short: width 8, batch 8.
func BenchmarkStepResNet18(b *testing.B) {
	cfg := BenchStepConfig(ResNet18CIFAR, 3)
	batch := 64
	if testing.Short() {
		cfg.Model.BaseWidth, batch = 8, 8
	}
	benchmarkStep(b, cfg, batch, 32)
}

// BenchmarkStepResNet18Methods is one resnet18-cifar training step at batch 64 of each
// training method with its defaults (MoCo-v2: a queue of 65536 keys, eight batch-norm
// groups; NNCLR: a support set of 98304 projections), for the ratio of each method's step to
// SimCLR's on one machine in one run; -short: width 8, batch 8, queues of 256.
func BenchmarkStepResNet18Methods(b *testing.B) {
	for _, method := range []string{SimCLRMethod, MoCoMethod, NNCLRMethod} {
		b.Run(method, func(b *testing.B) {
			cfg := BenchStepConfig(ResNet18CIFAR, 3)
			cfg.Method = method
			batch := 64
			if testing.Short() {
				cfg.Model.BaseWidth, batch = 8, 8
				if method != SimCLRMethod {
					cfg.MethodConfig = MethodConfig{SettingQueueSize: 256}
				}
			}
			benchmarkStep(b, cfg, batch, 32)
		})
	}
}

// BenchmarkStepResNet18Batch256 is one resnet18-cifar training step at batch 256 (512 images
// of 32×32×3), for the peak-memory goal; run it alone for a meaningful peak RSS
// (-bench 'StepResNet18Batch256$'); -short: width 8, batch 16.
func BenchmarkStepResNet18Batch256(b *testing.B) {
	cfg := BenchStepConfig(ResNet18CIFAR, 3)
	batch := 256
	if testing.Short() {
		cfg.Model.BaseWidth, batch = 8, 16
	}
	benchmarkStep(b, cfg, batch, 32)
}

// BenchmarkStepResNet18Batch32 is one resnet18-cifar training step at batch 32 (64 images of
// 32×32×3); -short: width 8, batch 4.
func BenchmarkStepResNet18Batch32(b *testing.B) {
	cfg := BenchStepConfig(ResNet18CIFAR, 3)
	batch := 32
	if testing.Short() {
		cfg.Model.BaseWidth, batch = 8, 4
	}
	benchmarkStep(b, cfg, batch, 32)
}

// BenchmarkStepResNet50 is one resnet50 training step at 224×224, batch 8 (16 images);
// -short: width 8, 64×64, batch 2.
func BenchmarkStepResNet50(b *testing.B) {
	cfg := BenchStepConfig(ResNet50, 3)
	batch, size := 8, 224
	if testing.Short() {
		cfg.Model.BaseWidth, batch, size = 8, 2, 64
	}
	benchmarkStep(b, cfg, batch, size)
}

// BenchmarkStepSmallCNN is one small-cnn step at batch 64 on 28×28 grayscale (Fashion-MNIST's
// size); -short: batch 8.
func BenchmarkStepSmallCNN(b *testing.B) {
	batch := 64
	if testing.Short() {
		batch = 8
	}
	benchmarkStep(b, BenchStepConfig(SmallCNN, 1), batch, 28)
}

// BenchmarkLossDCL is the DCL loss forward and backward (gradients of z1 and z2) at
// 2N = 1024 anchors, d = 128, float32; -short: 2N = 64.
func BenchmarkLossDCL(b *testing.B) {
	n, d := 512, 128
	if testing.Short() {
		n = 32
	}
	backend := newTestBackend(b)
	exec, err := NewExec(backend, func(z *Node) []*Node {
		nodes := StackedLossGraph(z, LossConfig{Kind: DCL, Temperature: 0.07})
		return append([]*Node{nodes.Loss}, Gradient(nodes.Loss, z)...)
	})
	if err != nil {
		b.Fatal(err)
	}
	defer exec.Finalize()
	r := rand.New(rand.NewPCG(1, 1))
	z := make([]float32, 2*n*d)
	for i := range z {
		z[i] = float32(r.NormFloat64())
	}
	zt := tensors.FromFlatDataAndDimensions(z, 2*n, d)
	run := func() {
		out, err := exec.Call(zt)
		if err != nil {
			b.Fatal(err)
		}
		for _, t := range out {
			t.FinalizeAll()
		}
	}
	run()
	b.ResetTimer()
	for b.Loop() {
		run()
	}
}

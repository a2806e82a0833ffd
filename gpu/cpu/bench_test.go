package cpu

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/debug"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/cputime"

	"github.com/gomlx/gomlx/ml/model"
	"github.com/gomlx/gomlx/ml/model/initializer"
)

// benchTrainStep times one SGD step of spec at the batch size, after a warm-up step (which
// compiles the graph), and reports ms/image and the peak resident memory of the process.
func benchTrainStep(b *testing.B, spec resnetSpec, batch, side int, bn bnKind) {
	benchBackend := benchBackendFor(b)
	store := model.NewStore()
	store.RootScope().SetParam(initializer.ParamInitialSeed, int64(1))
	rb := &resnetBuilder{spec: spec, train: true, bn: bn}
	exec, err := model.NewExec(benchBackend, store, rb.sgdStep)
	if err != nil {
		b.Fatal(err)
	}
	defer exec.Finalize()
	images := randomImages(rand.New(rand.NewPCG(1, 2)), batch, side)
	step := func() {
		out, err := exec.Call(images)
		if err != nil {
			b.Fatal(err)
		}
		for _, o := range out {
			o.MustFinalizeAll()
		}
	}
	// Return the memory earlier benchmarks freed, so the peak below is this one's.
	debug.FreeOSMemory()
	resetPeakRSS()
	step()
	b.ResetTimer()
	cpu0 := cputime.Process()
	for range b.N {
		step()
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Milliseconds())/float64(b.N*batch), "ms/image")
	// CPU time per image is steadier than wall time on a shared machine.
	b.ReportMetric(float64((cputime.Process()-cpu0).Milliseconds())/float64(b.N*batch), "cpu-ms/image")
	b.ReportMetric(float64(peakRSS())/(1<<30), "peakGiB")
	if st := benchBackend.OpStats(); st != nil {
		b.Logf("operation times over %d steps:\n%s", b.N+1, FormatOpStats(st))
	}
}

// benchBackendFor returns a backend on GOMAXPROCS threads, finalized at the end.
func benchBackendFor(b *testing.B) *Backend {
	be, err := New(Config{ProfileOps: os.Getenv("DCL_PROFILE_OPS") != ""})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(be.Finalize)
	return be
}

// BenchmarkResNet18CIFARTrainStep times a ResNet-18 (CIFAR stem, 32×32 images) training step:
// forward, backward and SGD update, with the trainer's batch norm (basic operations) and with
// GoMLX's fused batch-norm operations. Under -short: width 8, 8×8 images, batch 4.
func BenchmarkResNet18CIFARTrainStep(b *testing.B) {
	spec, side, batches := resnet18CIFAR, 32, []int{64, 256}
	if testing.Short() {
		spec.width, side, batches = 8, 8, []int{4}
	}
	for _, batch := range batches {
		for _, bn := range []bnKind{bnBasic, bnFused} {
			b.Run(fmt.Sprintf("batch=%d/bn=%s", batch, []string{"basic", "fused"}[bn]), func(b *testing.B) {
				benchTrainStep(b, spec, batch, side, bn)
			})
		}
	}
}

// BenchmarkResNetInference times the backbone's forward pass (inference batch norm), in
// images/s: ResNet-18 CIFAR on 32×32, ResNet-50 on 224×224. Under -short: width 8, small images.
func BenchmarkResNetInference(b *testing.B) {
	cases := []struct {
		spec        resnetSpec
		side, batch int
	}{{resnet18CIFAR, 32, 128}, {resnet50, 224, 16}}
	for _, c := range cases {
		if testing.Short() {
			c.spec.width, c.side, c.batch = 8, 32, 2
		}
		b.Run(c.spec.name, func(b *testing.B) {
			be := benchBackendFor(b)
			store := model.NewStore()
			store.RootScope().SetParam(initializer.ParamInitialSeed, int64(1))
			rb := &resnetBuilder{spec: c.spec, train: false, bn: bnFused}
			exec, err := model.NewExec(be, store, rb.features)
			if err != nil {
				b.Fatal(err)
			}
			defer exec.Finalize()
			images := randomImages(rand.New(rand.NewPCG(3, 4)), c.batch, c.side)
			run := func() {
				out, err := exec.Call(images)
				if err != nil {
					b.Fatal(err)
				}
				out[0].MustFinalizeAll()
			}
			run()
			b.ResetTimer()
			cpu0 := cputime.Process()
			for range b.N {
				run()
			}
			b.ReportMetric(float64(b.N*c.batch)/b.Elapsed().Seconds(), "images/s")
			// Images per CPU-second, times the cores, is what free cores give.
			b.ReportMetric(float64(b.N*c.batch)/(cputime.Process()-cpu0).Seconds(), "images/cpu-s")
		})
	}
}

package kernels

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/dcl-beam/dcl-beam/internal/cputime"
)

// BenchmarkFMAPeak measures one core's float32 FMA peak with an assembly loop of independent
// FMAs, per instruction set: the reference for the matrix multiply's share of peak.
func BenchmarkFMAPeak(b *testing.B) {
	for _, pl := range peakKernels() {
		b.Run(pl.name, func(b *testing.B) {
			iters := 1 << 24
			if testing.Short() {
				iters = 1 << 16
			}
			pl.fn(iters / 16) // warm up the vector units
			b.ResetTimer()
			start, cpu0 := time.Now(), cputime.Process()
			for range b.N {
				pl.fn(iters)
			}
			sec := time.Since(start).Seconds()
			flops := float64(pl.flopsPerIter) * float64(iters) * float64(b.N)
			b.ReportMetric(flops/sec/1e9, "GFLOP/s")
			b.ReportMetric(flops/(cputime.Process()-cpu0).Seconds()/1e9, "cpu-GFLOP/s")
		})
	}
}

// BenchmarkSgemm measures C = A·B for square float32 matrices on 1 and 2 threads, with each
// micro-kernel this CPU runs.
func BenchmarkSgemm(b *testing.B) {
	sizes := []int{1024}
	if testing.Short() {
		sizes = []int{64}
	}
	r := rand.New(rand.NewPCG(1, 1))
	for _, mk := range availableKernels() {
		for _, threads := range []int{1, 2} {
			for _, n := range sizes {
				b.Run(fmt.Sprintf("%s/threads=%d/%d", mk.name, threads, n), func(b *testing.B) {
					pool := newPoolWithKernel(threads, mk)
					defer pool.Close()
					a, bb, c := randSlice(r, n*n), randSlice(r, n*n), make([]float32, n*n)
					pool.Sgemm(false, false, n, n, n, 1, a, n, bb, n, 0, c, n)
					b.ResetTimer()
					cpu0 := cputime.Process()
					for range b.N {
						pool.Sgemm(false, false, n, n, n, 1, a, n, bb, n, 0, c, n)
					}
					flops := 2 * float64(n) * float64(n) * float64(n) * float64(b.N)
					b.ReportMetric(flops/b.Elapsed().Seconds()/1e9, "GFLOP/s")
					// Per CPU-second: steady on a shared machine; divide by the threads for
					// the share of one core's peak.
					b.ReportMetric(flops/(cputime.Process()-cpu0).Seconds()/1e9, "cpu-GFLOP/s")
				})
			}
		}
	}
}

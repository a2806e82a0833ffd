//go:build amd64 && !purego

package kernels

//go:generate go run ./internal/asmgen -out microkernel_amd64.s

import (
	"os"
	"unsafe"

	"golang.org/x/sys/cpu"

	"github.com/dcl-beam/dcl-beam/internal/simd"
)

//go:noescape
func gemmAVX2(kc int, a, b, c unsafe.Pointer, ldc int)

//go:noescape
func gemmAVX512(kc int, a, b, c unsafe.Pointer, ldc int)

//go:noescape
func convIndirectAVX512(nseg, kc int, offs *int64, x, zero, b, c unsafe.Pointer, ldc int)

//go:noescape
func convIndirectAVX2(nseg, kc int, offs *int64, x, zero, b, c unsafe.Pointer, ldc int)

//go:noescape
func gatherRunsAVX512(dst *float32, w int, x *float32, offs *int64, kc, n int)

//go:noescape
func winogradInputAVX2(ptrs *unsafe.Pointer, tiles, c int, dst unsafe.Pointer, plane int)

//go:noescape
func winogradOutputAVX2(src unsafe.Pointer, plane, tiles, c int, ptrs *unsafe.Pointer)

//go:noescape
func winogradKernelAVX2(src *unsafe.Pointer, n int, dst unsafe.Pointer, plane int)

//go:noescape
func winogradFilterAVX2(ptrs *unsafe.Pointer, tiles, c int, dst unsafe.Pointer, plane int)

//go:noescape
func winogradGradOutputAVX2(src unsafe.Pointer, plane, n int, ptrs *unsafe.Pointer)

func fmaPeakAVX2(iters int)
func fmaPeakAVX512(iters int)

var (
	avx2Kernel   = &microKernel{name: "avx2-6x16", mr: 6, nr: 16, fn: gemmAVX2, indirect: convIndirectAVX2}
	avx512Kernel = &microKernel{name: "avx512-12x32", mr: 12, nr: 32, fn: gemmAVX512, indirect: convIndirectAVX512, gather: gatherRunsAVX512}
)

// bestKernel picks the widest micro-kernel the CPU and OS support. DCL_KERNEL=avx2|go caps the
// choice (for benchmarks that compare kernels and for machines where AVX-512 clocks down).
func bestKernel() *microKernel {
	limit := os.Getenv("DCL_KERNEL")
	hasAVX2 := cpu.X86.HasAVX2 && cpu.X86.HasFMA
	hasAVX512 := hasAVX2 && cpu.X86.HasAVX512F
	switch {
	case limit == "go" || !hasAVX2:
		return genericKernel
	case limit == "avx2" || !hasAVX512:
		return avx2Kernel
	default:
		return avx512Kernel
	}
}

// peakKernels lists the FMA peak loops this CPU can run.
func peakKernels() []peakLoop {
	var loops []peakLoop
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		loops = append(loops, peakLoop{name: "avx2", flopsPerIter: 12 * 8 * 2, fn: fmaPeakAVX2})
	}
	if cpu.X86.HasAVX512F {
		loops = append(loops, peakLoop{name: "avx512", flopsPerIter: 24 * 16 * 2, fn: fmaPeakAVX512})
	}
	return loops
}

// allKernels lists the micro-kernels this CPU runs, slowest first.
func allKernels() []*microKernel {
	ks := []*microKernel{genericKernel}
	if cpu.X86.HasAVX2 && cpu.X86.HasFMA {
		ks = append(ks, avx2Kernel)
		if cpu.X86.HasAVX512F {
			ks = append(ks, avx512Kernel)
		}
	}
	return ks
}

//go:noescape
func vecAddAVX2(dst, x, y *float32, n int)

//go:noescape
func vecSubAVX2(dst, x, y *float32, n int)

//go:noescape
func vecMulAVX2(dst, x, y *float32, n int)

//go:noescape
func vecDivAVX2(dst, x, y *float32, n int)

//go:noescape
func vecMaxAVX2(dst, x, y *float32, n int)

//go:noescape
func vecMinAVX2(dst, x, y *float32, n int)

//go:noescape
func vecAddScalarAVX2(dst, x *float32, s float32, n int)

//go:noescape
func vecSubScalarAVX2(dst, x *float32, s float32, n int)

//go:noescape
func vecMulScalarAVX2(dst, x *float32, s float32, n int)

//go:noescape
func vecDivScalarAVX2(dst, x *float32, s float32, n int)

//go:noescape
func vecMaxScalarAVX2(dst, x *float32, s float32, n int)

//go:noescape
func vecMinScalarAVX2(dst, x *float32, s float32, n int)

//go:noescape
func vecScalarSubAVX2(dst, x *float32, s float32, n int)

//go:noescape
func vecScalarDivAVX2(dst, x *float32, s float32, n int)

//go:noescape
func vecSignAVX2(dst, x *float32, n int)

//go:noescape
func vecAffineAVX2(dst, x, m, c *float32, n int)

//go:noescape
func channelSumsAVX2(t1, t2, x *float32, stride, n, rows int)

//go:noescape
func channelSumsCentredAVX2(t1, t2, x, y, center *float32, stride, n, rows int)

// hasVectorLoops is whether the element-wise loops use AVX2 (simd.AVX2; DCL_KERNEL=go turns
// them off).
var hasVectorLoops = simd.AVX2

// vectorized returns how many of n elements the AVX2 loops take (a multiple of 8), 0 without.
func vectorized(n int) int {
	if !hasVectorLoops {
		return 0
	}
	return n &^ 7
}

func vecBinary(op BinOp, dst, x, y []float32, n int) {
	fn := [...]func(dst, x, y *float32, n int){vecAddAVX2, vecSubAVX2, vecMulAVX2, vecDivAVX2, vecMaxAVX2, vecMinAVX2}[op]
	fn(&dst[0], &x[0], &y[0], n)
}

func vecBinaryScalar(op BinOp, dst, x []float32, s float32, scalarFirst bool, n int) {
	switch {
	case scalarFirst && op == OpSub:
		vecScalarSubAVX2(&dst[0], &x[0], s, n)
	case scalarFirst && op == OpDiv:
		vecScalarDivAVX2(&dst[0], &x[0], s, n)
	default: // the others commute
		fn := [...]func(dst, x *float32, s float32, n int){vecAddScalarAVX2, vecSubScalarAVX2, vecMulScalarAVX2, vecDivScalarAVX2, vecMaxScalarAVX2, vecMinScalarAVX2}[op]
		fn(&dst[0], &x[0], s, n)
	}
}

func vecSign(dst, x []float32, n int) { vecSignAVX2(&dst[0], &x[0], n) }

func vecAffine(dst, x, m, c []float32, n int) { vecAffineAVX2(&dst[0], &x[0], &m[0], &c[0], n) }

func vecChannelSums(t1, t2, x []float32, stride, n, rows int) {
	channelSumsAVX2(&t1[0], &t2[0], &x[0], stride, n, rows)
}

func vecChannelSumsCentred(t1, t2, x, y, center []float32, stride, n, rows int) {
	channelSumsCentredAVX2(&t1[0], &t2[0], &x[0], &y[0], &center[0], stride, n, rows)
}

// hasWinograd is whether Winograd's transforms have their AVX2 loops (without them the direct
// convolution is faster).
var hasWinograd = hasVectorLoops

func winogradInput(ptrs []unsafe.Pointer, tiles, c int, dst []float32, plane int) {
	winogradInputAVX2(&ptrs[0], tiles, c, unsafe.Pointer(&dst[0]), plane)
}

func winogradOutput(src []float32, plane, tiles, c int, ptrs []unsafe.Pointer) {
	winogradOutputAVX2(unsafe.Pointer(&src[0]), plane, tiles, c, &ptrs[0])
}

func winogradKernelVec(src *[9]unsafe.Pointer, n int, dst []float32, plane int) {
	winogradKernelAVX2(&src[0], n, unsafe.Pointer(&dst[0]), plane)
}

func winogradFilter(ptrs []unsafe.Pointer, tiles, c int, dst []float32, plane int) {
	winogradFilterAVX2(&ptrs[0], tiles, c, unsafe.Pointer(&dst[0]), plane)
}

func winogradGradOutput(src []float32, plane, n int, ptrs *[9]unsafe.Pointer) {
	winogradGradOutputAVX2(unsafe.Pointer(&src[0]), plane, n, &ptrs[0])
}

//go:build !amd64 || purego

package kernels

import "unsafe"

func bestKernel() *microKernel { return genericKernel }

// peakKernels lists the FMA peak loops this build has: none without amd64 assembly.
func peakKernels() []peakLoop { return nil }

// allKernels lists the micro-kernels this CPU runs.
func allKernels() []*microKernel { return []*microKernel{genericKernel} }

// hasVectorLoops is false: this build has no assembly loops.
var hasVectorLoops = false

func vectorized(int) int { return 0 }

func vecBinary(BinOp, []float32, []float32, []float32, int)           {}
func vecBinaryScalar(BinOp, []float32, []float32, float32, bool, int) {}
func vecSign([]float32, []float32, int)                               {}
func vecAffine([]float32, []float32, []float32, []float32, int)       {}
func vecChannelSums([]float32, []float32, []float32, int, int, int)   {}
func vecChannelSumsCentred([]float32, []float32, []float32, []float32, []float32, int, int, int) {
}

const hasWinograd = false

func winogradInput([]unsafe.Pointer, int, int, []float32, int)   {}
func winogradOutput([]float32, int, int, int, []unsafe.Pointer)  {}
func winogradKernelVec(*[9]unsafe.Pointer, int, []float32, int)  {}
func winogradFilter([]unsafe.Pointer, int, int, []float32, int)  {}
func winogradGradOutput([]float32, int, int, *[9]unsafe.Pointer) {}

//go:build amd64 && !purego

package augment

import (
	"unsafe"

	"github.com/dcl-beam/dcl-beam/internal/simd"
)

// The resampler's two passes, the blur's sums and the hue rotation have AVX2 loops, written
// by hand for speed: the reader makes ImageNet views on the fly, and these were its largest
// costs. They compute exactly the integers the Go loops do (same products, same sums, the
// same clamps by saturating packs), so every view is byte-identical with or without them.
// They run where simd.AVX2 says (DCL_KERNEL=go turns them off).
var hasVectorLoops = simd.AVX2

// vrowAVX2 writes n outputs (a positive multiple of 16) of one vertical-pass row: dst[i] =
// clip8(half + Σ_t src[t·stride + i]·k[t]) for taps taps.
//
//go:noescape
func vrowAVX2(dst, src *uint8, stride, n int, k *int32, taps int)

// hrow3AVX2 writes pairs pairs of RGB outputs of one horizontal-pass row, reading kx, the
// weights expanded per pair (coeffs.pairWeights). Each tap reads four bytes of a source
// pixel: the caller makes sure the byte after the last pixel read is inside src.
//
//go:noescape
func hrow3AVX2(dst, src *uint8, start *int32, kx *int32, pairs, taps int)

// sumTapsAVX2 is sumTaps for the first n (a positive multiple of 4) elements, with r ≥ 1 and
// the rows' starts in ptrs (tap t at ptrs[r+t]).
//
//go:noescape
func sumTapsAVX2(acc *uint64, n int, ptrs *unsafe.Pointer, q *uint64, r int, round uint64)

// hueAVX2 is hue's loop over n pixels (a positive multiple of 8) for the shift d (16.16
// sextants). It reads four bytes past the n pixels, which must be inside pix.
//
//go:noescape
func hueAVX2(pix *uint8, n int, d int32)

// saturationAVX2, grayscaleAVX2 and lumaSumAVX2 are the loops of saturation, grayscale and
// contrast's luma sum over n pixels (a positive multiple of 8; at most 2²³ for the sum). They
// read four bytes past the n pixels, which must be inside pix.
//
//go:noescape
func saturationAVX2(pix *uint8, n int, f int32)

//go:noescape
func grayscaleAVX2(pix *uint8, n int)

//go:noescape
func lumaSumAVX2(pix *uint8, n int, lanes *[8]int32)

// brightnessAVX2 is brightness's loop over n values (a positive multiple of 16).
//
//go:noescape
func brightnessAVX2(pix *uint8, n int, f int32)

// packLanesAVX2, midLanesAVX2 and bytesOfLanesAVX2 are the blur's moves between bytes and its
// two 32-bit lanes per uint64, for n elements (a positive multiple of 4; of 8 for
// bytesOfLanesAVX2): dst[j] = lo[j] | hi[j]<<32; dst[j] = acc[j] >> shift & 0xffff per lane;
// out0[j], out1[j] = lane 0 and lane 1 of acc[j] >> shift, each below 256.
//
//go:noescape
func packLanesAVX2(dst *uint64, lo, hi *uint8, n int)

//go:noescape
func midLanesAVX2(dst, acc *uint64, n, shift int)

//go:noescape
func bytesOfLanesAVX2(out0, out1 *uint8, acc *uint64, n, shift int)

//go:build amd64 && !purego

package jpeg

import "github.com/dcl-beam/dcl-beam/internal/simd"

// Every block of every decoded image is dequantised, inverse transformed and stored, so that
// has an AVX2 version, written by hand for speed (a change of this fork): reconstructAVX2
// computes idct's int32 arithmetic in its order, eight rows or columns at a time, and clamps
// with saturating packs, so the pixels do not change (TestReconstructAVX2IsGo). It runs where
// simd.AVX2 says (DCL_KERNEL=go turns it off).
var hasReconstructVec = simd.AVX2

// reconstructAVX2 multiplies b by q (both in natural order), applies idct, and writes the
// level-shifted, clamped samples to the 8×8 bytes at dst, rows stride apart. It leaves b as it
// was.
//
//go:noescape
func reconstructAVX2(b, q *block, k *idctVectors, dst *uint8, stride int)

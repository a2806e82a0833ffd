//go:build amd64 && !purego

package transforms

import "github.com/dcl-beam/dcl-beam/internal/simd"

// Views made on the fly turn every decoded JPEG from YCbCr into RGB, so that conversion has an
// AVX2 loop, written by hand for speed. It computes
// color.YCbCrToRGB's integers (its clamp is the saturating packs), so the bytes do not change.
// It runs where simd.AVX2 says (DCL_KERNEL=go turns it off).
var hasYCbCrVec = simd.AVX2

// ycbcrRowAVX2 converts n pixels (a positive multiple of 8) of one row: chroma per pixel, or
// per two pixels with halfChroma = 1 (4:2:0 and 4:2:2 rows that start on an even pixel). It
// writes four bytes past the n pixels' 3n, which the caller must own and overwrite.
//
//go:noescape
func ycbcrRowAVX2(out, y, cb, cr *uint8, n, halfChroma int)

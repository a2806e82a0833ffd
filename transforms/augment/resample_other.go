//go:build !amd64 || purego

package augment

import "unsafe"

var hasVectorLoops = false

func vrowAVX2(dst, src *uint8, stride, n int, k *int32, taps int) {
	panic("augment: no vector resampler in this build")
}

func hrow3AVX2(dst, src *uint8, start *int32, kx *int32, pairs, taps int) {
	panic("augment: no vector resampler in this build")
}

func sumTapsAVX2(acc *uint64, n int, ptrs *unsafe.Pointer, q *uint64, r int, round uint64) {
	panic("augment: no vector blur in this build")
}

func hueAVX2(pix *uint8, n int, d int32) {
	panic("augment: no vector hue in this build")
}

func saturationAVX2(pix *uint8, n int, f int32) {
	panic("augment: no vector saturation in this build")
}

func grayscaleAVX2(pix *uint8, n int) {
	panic("augment: no vector grayscale in this build")
}

func lumaSumAVX2(pix *uint8, n int, lanes *[8]int32) {
	panic("augment: no vector luma in this build")
}

func brightnessAVX2(pix *uint8, n int, f int32) {
	panic("augment: no vector brightness in this build")
}

func packLanesAVX2(dst *uint64, lo, hi *uint8, n int) {
	panic("augment: no vector blur in this build")
}

func midLanesAVX2(dst, acc *uint64, n, shift int) {
	panic("augment: no vector blur in this build")
}

func bytesOfLanesAVX2(out0, out1 *uint8, acc *uint64, n, shift int) {
	panic("augment: no vector blur in this build")
}

//go:build !amd64 || purego

package transforms

var hasYCbCrVec = false

func ycbcrRowAVX2(out, y, cb, cr *uint8, n, halfChroma int) {
	panic("transforms: no vector YCbCr conversion in this build")
}

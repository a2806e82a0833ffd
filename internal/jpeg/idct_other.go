//go:build !amd64 || purego

package jpeg

var hasReconstructVec = false

func reconstructAVX2(b, q *block, k *idctVectors, dst *uint8, stride int) {
	panic("jpeg: no vector reconstruction in this build")
}

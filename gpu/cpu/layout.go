package cpu

import (
	"fmt"
	"reflect"
	"unsafe"

	"github.com/dcl-beam/dcl-beam/gpu/kernels"
)

// rowMajorStrides returns the element strides of a row-major tensor.
func rowMajorStrides(dims []int) []int {
	st := make([]int, len(dims))
	s := 1
	for i := len(dims) - 1; i >= 0; i-- {
		st[i] = s
		s *= dims[i]
	}
	return st
}

// copyND copies a box of the given dims: for every index idx (row-major),
// dst[dOff + Σ idx·dStr] = src[sOff + Σ idx·sStr]. Strides may be negative. It runs in
// parallel over the outermost axes.
func copyND[T any](pool *kernels.Pool, dst, src []T, dims []int, dOff int, dStr []int, sOff int, sStr []int) {
	total := 1
	for _, d := range dims {
		total *= d
	}
	if total == 0 {
		return
	}
	if len(dims) == 0 {
		dst[dOff] = src[sOff]
		return
	}
	last := len(dims) - 1
	inner, dIn, sIn := dims[last], dStr[last], sStr[last]
	rows := total / inner
	pool.ParallelRange(rows, max(1, 4096/inner), func(lo, hi int) {
		idx := make([]int, last)
		rem := lo
		for a := last - 1; a >= 0; a-- {
			idx[a] = rem % dims[a]
			rem /= dims[a]
		}
		for row := lo; row < hi; row++ {
			d, s := dOff, sOff
			for a := range last {
				d += idx[a] * dStr[a]
				s += idx[a] * sStr[a]
			}
			if dIn == 1 && sIn == 1 {
				copy(dst[d:d+inner], src[s:s+inner])
			} else {
				for j := range inner {
					dst[d+j*dIn] = src[s+j*sIn]
				}
			}
			for a := last - 1; a >= 0; a-- {
				idx[a]++
				if idx[a] < dims[a] {
					break
				}
				idx[a] = 0
			}
		}
	})
}

// transposeF32 writes src (row-major, dims) with its axes permuted: output axis j is input axis
// perm[j], as GoMLX's Transpose.
func transposeF32(pool *kernels.Pool, dst, src []float32, dims, perm []int) {
	outDims := make([]int, len(perm))
	sStr := make([]int, len(perm))
	inStr := rowMajorStrides(dims)
	for j, p := range perm {
		outDims[j] = dims[p]
		sStr[j] = inStr[p]
	}
	copyND(pool, dst, src, outDims, 0, rowMajorStrides(outDims), 0, sStr)
}

// isIdentity reports whether perm is 0, 1, 2, ...
func isIdentity(perm []int) bool {
	for i, p := range perm {
		if i != p {
			return false
		}
	}
	return true
}

// rawCopyND is copyND on buffers of any dtype, by element size.
func rawCopyND(pool *kernels.Pool, dst, src any, dims []int, dOff int, dStr []int, sOff int, sStr []int) error {
	dv, sv := reflect.ValueOf(dst), reflect.ValueOf(src)
	if dv.Type() != sv.Type() {
		return fmt.Errorf("copying %s into %s", sv.Type(), dv.Type())
	}
	size := int(dv.Type().Elem().Size())
	switch size {
	case 1:
		copyND(pool, reinterpret[uint8](dv), reinterpret[uint8](sv), dims, dOff, dStr, sOff, sStr)
	case 2:
		copyND(pool, reinterpret[uint16](dv), reinterpret[uint16](sv), dims, dOff, dStr, sOff, sStr)
	case 4:
		copyND(pool, reinterpret[uint32](dv), reinterpret[uint32](sv), dims, dOff, dStr, sOff, sStr)
	case 8:
		copyND(pool, reinterpret[uint64](dv), reinterpret[uint64](sv), dims, dOff, dStr, sOff, sStr)
	case 16:
		copyND(pool, reinterpret[[2]uint64](dv), reinterpret[[2]uint64](sv), dims, dOff, dStr, sOff, sStr)
	default:
		return fmt.Errorf("elements of %d bytes are not supported", size)
	}
	return nil
}

// reinterpret views a slice value as a slice of T of the same total size in bytes.
func reinterpret[T any](v reflect.Value) []T {
	n := v.Len()
	if n == 0 {
		return nil
	}
	var t T
	bytes := n * int(v.Type().Elem().Size())
	return unsafe.Slice((*T)(v.UnsafePointer()), bytes/int(unsafe.Sizeof(t)))
}

// fillRaw sets every element of flat to the first element of value (same slice type).
func fillRaw(flat, value any) {
	fv, vv := reflect.ValueOf(flat), reflect.ValueOf(value)
	if fv.Len() == 0 {
		return
	}
	fv.Index(0).Set(vv.Index(0))
	// Doubling copies: log2(n) calls of reflect.Copy instead of n reflective sets.
	for filled := 1; filled < fv.Len(); filled *= 2 {
		reflect.Copy(fv.Slice(filled, fv.Len()), fv.Slice(0, filled))
	}
}

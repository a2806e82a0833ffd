//go:build unix

package kernels

import (
	"syscall"
	"unsafe"
)

// mapFloats maps an anonymous region of at least n floats, whole pages, never unmapped (the
// pool reuses it); it falls back to the heap if the system refuses.
func mapFloats(n int) []float32 {
	page := syscall.Getpagesize()
	size := (max(n, 1)*4 + page - 1) / page * page
	b, err := syscall.Mmap(-1, 0, size, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return make([]float32, n)
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), size/4)
}

package kernels

import "sync"

// slicePool recycles one kind of per-call workspace: the packing offsets and panels of the
// convolutions and the partial sums of a split matrix multiply would otherwise be garbage by
// the gigabyte per training step, which lets the heap grow by as much before a collection.
type slicePool[T any] struct{ p sync.Pool }

// get returns a slice of n elements, stale contents (clear it where zeros are needed).
func (sp *slicePool[T]) get(n int) *[]T {
	if v, ok := sp.p.Get().(*[]T); ok && cap(*v) >= n {
		*v = (*v)[:n]
		return v
	}
	s := make([]T, n)
	return &s
}

// put gives back a slice from get; the caller keeps no reference to it.
func (sp *slicePool[T]) put(v *[]T) { sp.p.Put(v) }

var (
	intScratch   slicePool[int]
	int64Scratch slicePool[int64]
	koffScratch  slicePool[[3]int]
	phaseRows    slicePool[int] // convIndirect's output pixels by phase
)

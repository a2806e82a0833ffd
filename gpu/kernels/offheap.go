package kernels

import "sync"

// offHeap hands out float32 workspaces that live outside the Go heap and keeps them for reuse.
// A workspace in the heap that is kept between calls (in a sync.Pool) is reachable when the
// collector marks, so the heap's next target, twice what is reachable, grows by twice its
// size; at the training step's peak (the start of the backward pass, every activation alive)
// that doubles the workspaces' cost in resident memory. Outside the heap a workspace costs its
// size once. Workspaces hold floats only, never Go pointers, so the collector need not see
// them. Where the system cannot map memory they come from the heap (offheap_other.go).
//
// Workspaces are never unmapped: mapping afresh costs a page fault per 4 KiB, which for the
// Winograd transforms of every call came to a seventh of the training step. The pool holds
// the most the process ever used at once.
type offHeap struct {
	mu   sync.Mutex
	free [][]float32
}

// get returns a workspace of n floats (stale contents): the smallest free one that holds n,
// or a new one.
func (o *offHeap) get(n int) []float32 {
	o.mu.Lock()
	best := -1
	for i, s := range o.free {
		if cap(s) >= n && (best < 0 || cap(s) < cap(o.free[best])) {
			best = i
		}
	}
	if best >= 0 {
		s := o.free[best]
		o.free[best] = o.free[len(o.free)-1]
		o.free = o.free[:len(o.free)-1]
		o.mu.Unlock()
		return s[:n]
	}
	o.mu.Unlock()
	return mapFloats(n)[:n]
}

// put gives back a workspace from get; the caller keeps no reference to it.
func (o *offHeap) put(s []float32) {
	if cap(s) == 0 {
		return
	}
	o.mu.Lock()
	o.free = append(o.free, s[:cap(s)])
	o.mu.Unlock()
}

// floats is the process's pool of off-heap workspaces.
var floats offHeap

package kernels

import (
	"sync/atomic"
	"testing"
)

func TestParallelForRunsEveryChunkOnce(t *testing.T) {
	for _, threads := range []int{1, 2, 4} {
		p := NewPool(threads)
		for _, chunks := range []int{0, 1, 2, 7, 100} {
			hits := make([]atomic.Int32, chunks)
			p.ParallelFor(chunks, func(c int) { hits[c].Add(1) })
			for c := range hits {
				if n := hits[c].Load(); n != 1 {
					t.Fatalf("threads %d chunks %d: chunk %d ran %d times", threads, chunks, c, n)
				}
			}
		}
		p.Close()
	}
}

// TestParallelForNested checks that loops started from inside a loop's chunks finish even when
// every worker is busy (the helpers that never start are skipped, not waited for).
func TestParallelForNested(t *testing.T) {
	p := NewPool(2)
	defer p.Close()
	var total atomic.Int64
	p.ParallelFor(8, func(int) {
		p.ParallelFor(8, func(int) {
			p.ParallelFor(4, func(int) { total.Add(1) })
		})
	})
	if got := total.Load(); got != 8*8*4 {
		t.Fatalf("ran %d innermost chunks, want %d", got, 8*8*4)
	}
}

func TestParallelForReraisesPanics(t *testing.T) {
	p := NewPool(2)
	defer p.Close()
	defer func() {
		if r := recover(); r != "boom" {
			t.Fatalf("recovered %v, want boom", r)
		}
	}()
	p.ParallelFor(16, func(c int) {
		if c == 5 {
			panic("boom")
		}
	})
}

func TestParallelRangeCoversRange(t *testing.T) {
	p := NewPool(3)
	defer p.Close()
	seen := make([]atomic.Int32, 1000)
	p.ParallelRange(len(seen), 10, func(lo, hi int) {
		for i := lo; i < hi; i++ {
			seen[i].Add(1)
		}
	})
	for i := range seen {
		if seen[i].Load() != 1 {
			t.Fatalf("index %d covered %d times", i, seen[i].Load())
		}
	}
}

func TestClosedPoolStillRuns(t *testing.T) {
	p := NewPool(2)
	p.Close()
	p.Close()
	var n atomic.Int32
	p.ParallelFor(5, func(int) { n.Add(1) })
	if n.Load() != 5 {
		t.Fatalf("ran %d chunks after Close, want 5", n.Load())
	}
}

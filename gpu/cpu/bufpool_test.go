package cpu

import (
	"errors"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // GoMLX graphs read best unqualified
	"github.com/gomlx/gomlx/core/tensors"
)

// newPoolingBackend returns a backend whose pool keeps buffers from 1 KiB (the test graphs are
// small) and fills every reused float32 buffer with NaNs, so that an operation reading stale
// contents shows in its results.
func newPoolingBackend(t testing.TB) *Backend {
	t.Helper()
	be := newTestBackend(t)
	be.bufs.minBytes = 1 << 10
	be.poisonReused = true
	return be
}

func bitsEqual(t testing.TB, name string, got, want [][]float32) {
	t.Helper()
	for i := range want {
		for j := range want[i] {
			if math.Float32bits(got[i][j]) != math.Float32bits(want[i][j]) {
				t.Fatalf("%s: output #%d element %d = %g, want %g", name, i, j, got[i][j], want[i][j])
			}
		}
	}
}

func execFlat(t testing.TB, exec *Exec, inputs []*tensors.Tensor) [][]float32 {
	t.Helper()
	args := make([]any, len(inputs))
	for i, in := range inputs {
		args[i] = in
	}
	outs, err := exec.Call(args...)
	if err != nil {
		t.Error(err)
		return nil
	}
	res := make([][]float32, len(outs))
	for i, o := range outs {
		res[i] = tensors.MustCopyFlatData[float32](o)
		o.MustFinalizeAll()
	}
	return res
}

// TestPoolRecyclesExactly runs a training graph repeatedly, then from several goroutines at
// once, on a backend that recycles its buffers (poisoned when reused): every result equals,
// bit for bit, the one of a backend that keeps none, and after the first execution the graph
// allocates no new large buffers.
func TestPoolRecyclesExactly(t *testing.T) {
	inputs := residualInputs(rand.New(rand.NewPCG(97, 98)))
	ref := newTestBackend(t)
	ref.bufs.minBytes = math.MaxInt64 // keeps nothing
	want := runGraph(t, ref, residualStep, inputs...)
	if s := ref.PoolStats(); s.Hits != 0 || s.HeldBuffers != 0 {
		t.Fatalf("a backend that keeps nothing reports %+v", s)
	}

	be := newPoolingBackend(t)
	exec, err := NewExec(be, residualStep)
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	local := make([]*tensors.Tensor, len(inputs))
	for i, in := range inputs {
		if local[i], err = in.LocalClone(); err != nil {
			t.Fatal(err)
		}
	}
	bitsEqual(t, "first execution", execFlat(t, exec, local), want)
	first := be.PoolStats()
	for run := range 3 {
		bitsEqual(t, "sequential execution", execFlat(t, exec, local), want)
		if s := be.PoolStats(); run > 0 && s.Misses != first.Misses {
			t.Fatalf("execution %d allocated %d new buffers (%d bytes); want every large one recycled", run+2, s.Misses-first.Misses, s.MissBytes-first.MissBytes)
		}
	}
	if s := be.PoolStats(); s.Hits == 0 || s.HeldBuffers == 0 {
		t.Fatalf("the pool recycled nothing: %+v", s)
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				if got := execFlat(t, exec, local); got != nil {
					bitsEqual(t, "concurrent execution", got, want)
				}
			}
		}()
	}
	wg.Wait()
}

// TestPoolGivesBack checks the pool's bounds: buffers that two executions of a graph as large
// do not take go back, everything goes back when the last executable is finalized, and a
// buffer released twice is refused.
func TestPoolGivesBack(t *testing.T) {
	be := newPoolingBackend(t)
	r := rand.New(rand.NewPCG(99, 100))
	big, _ := randTensor(r, 64, 64)
	other, _ := randTensor(r, 32, 128) // as many values, another shape
	graph := func(in []*Node) []*Node { return []*Node{ReduceAllSum(Mul(Exp(in[0]), in[0]))} }
	execBig, err := NewExec(be, graph)
	if err != nil {
		t.Fatal(err)
	}
	execFlat(t, execBig, []*tensors.Tensor{big})
	if s := be.PoolStats(); s.HeldBytes < 64*64*4 {
		t.Fatalf("after a 64×64 graph the pool holds %d bytes, want its temporaries", s.HeldBytes)
	}
	execOther, err := NewExec(be, graph)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		execFlat(t, execOther, []*tensors.Tensor{other})
	}
	// The graph's one temporary (Exp's result, which Mul overwrites) is all it keeps.
	if s := be.PoolStats(); s.HeldBytes > 32*128*4 {
		t.Fatalf("after three executions of a 32×128 graph the pool holds %d bytes: the 64×64 buffers should have gone back", s.HeldBytes)
	}
	execBig.Finalize()
	execOther.Finalize()
	if s := be.PoolStats(); s.HeldBytes != 0 {
		t.Fatalf("with every executable finalized the pool holds %d bytes, want 0", s.HeldBytes)
	}

	// Double release, with an executable alive so that the pool keeps buffers.
	exec, err := NewExec(be, graph)
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	execFlat(t, exec, []*tensors.Tensor{big}) // compiles it
	buf, _, err := be.NewSharedBuffer(0, shapes.Make(big.DType(), 64, 64))
	if err != nil {
		t.Fatal(err)
	}
	if err := buf.Finalize(); err != nil {
		t.Fatal(err)
	}
	if err := buf.Finalize(); !errors.Is(err, errReleasedTwice) {
		t.Fatalf("second release: %v, want %v", err, errReleasedTwice)
	}
}

package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/gobackend"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // GoMLX graphs read best unqualified
	"github.com/gomlx/gomlx/core/tensors"
)

// newTestBackend returns a backend on 2 threads (so the parallel paths run), finalized at the
// end of the test.
func newTestBackend(t testing.TB) *Backend {
	t.Helper()
	be, err := New(Config{Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(be.Finalize)
	return be
}

// newGoBackend returns GoMLX's own pure-Go backend ("go"), the reference for the operations it runs
// correctly.
func newGoBackend(t testing.TB) compute.Backend {
	t.Helper()
	goBackend, err := gobackend.New("ops_sequential")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(goBackend.Finalize)
	return goBackend
}

// runGraph builds fn on be, runs it on the inputs and returns every output as float32 data.
func runGraph(t testing.TB, be compute.Backend, fn func(in []*Node) []*Node, inputs ...*tensors.Tensor) [][]float32 {
	t.Helper()
	exec, err := NewExec(be, fn)
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Finalize()
	args := make([]any, len(inputs))
	for i, in := range inputs {
		c, err := in.LocalClone() // a tensor sticks to the first backend it runs on
		if err != nil {
			t.Fatal(err)
		}
		args[i] = c
	}
	outs, err := exec.Call(args...)
	if err != nil {
		t.Fatal(err)
	}
	res := make([][]float32, len(outs))
	for i, o := range outs {
		res[i] = tensors.MustCopyFlatData[float32](o)
		o.MustFinalizeAll()
	}
	return res
}

func randTensor(r *rand.Rand, dims ...int) (*tensors.Tensor, []float32) {
	n := 1
	for _, d := range dims {
		n *= d
	}
	data := make([]float32, n)
	for i := range data {
		data[i] = r.Float32()*2 - 1
	}
	return tensors.FromFlatDataAndDimensions(data, dims...), data
}

// assertClose compares with a tolerance relative to the largest magnitude in want.
func assertClose(t testing.TB, name string, got, want []float32, rel float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", name, len(got), len(want))
	}
	scale := 1e-6
	for _, w := range want {
		scale = max(scale, math.Abs(float64(w)))
	}
	for i := range want {
		if d := math.Abs(float64(got[i] - want[i])); d > rel*scale || math.IsNaN(float64(got[i])) {
			t.Fatalf("%s: element %d = %g, want %g (|diff| %g > %g)", name, i, got[i], want[i], d, rel*scale)
		}
	}
}

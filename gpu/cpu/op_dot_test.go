package cpu

import (
	"math/rand/v2"
	"testing"

	"github.com/gomlx/compute"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // GoMLX graphs read best unqualified
)

// TestDotGeneralMatchesGoBackend runs DotGeneral over layouts that read in place (row- and
// column-major operands, batches) and layouts that need a transpose, against the pure-Go backend.
func TestDotGeneralMatchesGoBackend(t *testing.T) {
	be, ref := newTestBackend(t), newGoBackend(t)
	r := rand.New(rand.NewPCG(21, 22))
	cases := []struct {
		name              string
		lhs, rhs          []int
		lContract, lBatch []int
		rContract, rBatch []int
	}{
		{"matmul", []int{13, 7}, []int{7, 19}, []int{1}, nil, []int{0}, nil},
		{"AxBt (similarity)", []int{20, 9}, []int{17, 9}, []int{1}, nil, []int{1}, nil},
		{"AtxB (weight gradient)", []int{30, 8}, []int{30, 5}, []int{0}, nil, []int{0}, nil},
		{"AtxBt", []int{6, 11}, []int{4, 6}, []int{0}, nil, []int{1}, nil},
		{"batched", []int{3, 5, 7}, []int{3, 7, 4}, []int{2}, []int{0}, []int{1}, []int{0}},
		{"batch last", []int{5, 7, 3}, []int{7, 4, 3}, []int{1}, []int{2}, []int{0}, []int{2}},
		{"two contracting axes", []int{4, 3, 5, 6}, []int{5, 3, 2}, []int{1, 2}, nil, []int{1, 0}, nil},
		{"vector", []int{9}, []int{9}, []int{0}, nil, []int{0}, nil},
		{"many small batches", []int{64, 3, 4}, []int{64, 4, 2}, []int{2}, []int{0}, []int{1}, []int{0}},
		{"large", []int{150, 300}, []int{300, 70}, []int{1}, nil, []int{0}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lt, _ := randTensor(r, c.lhs...)
			rt, _ := randTensor(r, c.rhs...)
			fn := func(in []*Node) []*Node {
				return []*Node{DotGeneral(in[0], c.lContract, c.lBatch, in[1], c.rContract, c.rBatch)}
			}
			got := runGraph(t, be, fn, lt, rt)[0]
			want := runGraph(t, ref, fn, lt, rt)[0]
			assertClose(t, c.name, got, want, 1e-5)
		})
	}
}

// TestDotAndDenseGradient checks Dot and the gradients of a dense layer (DotGeneral with
// transposed operands) against the pure-Go backend, whose DotGeneral and its gradients are correct.
func TestDotAndDenseGradient(t *testing.T) {
	be, ref := newTestBackend(t), newGoBackend(t)
	r := rand.New(rand.NewPCG(23, 24))
	xt, _ := randTensor(r, 16, 12)
	wt, _ := randTensor(r, 12, 10)
	fn := func(in []*Node) []*Node {
		y := DotProduct(in[0], in[1])
		loss := ReduceAllSum(Mul(y, y))
		g := Gradient(loss, in[0], in[1])
		return []*Node{y, g[0], g[1]}
	}
	got := runGraph(t, be, fn, xt, wt)
	want := runGraph(t, ref, fn, xt, wt)
	for i, name := range []string{"product", "gradient wrt x", "gradient wrt w"} {
		assertClose(t, name, got[i], want[i], 1e-5)
	}
}

// TestDotGeneralIntegersGoToGoBackend checks a non-float32 DotGeneral still runs (on the pure-Go backend).
func TestDotGeneralIntegersGoToGoBackend(t *testing.T) {
	be := newTestBackend(t)
	b := be.Builder("ints")
	f := b.Main()
	x, err := f.Constant([]int32{1, 2, 3, 4}, 2, 2)
	if err != nil {
		t.Fatal(err)
	}
	y, err := f.DotGeneral(x, []int{1}, nil, x, []int{0}, nil, compute.DotGeneralConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Return([]compute.Value{y}, nil); err != nil {
		t.Fatal(err)
	}
	exe, err := b.Compile()
	if err != nil {
		t.Fatal(err)
	}
	outs, err := exe.Execute(nil, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	got := make([]int32, 4)
	if err := outs[0].ToFlatData(got); err != nil {
		t.Fatal(err)
	}
	if want := []int32{7, 10, 15, 22}; got[0] != want[0] || got[1] != want[1] || got[2] != want[2] || got[3] != want[3] {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// TestDotGradientRunsAsMatrixProducts checks the gradients GoMLX builds for DotGeneral (a
// broadcast product summed over the contracted axes) are computed as matrix products, with
// the values the pure-Go backend gets by materialising the product.
func TestDotGradientRunsAsMatrixProducts(t *testing.T) {
	ref := newGoBackend(t)
	be, err := New(Config{Threads: 2, ProfileOps: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(be.Finalize)
	r := rand.New(rand.NewPCG(25, 26))
	cases := []struct {
		name     string
		lhs, rhs []int
		lc, lb   []int
		rc, rb   []int
	}{
		{"dense", []int{32, 24}, []int{24, 16}, []int{1}, nil, []int{0}, nil},
		{"similarity", []int{40, 16}, []int{30, 16}, []int{1}, nil, []int{1}, nil},
		{"batched", []int{3, 20, 12}, []int{3, 12, 10}, []int{2}, []int{0}, []int{1}, []int{0}},
		{"two contracting axes", []int{9, 4, 5}, []int{4, 5, 11}, []int{1, 2}, nil, []int{0, 1}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			lt, _ := randTensor(r, c.lhs...)
			rt, _ := randTensor(r, c.rhs...)
			fn := func(in []*Node) []*Node {
				y := DotGeneral(in[0], c.lc, c.lb, in[1], c.rc, c.rb)
				return Gradient(ReduceAllSum(Mul(y, y)), in[0], in[1])
			}
			be.ResetOpStats()
			got := runGraph(t, be, fn, lt, rt)
			want := runGraph(t, ref, fn, lt, rt)
			assertClose(t, "gradient wrt lhs", got[0], want[0], 1e-5)
			assertClose(t, "gradient wrt rhs", got[1], want[1], 1e-5)
			calls := map[string]int{}
			for _, s := range be.OpStats() {
				calls[s.Name] = s.Calls
			}
			if calls["DotGeneral"] != 3 {
				t.Errorf("%d DotGeneral calls, want 3 (forward and two gradients): %v", calls["DotGeneral"], be.OpStats())
			}
		})
	}
}

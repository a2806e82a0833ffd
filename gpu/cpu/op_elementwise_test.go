package cpu

import (
	"math"
	"math/rand/v2"
	"testing"

	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // GoMLX graphs read best unqualified
	"github.com/gomlx/gomlx/core/tensors"
)

// TestElementwiseMatchesGoBackend runs every element-wise operation implemented here over each
// broadcast pattern (same shape, scalar on either side, trailing and leading vectors, and a
// pattern left to the pure-Go backend) and compares with the pure-Go backend.
func TestElementwiseMatchesGoBackend(t *testing.T) {
	be, ref := newTestBackend(t), newGoBackend(t)
	r := rand.New(rand.NewPCG(61, 62))
	binaries := map[string]func(a, b *Node) *Node{"Add": Add, "Sub": Sub, "Mul": Mul, "Div": Div, "Max": Max, "Min": Min}
	pairs := []struct {
		name   string
		lhs    []int
		rhs    []int
		noSwap bool
	}{
		{"same shape", []int{7, 5, 3}, []int{7, 5, 3}, false},
		{"big", []int{64, 33, 17}, []int{64, 33, 17}, false},
		{"scalar", []int{40, 30, 20}, nil, false},
		{"trailing vector", []int{30, 20, 16}, []int{1, 1, 16}, false},
		{"trailing block", []int{30, 20, 16}, []int{1, 20, 16}, false},
		{"leading vector", []int{30, 20, 16}, []int{30, 1, 1}, false},
		{"middle (pure-Go backend)", []int{6, 5, 4}, []int{1, 5, 1}, false},
		{"both broadcast (pure-Go backend)", []int{6, 1}, []int{1, 4}, true},
	}
	for _, p := range pairs {
		for name, f := range binaries {
			for _, swap := range []bool{false, true} {
				if swap && p.noSwap {
					continue
				}
				lt, _ := randTensor(r, p.lhs...)
				rt, _ := randTensor(r, p.rhs...)
				if swap {
					lt, rt = rt, lt
				}
				fn := func(in []*Node) []*Node { return []*Node{f(in[0], in[1])} }
				got := runGraph(t, be, fn, lt, rt)[0]
				want := runGraph(t, ref, fn, lt, rt)[0]
				assertClose(t, p.name+"/"+name, got, want, 1e-6)
			}
		}
	}
	unaries := map[string]func(*Node) *Node{"Neg": Neg, "Abs": Abs, "Sign": Sign, "Sqrt": func(x *Node) *Node { return Sqrt(Abs(x)) },
		"Rsqrt": func(x *Node) *Node { return Rsqrt(AddScalar(Abs(x), 0.1)) }, "Exp": Exp, "Log": func(x *Node) *Node { return Log(AddScalar(Abs(x), 0.1)) }}
	xt, _ := randTensor(r, 50, 41)
	for name, f := range unaries {
		fn := func(in []*Node) []*Node { return []*Node{f(in[0])} }
		assertClose(t, name, runGraph(t, be, fn, xt)[0], runGraph(t, ref, fn, xt)[0], 1e-6)
	}
}

func TestMaxMinPropagateNaN(t *testing.T) {
	be := newTestBackend(t)
	nan := float32(math.NaN())
	x := tensors.FromValue([]float32{nan, 1, 2, nan})
	y := tensors.FromValue([]float32{1, nan, 3, nan})
	got := runGraph(t, be, func(in []*Node) []*Node { return []*Node{Max(in[0], in[1]), Min(in[0], in[1])} }, x, y)
	for k, want := range [][]float32{{nan, nan, 3, nan}, {nan, nan, 2, nan}} {
		for i := range want {
			if (want[i] != want[i]) != (got[k][i] != got[k][i]) || (want[i] == want[i] && got[k][i] != want[i]) {
				t.Fatalf("output %d = %v, want %v", k, got[k], want)
			}
		}
	}
}

func TestReduceTransposeBroadcastMatchGoBackend(t *testing.T) {
	be, ref := newTestBackend(t), newGoBackend(t)
	r := rand.New(rand.NewPCG(63, 64))
	xt, _ := randTensor(r, 6, 7, 5, 4)
	bigT, _ := randTensor(r, 300, 256)
	vt, _ := randTensor(r, 4)
	cases := map[string]func(in []*Node) *Node{
		"sum leading":      func(in []*Node) *Node { return ReduceSum(in[0], 0, 1, 2) },
		"sum trailing":     func(in []*Node) *Node { return ReduceSum(in[0], 2, 3) },
		"sum middle":       func(in []*Node) *Node { return ReduceSum(in[0], 1, 2) },
		"sum all":          func(in []*Node) *Node { return ReduceAllSum(in[0]) },
		"sum split (Go)":   func(in []*Node) *Node { return ReduceSum(in[0], 0, 2) },
		"max leading":      func(in []*Node) *Node { return ReduceMax(in[0], 0, 1) },
		"min trailing":     func(in []*Node) *Node { return ReduceMin(in[0], 3) },
		"big sum rows":     func(in []*Node) *Node { return ReduceSum(in[1], 0) },
		"big sum columns":  func(in []*Node) *Node { return ReduceSum(in[1], 1) },
		"transpose":        func(in []*Node) *Node { return TransposeAllAxes(in[0], 2, 0, 3, 1) },
		"broadcast vector": func(in []*Node) *Node { return BroadcastToDims(Reshape(in[2], 1, 1, 4), 6, 3, 4) },
		"broadcast scalar": func(in []*Node) *Node { return BroadcastToDims(Reshape(ReduceAllSum(in[2]), 1, 1), 5, 3) },
		"broadcast prefix": func(in []*Node) *Node { return BroadcastPrefix(in[2], 3, 2) },
	}
	for name, f := range cases {
		fn := func(in []*Node) []*Node { return []*Node{f(in)} }
		got := runGraph(t, be, fn, xt, bigT, vt)[0]
		want := runGraph(t, ref, fn, xt, bigT, vt)[0]
		assertClose(t, name, got, want, 1e-5)
	}
}

package cpu

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // GoMLX graphs read best unqualified
	"github.com/gomlx/gomlx/core/tensors"
)

// TestProfileShapesTimesEachLayer checks Config.ProfileShapes keeps one timing per operation
// and inputs' shapes: two products of different shapes are two entries, and without it one.
func TestProfileShapesTimesEachLayer(t *testing.T) {
	r := rand.New(rand.NewPCG(41, 42))
	at, _ := randTensor(r, 8, 16)
	bt, _ := randTensor(r, 16, 4)
	ct, _ := randTensor(r, 4, 6)
	for _, shapes := range []bool{false, true} {
		be, err := New(Config{Threads: 1, ProfileOps: true, ProfileShapes: shapes})
		if err != nil {
			t.Fatal(err)
		}
		runGraph(t, be, func(in []*Node) []*Node {
			return []*Node{DotGeneral(DotGeneral(in[0], []int{1}, nil, in[1], []int{0}, nil), []int{1}, nil, in[2], []int{0}, nil)}
		}, at, bt, ct)
		var dots []OpStat
		for _, s := range be.OpStats() {
			if s.Name == "DotGeneral" {
				dots = append(dots, s)
			}
		}
		be.Finalize()
		want := 1
		if shapes {
			want = 2
		}
		if len(dots) != want {
			t.Fatalf("ProfileShapes %v: %d DotGeneral timings %v, want %d", shapes, len(dots), dots, want)
		}
		if shapes {
			table := FormatOpStats(dots)
			for _, s := range []string{"(Float32)[8, 16] (Float32)[16, 4]", "(Float32)[8, 4] (Float32)[4, 6]"} {
				if !strings.Contains(table, s) {
					t.Errorf("the table does not list %s:\n%s", s, table)
				}
			}
		}
	}
}

// TestBatchNormIsTheSameOnAnyThreads checks batch norm's statistics and gradient give the same
// bits on one, two and three threads, for operands large enough to be summed in parts. The
// operand is made so that the order of the float64 sums shows: a channel holds 1e18, ones,
// then -1e18 and ones, so a sum taken in one run loses the first ones and a sum in two parts
// the second.
func TestBatchNormIsTheSameOnAnyThreads(t *testing.T) {
	r := rand.New(rand.NewPCG(43, 44))
	for _, c := range []struct {
		dims []int
		axis int
	}{{[]int{2, 3, 128, 128}, 1}, {[]int{4, 96, 96, 8}, 3}} {
		n, ch := 1, c.dims[c.axis]
		for _, d := range c.dims {
			n *= d
		}
		x := make([]float32, n)
		for i := range x {
			x[i] = 1
		}
		// Channel 0's first value, and its first value in the second half of the operand.
		x[0], x[n/2] = 1e18, -1e18
		xt := tensors.FromFlatDataAndDimensions(x, c.dims...)
		dyt := tensors.FromFlatDataAndDimensions(slices.Clone(x), c.dims...)
		st, _ := randTensor(r, ch)
		fn := func(in []*Node) []*Node {
			y, mean, variance := InternalBatchNormForTraining(in[0], in[2], in[2], 1e-3, c.axis)
			dx, ds, do := InternalBatchNormGradient(in[0], in[2], mean, AddScalar(Abs(variance), 1), in[1], 1e-3, c.axis)
			return []*Node{y, mean, variance, dx, ds, do}
		}
		var want [][]float32
		for _, threads := range []int{1, 2, 3} {
			be, err := New(Config{Threads: threads})
			if err != nil {
				t.Fatal(err)
			}
			got := runGraph(t, be, fn, xt, dyt, st)
			be.Finalize()
			if want == nil {
				want = got
				continue
			}
			bitsEqual(t, fmt.Sprintf("%v on %d threads", c.dims, threads), got, want)
		}
	}
}

package cpu

import (
	"math/rand/v2"
	"testing"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"

	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph" //nolint:revive // GoMLX graphs read best unqualified
	"github.com/gomlx/gomlx/core/tensors"
)

func TestReverseMatchesLoop(t *testing.T) {
	be := newTestBackend(t)
	r := rand.New(rand.NewPCG(31, 32))
	xt, x := randTensor(r, 3, 4, 5)
	got := runGraph(t, be, func(in []*Node) []*Node {
		return []*Node{Reverse(in[0], 0, 2), Reverse(in[0], 1)}
	}, xt)
	want02 := make([]float32, len(x))
	want1 := make([]float32, len(x))
	for i := range 3 {
		for j := range 4 {
			for k := range 5 {
				want02[(i*4+j)*5+k] = x[((2-i)*4+j)*5+(4-k)]
				want1[(i*4+j)*5+k] = x[(i*4+(3-j))*5+k]
			}
		}
	}
	assertClose(t, "axes 0,2", got[0], want02, 0)
	assertClose(t, "axis 1", got[1], want1, 0)
}

func TestPadMatchesLoop(t *testing.T) {
	be := newTestBackend(t)
	r := rand.New(rand.NewPCG(33, 34))
	xt, x := randTensor(r, 4, 5)
	// Axis 0: 1 before, 2 after, 1 between; axis 1: crop 1 before, 1 after... plus 1 between.
	cfg := []PadAxis{{Start: 1, End: 2, Interior: 1}, {Start: -1, End: -2, Interior: 1}}
	got := runGraph(t, be, func(in []*Node) []*Node {
		return []*Node{Pad(in[0], Const(in[0].Graph(), float32(7)), cfg...)}
	}, xt)[0]
	// Direct: place x[i][j] at (1+2i, -1+2j) in a 10×6 grid of 7s.
	rows, cols := 1+4+3+2, -1+5+4-2
	want := make([]float32, rows*cols)
	for i := range want {
		want[i] = 7
	}
	for i := range 4 {
		for j := range 5 {
			pi, pj := 1+2*i, -1+2*j
			if pj >= 0 && pj < cols {
				want[pi*cols+pj] = x[i*5+j]
			}
		}
	}
	assertClose(t, "pad", got, want, 0)
}

// TestSliceGradient checks the gradient of a strided Slice, which GoMLX builds with Pad.
func TestSliceGradient(t *testing.T) {
	be := newTestBackend(t)
	r := rand.New(rand.NewPCG(35, 36))
	xt, _ := randTensor(r, 6, 7)
	got := runGraph(t, be, func(in []*Node) []*Node {
		s := Slice(in[0], AxisRange(1, 6).Stride(2), AxisRange(0, 7).Stride(3))
		return Gradient(ReduceAllSum(MulScalar(s, 3)), in[0])
	}, xt)[0]
	want := make([]float32, 42)
	for _, i := range []int{1, 3, 5} {
		for _, j := range []int{0, 3, 6} {
			want[i*7+j] = 3
		}
	}
	assertClose(t, "slice gradient", got, want, 0)
}

// TestBatchNormMatchesFormula checks the fused batch-norm operations (training output, batch
// statistics and the gradient through them, inference) against the same formula in basic
// operations, differentiated by GoMLX, on the pure-Go backend.
func TestBatchNormMatchesFormula(t *testing.T) {
	be, ref := newTestBackend(t), newGoBackend(t)
	r := rand.New(rand.NewPCG(37, 38))
	const eps = 1e-3
	for _, c := range []struct {
		name string
		dims []int
		axis int
	}{{"NHWC", []int{4, 5, 3, 6}, 3}, {"NCHW", []int{4, 6, 3, 5}, 1}, {"dense", []int{9, 7}, 1}} {
		t.Run(c.name, func(t *testing.T) {
			xt, _ := randTensor(r, c.dims...)
			ch := c.dims[c.axis]
			scaleT, _ := randTensor(r, ch)
			offsetT, _ := randTensor(r, ch)
			rt, _ := randTensor(r, c.dims...)
			reduce := func(x *Node) []int {
				var axes []int
				for a := range x.Rank() {
					if a != c.axis {
						axes = append(axes, a)
					}
				}
				return axes
			}
			expand := func(v *Node, x *Node) *Node {
				dims := make([]int, x.Rank())
				for i := range dims {
					dims[i] = 1
				}
				dims[c.axis] = ch
				return Reshape(v, dims...)
			}
			native := func(in []*Node) []*Node {
				y, mean, variance := InternalBatchNormForTraining(in[0], in[1], in[2], eps, c.axis)
				g := Gradient(ReduceAllSum(Mul(y, in[3])), in[0], in[1], in[2])
				inf := InternalBatchNormForInference(in[0], in[1], in[2], mean, variance, eps, c.axis)
				return []*Node{y, mean, variance, g[0], g[1], g[2], inf}
			}
			formula := func(in []*Node) []*Node {
				x := in[0]
				mean := ReduceMean(x, reduce(x)...)
				centered := Sub(x, expand(mean, x))
				variance := ReduceMean(Square(centered), reduce(x)...)
				y := Add(Mul(Div(centered, Sqrt(AddScalar(expand(variance, x), eps))), expand(in[1], x)), expand(in[2], x))
				g := Gradient(ReduceAllSum(Mul(y, in[3])), in[0], in[1], in[2])
				return []*Node{y, mean, variance, g[0], g[1], g[2], y}
			}
			got := runGraph(t, be, native, xt, scaleT, offsetT, rt)
			want := runGraph(t, ref, formula, xt, scaleT, offsetT, rt)
			for i, name := range []string{"normalized", "mean", "variance", "gradient wrt x", "gradient wrt scale", "gradient wrt offset", "inference"} {
				assertClose(t, name, got[i], want[i], 1e-5)
			}
		})
	}
}

// TestMaxPoolGradient checks SelectAndScatterMax (the gradient of max pooling) against a loop.
func TestMaxPoolGradient(t *testing.T) {
	be := newTestBackend(t)
	r := rand.New(rand.NewPCG(39, 40))
	xt, x := randTensor(r, 2, 7, 7, 3)
	got := runGraph(t, be, func(in []*Node) []*Node {
		p := MaxPool(in[0]).Window(3).Strides(2).PadSame().Done()
		return []*Node{p, Gradient(ReduceAllSum(Mul(p, p)), in[0])[0]}
	}, xt)
	oh := 4 // ceil(7/2)
	if n := len(got[0]); n != 2*oh*oh*3 {
		t.Fatalf("pooled %d values, want %d", n, 2*oh*oh*3)
	}
	want := make([]float32, len(x))
	for b := range 2 {
		for i := range oh {
			for j := range oh {
				for c := range 3 {
					best, bi := float32(0), -1
					for di := range 3 {
						for dj := range 3 {
							// PadSame for a 3-window, stride 2, size 7: 1 before.
							h, w := i*2-1+di, j*2-1+dj
							if h < 0 || h >= 7 || w < 0 || w >= 7 {
								continue
							}
							idx := ((b*7+h)*7+w)*3 + c
							if bi < 0 || x[idx] > best {
								best, bi = x[idx], idx
							}
						}
					}
					want[bi] += 2 * best
				}
			}
		}
	}
	assertClose(t, "max-pool gradient", got[1], want, 1e-6)
}

// TestExecutorOutputsAndDonation covers the executor's bookkeeping: a parameter returned as an
// output, the same value returned twice, a donated input, constants, and a wrong input shape.
func TestExecutorOutputsAndDonation(t *testing.T) {
	be := newTestBackend(t)
	b := be.Builder("bookkeeping")
	f := b.Main()
	x, err := f.Parameter("x", shapes.Make(dtypes.Float32, 3), nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := f.Constant([]float32{1, 2, 3}, 3)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := f.Add(x, c)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Return([]compute.Value{x, sum, sum, c}, nil); err != nil {
		t.Fatal(err)
	}
	exe, err := b.Compile()
	if err != nil {
		t.Fatal(err)
	}
	for _, donate := range []bool{false, true} {
		in, err := be.BufferFromFlatData(0, []float32{10, 20, 30}, shapes.Make(dtypes.Float32, 3))
		if err != nil {
			t.Fatal(err)
		}
		outs, err := exe.Execute([]compute.Buffer{in}, []bool{donate}, 0)
		if err != nil {
			t.Fatal(err)
		}
		wants := [][]float32{{10, 20, 30}, {11, 22, 33}, {11, 22, 33}, {1, 2, 3}}
		for i, want := range wants {
			got := make([]float32, 3)
			if err := outs[i].ToFlatData(got); err != nil {
				t.Fatal(err)
			}
			assertClose(t, "output", got, want, 0)
		}
		if outs[1] == outs[2] {
			t.Fatal("the same value returned twice shares one buffer")
		}
		for _, o := range outs {
			if err := o.Finalize(); err != nil {
				t.Fatal(err)
			}
		}
	}
	bad, _ := be.BufferFromFlatData(0, []float32{1, 2}, shapes.Make(dtypes.Float32, 2))
	if _, err := exe.Execute([]compute.Buffer{bad}, nil, 0); err == nil {
		t.Fatal("no error for an input of the wrong shape")
	}
	if _, err := exe.Execute(nil, nil, 0); err == nil {
		t.Fatal("no error for a missing input")
	}
}

// TestRegisteredUnderItsName checks GOMLX_BACKEND-style construction.
func TestRegisteredUnderItsName(t *testing.T) {
	be, err := compute.NewWithConfig(BackendName + ":threads=1")
	if err != nil {
		t.Fatal(err)
	}
	defer be.Finalize()
	if be.Name() != BackendName {
		t.Fatalf("name %q, want %q", be.Name(), BackendName)
	}
	got := runGraph(t, be, func(in []*Node) []*Node { return []*Node{Exp(in[0])} }, tensors.FromValue([]float32{0}))[0]
	if got[0] != 1 {
		t.Fatalf("exp(0) = %g", got[0])
	}
	if _, err := ParseConfig("threads=x"); err == nil {
		t.Fatal("no error for threads=x")
	}
	if _, err := ParseConfig("bogus"); err == nil {
		t.Fatal("no error for an unknown option")
	}
}

// TestReduceWindowMatchesGoBackend checks pooling (max, min, sum; padding, strides, windows on
// the channel axis too) against the pure-Go backend.
func TestReduceWindowMatchesGoBackend(t *testing.T) {
	be, ref := newTestBackend(t), newGoBackend(t)
	r := rand.New(rand.NewPCG(85, 86))
	xt, _ := randTensor(r, 3, 9, 8, 5)
	cases := map[string]func(x *Node) *Node{
		"max 3x3 s2 same": func(x *Node) *Node { return MaxPool(x).Window(3).Strides(2).PadSame().Done() },
		"max 2x2":         func(x *Node) *Node { return MaxPool(x).Window(2).Done() },
		"min 3x3 s1":      func(x *Node) *Node { return MinPool(x).Window(3).Strides(1).Done() },
		"sum 2x3 s1 same": func(x *Node) *Node { return SumPool(x).WindowPerAxis(2, 3).Strides(1).PadSame().Done() },
		"mean 4x4":        func(x *Node) *Node { return MeanPool(x).Window(4).Done() },
		"max over channels": func(x *Node) *Node {
			return BackendReduceWindow(x, compute.ReduceOpMax, []int{1, 1, 1, 2}, []int{1, 1, 1, 1}, nil, nil, nil)
		},
	}
	for name, f := range cases {
		fn := func(in []*Node) []*Node { return []*Node{f(in[0])} }
		assertClose(t, name, runGraph(t, be, fn, xt)[0], runGraph(t, ref, fn, xt)[0], 1e-6)
	}
}

// TestMaxPoolGradientBFloat16: mixed-precision training's max pool (bfloat16 operands) runs
// through the float32 kernel and gives the float32 gradient rounded to bfloat16.
func TestMaxPoolGradientBFloat16(t *testing.T) {
	be := newTestBackend(t)
	r := rand.New(rand.NewPCG(41, 42))
	xt, _ := randTensor(r, 2, 7, 7, 3)
	pool := func(x *Node) (*Node, *Node) {
		p := MaxPool(x).Window(3).Strides(2).PadSame().Done()
		return p, Gradient(ReduceAllSum(Mul(p, p)), x)[0]
	}
	got := runGraph(t, be, func(in []*Node) []*Node {
		p, g := pool(ConvertDType(in[0], dtypes.BFloat16))
		return []*Node{ConvertDType(p, dtypes.Float32), ConvertDType(g, dtypes.Float32)}
	}, xt)
	want := runGraph(t, be, func(in []*Node) []*Node {
		p, g := pool(ConvertDType(ConvertDType(in[0], dtypes.BFloat16), dtypes.Float32))
		return []*Node{p, ConvertDType(ConvertDType(g, dtypes.BFloat16), dtypes.Float32)}
	}, xt)
	assertClose(t, "pooled", got[0], want[0], 0)
	assertClose(t, "gradient", got[1], want[1], 0)
}

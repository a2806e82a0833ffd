package cpu

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestSelectScatterRowsMatchElements checks that the row-wise walk of SelectAndScatter (windows
// that do not span the innermost axis, as NHWC pooling) gives bit for bit the element-wise
// walk's result: the same element chosen on ties (values drawn from a few integers, and NaNs),
// the same sums in the same order where windows overlap, windows in the padding.
func TestSelectScatterRowsMatchElements(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for _, tc := range []struct {
		x, window, strides []int
		pad                [][2]int
	}{
		{[]int{2, 9, 9, 5}, []int{1, 3, 3, 1}, []int{1, 2, 2, 1}, [][2]int{{0, 0}, {1, 1}, {1, 1}, {0, 0}}},
		{[]int{3, 8, 7, 16}, []int{1, 3, 2, 1}, []int{1, 1, 2, 1}, [][2]int{{0, 0}, {2, 2}, {0, 1}, {0, 0}}},
		{[]int{1, 4, 4, 1}, []int{1, 2, 2, 1}, []int{1, 2, 2, 1}, [][2]int{{0, 0}, {0, 0}, {0, 0}, {0, 0}}},
		{[]int{2, 3, 3, 4}, []int{1, 3, 3, 1}, []int{1, 1, 1, 1}, [][2]int{{0, 0}, {3, 3}, {3, 3}, {0, 0}}}, // windows wholly in the padding
	} {
		s := make([]int, len(tc.x))
		for a := range s {
			s[a] = (tc.x[a]+tc.pad[a][0]+tc.pad[a][1]-tc.window[a])/tc.strides[a] + 1
		}
		x := make([]float32, product(tc.x, iotaInts(len(tc.x))))
		for i := range x {
			x[i] = float32(r.IntN(4))
			if r.IntN(50) == 0 {
				x[i] = float32(math.NaN())
			}
		}
		src := make([]float32, product(s, iotaInts(len(s))))
		for i := range src {
			src[i] = r.Float32()*2 - 1
		}
		for _, isMax := range []bool{true, false} {
			sc := newSelectScatter(isMax, tc.x, s, tc.window, tc.strides, tc.pad)
			if !sc.rowWise {
				t.Fatalf("%v: the window does not span the innermost axis, but the walk is element-wise", tc.window)
			}
			rows, elems := make([]float32, len(x)), make([]float32, len(x))
			for lo := range sc.slabs() {
				sc.run(x, src, rows, lo, lo+1)
			}
			sc.rowWise = false
			sc.run(x, src, elems, 0, sc.slabs())
			for i := range rows {
				if math.Float32bits(rows[i]) != math.Float32bits(elems[i]) {
					t.Fatalf("operand %v window %v max %v: element %d is %g row-wise, %g element-wise", tc.x, tc.window, isMax, i, rows[i], elems[i])
				}
			}
		}
	}
}

// TestSelectScatterOneAxis: with one axis, whose slabs are single elements, the walk is
// element-wise and every source element lands at its window's largest operand element.
func TestSelectScatterOneAxis(t *testing.T) {
	x := []float32{3, 1, 4, 1, 5, 9, 2}
	src := []float32{10, 20, 30, 40, 50, 60, 70}
	sc := newSelectScatter(true, []int{7}, []int{7}, []int{1}, []int{1}, [][2]int{{0, 0}})
	y := make([]float32, len(x))
	for lo := range sc.slabs() {
		sc.run(x, src, y, lo, lo+1)
	}
	for i := range y {
		if y[i] != src[i] {
			t.Fatalf("a one-element window scatters %v, want %v", y, src)
		}
	}
}

// BenchmarkSelectScatterResNet50 is the gradient of ResNet-50's max pool (3×3, stride 2, padding
// 1, NHWC) at 16 images of 224 px, on one goroutine.
func BenchmarkSelectScatterResNet50(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	xd, sd := []int{16, 112, 112, 64}, []int{16, 56, 56, 64}
	x, src, y := make([]float32, 16*112*112*64), make([]float32, 16*56*56*64), make([]float32, 16*112*112*64)
	for i := range x {
		x[i] = max(0, r.Float32()*2-1) // ReLU's output: half zeros
	}
	for i := range src {
		src[i] = r.Float32()
	}
	sc := newSelectScatter(true, xd, sd, []int{1, 3, 3, 1}, []int{1, 2, 2, 1}, [][2]int{{0, 0}, {1, 1}, {1, 1}, {0, 0}})
	for b.Loop() {
		clear(y)
		sc.run(x, src, y, 0, sc.slabs())
	}
}

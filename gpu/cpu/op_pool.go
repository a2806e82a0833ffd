package cpu

import (
	"fmt"
	"math"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapeinference"
)

// SelectAndScatterMax implements compute.Function (the pure-Go backend lacks it; the gradient of max
// pooling needs it): each window's source value is added at the position of the window's
// largest operand element (the first one on ties).
func (b *Builder) SelectAndScatterMax(operand, source compute.Value, windowDimensions, windowStrides []int, paddings [][2]int) (compute.Value, error) {
	return b.selectAndScatter("SelectAndScatterMax", true, operand, source, windowDimensions, windowStrides, paddings)
}

// SelectAndScatterMin implements compute.Function: as SelectAndScatterMax with the smallest
// element.
func (b *Builder) SelectAndScatterMin(operand, source compute.Value, windowDimensions, windowStrides []int, paddings [][2]int) (compute.Value, error) {
	return b.selectAndScatter("SelectAndScatterMin", false, operand, source, windowDimensions, windowStrides, paddings)
}

// selectAndScatterOther is SelectAndScatter for dtypes other than float32: half-precision
// floats (mixed-precision training's max pool) run in float32 and are rounded back (float32
// holds every bfloat16 and float16 value, so the same element is selected, and the sums are
// rounded once); other dtypes go to the pure-Go backend.
func (b *Builder) selectAndScatterOther(name string, isMax bool, in []*value, operand, source compute.Value, windowDims, strides []int, paddings [][2]int) (compute.Value, error) {
	dtype := in[0].shape.DType
	if !dtype.IsHalfPrecision() || in[1].shape.DType != dtype {
		outs, err := b.delegate(name, []compute.Value{operand, source}, func(sf compute.Function, in []compute.Value) ([]compute.Value, error) {
			if isMax {
				return ops1(sf.SelectAndScatterMax(in[0], in[1], windowDims, strides, paddings))
			}
			return ops1(sf.SelectAndScatterMin(in[0], in[1], windowDims, strides, paddings))
		})
		if err != nil {
			return nil, err
		}
		return outs[0], nil
	}
	x32, err := b.ConvertDType(operand, dtypes.Float32)
	if err != nil {
		return nil, err
	}
	s32, err := b.ConvertDType(source, dtypes.Float32)
	if err != nil {
		return nil, err
	}
	y32, err := b.selectAndScatter(name, isMax, x32, s32, windowDims, strides, paddings)
	if err != nil {
		return nil, err
	}
	return b.ConvertDType(y32, dtype)
}

func (b *Builder) selectAndScatter(name string, isMax bool, operand, source compute.Value, windowDims, strides []int, paddings [][2]int) (compute.Value, error) {
	in, err := b.checkOps(name, operand, source)
	if err != nil {
		return nil, err
	}
	xs, ss := in[0].shape, in[1].shape
	if !isFloat32(xs, ss) {
		return b.selectAndScatterOther(name, isMax, in, operand, source, windowDims, strides, paddings)
	}
	rank := xs.Rank()
	if len(strides) == 0 { // as ReduceWindow: a nil stride jumps a window at a time
		strides = append([]int(nil), windowDims...)
	}
	if len(paddings) == 0 {
		paddings = make([][2]int, rank)
	}
	if len(windowDims) != rank || len(strides) != rank || len(paddings) != rank {
		return nil, fmt.Errorf("%s: window %v, strides %v, paddings %v for operand %s", name, windowDims, strides, paddings, xs)
	}
	want, err := shapeinference.ReduceWindow(xs, windowDims, strides, nil, nil, paddings)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if !want.Equal(ss) {
		return nil, fmt.Errorf("%s: source %s, want the pooled shape %s", name, ss, want)
	}
	sc := newSelectScatter(isMax, xs.Dimensions, ss.Dimensions, windowDims, strides, paddings)
	n := b.addNode(name, execFunc(func(be *Backend, ins []compute.Buffer, _ []bool) ([]compute.Buffer, error) {
		x, src := be.f32(ins[0]), be.f32(ins[1])
		out, y, err := be.newF32(xs)
		if err != nil {
			return nil, err
		}
		clear(y)
		be.pool.ParallelRange(sc.slabs(), 1, func(lo, hi int) { sc.run(x, src, y, lo, hi) })
		return []compute.Buffer{out}, nil
	}), in, xs)
	return n.outputs[0], nil
}

// selectScatter is one SelectAndScatter's geometry: operand dimensions xDims, source (pooled)
// dimensions sDims, the window, strides and paddings per axis.
type selectScatter struct {
	isMax               bool
	xDims, sDims, xStr  []int
	windowDims, strides []int
	paddings            [][2]int
	window              [][]int // the window's elements, as per-axis offsets, in row-major order
	rowWise             bool    // the window does not span the innermost axis: whole rows at once
	inner               int     // the elements handled together: the innermost axis when rowWise, else 1
}

func newSelectScatter(isMax bool, xDims, sDims, windowDims, strides []int, paddings [][2]int) *selectScatter {
	rank := len(xDims)
	sc := &selectScatter{isMax: isMax, xDims: xDims, sDims: sDims, xStr: rowMajorStrides(xDims),
		windowDims: windowDims, strides: strides, paddings: paddings, inner: 1}
	var walk func(axis int, pos []int)
	walk = func(axis int, pos []int) {
		if axis == rank {
			sc.window = append(sc.window, append([]int(nil), pos...))
			return
		}
		for i := range windowDims[axis] {
			walk(axis+1, append(pos, i))
		}
	}
	walk(0, nil)
	// With one axis the leading axis's slabs would cut a row: element-wise then.
	if last := rank - 1; rank > 1 && windowDims[last] == 1 && strides[last] == 1 && paddings[last] == [2]int{0, 0} {
		sc.rowWise, sc.inner = true, xDims[last]
	}
	return sc
}

// slabs is the number of independent parts of the work: slabs of the leading axis when the
// window does not span it, else one.
func (sc *selectScatter) slabs() int {
	if sc.windowDims[0] == 1 && sc.strides[0] == 1 && sc.paddings[0] == [2]int{0, 0} && sc.sDims[0] > 1 {
		return sc.sDims[0]
	}
	return 1
}

// run adds each source element of slabs [lo, hi) into y at its window's selected operand
// element (the first on ties). Each element of y receives its sums in the source's row-major
// order whichever way the window is walked, so rowWise and element-wise results are identical.
func (sc *selectScatter) run(x, src, y []float32, lo, hi int) {
	slab := len(src) / sc.slabs()
	if sc.rowWise {
		sc.runRows(x, src, y, lo*slab, hi*slab)
		return
	}
	rank := len(sc.xDims)
	idx := make([]int, rank)
	for si := lo * slab; si < hi*slab; si++ {
		v := src[si]
		rem := si
		for a := rank - 1; a >= 0; a-- {
			idx[a] = rem % sc.sDims[a]
			rem /= sc.sDims[a]
		}
		best, bestOff := float32(0), -1
		for _, w := range sc.window {
			off, inside := sc.offset(idx, w)
			if !inside {
				continue
			}
			if xv := x[off]; bestOff < 0 || (sc.isMax && xv > best) || (!sc.isMax && xv < best) {
				best, bestOff = xv, off
			}
		}
		if bestOff >= 0 {
			y[bestOff] += v
		}
	}
}

// offset is the operand offset of window element w of the window at source multi-index idx,
// and whether it lies inside the operand (not in the padding).
func (sc *selectScatter) offset(idx, w []int) (int, bool) {
	off := 0
	for a := range idx {
		p := idx[a]*sc.strides[a] - sc.paddings[a][0] + w[a]
		if p < 0 || p >= sc.xDims[a] {
			return 0, false
		}
		off += p * sc.xStr[a]
	}
	return off, true
}

// runRows is run for source elements [from, to) (whole rows of the innermost axis) when the
// window does not span that axis (NHWC pooling): the window's offsets are found once a row and
// each row is compared and scattered as a vector, the same comparisons in the same order as
// run's element-wise loop.
func (sc *selectScatter) runRows(x, src, y []float32, from, to int) {
	rank, inner := len(sc.xDims), sc.inner
	idx := make([]int, rank)
	bestOffs := make([]int, inner)
	offs := make([]int, 0, len(sc.window))
	for r := from; r < to; r += inner {
		rem := r / inner
		for a := rank - 2; a >= 0; a-- {
			idx[a] = rem % sc.sDims[a]
			rem /= sc.sDims[a]
		}
		offs = offs[:0]
		for _, w := range sc.window {
			if off, inside := sc.offset(idx, w); inside {
				offs = append(offs, off)
			}
		}
		if len(offs) == 0 { // the whole window lies in the padding
			continue
		}
		// Channels outer, the window inner: best and the chosen offset stay in registers.
		for c := range inner {
			best, bestOff := x[offs[0]+c], offs[0]+c
			for _, off := range offs[1:] {
				xv := x[off+c]
				if (sc.isMax && xv > best) || (!sc.isMax && xv < best) {
					best, bestOff = xv, off+c
				}
			}
			bestOffs[c] = bestOff
		}
		for c, v := range src[r : r+inner] {
			y[bestOffs[c]] += v
		}
	}
}

// ReduceWindow implements compute.Function for float32 max, min and sum pooling without
// dilations, in parallel over the outermost axis; other cases go to the pure-Go backend, whose version runs
// on one goroutine through a general iterator (ResNet-50's max pool took as long as all its
// convolutions there).
func (b *Builder) ReduceWindow(x compute.Value, reductionType compute.ReduceOpType, windowDimensions, strides, baseDilations, windowDilations []int, paddings [][2]int) (compute.Value, error) {
	in, err := b.checkOps("ReduceWindow", x)
	if err != nil {
		return nil, err
	}
	xs := in[0].shape
	rank := xs.Rank()
	if len(strides) == 0 {
		strides = append([]int(nil), windowDimensions...)
	}
	if len(paddings) == 0 {
		paddings = make([][2]int, rank)
	}
	var op binOp
	supported := isFloat32(xs) && len(windowDimensions) == rank && len(strides) == rank && len(paddings) == rank &&
		allOnes(baseDilations) && allOnes(windowDilations)
	switch reductionType {
	case compute.ReduceOpMax:
		op = opMax
	case compute.ReduceOpMin:
		op = opMin
	case compute.ReduceOpSum:
		op = opAdd
	default:
		supported = false
	}
	out, err := shapeinference.ReduceWindow(xs, windowDimensions, strides, nil, nil, paddings)
	if err != nil || !supported {
		outs, err := b.delegate("ReduceWindow", []compute.Value{x}, func(sf compute.Function, in []compute.Value) ([]compute.Value, error) {
			return ops1(sf.ReduceWindow(in[0], reductionType, windowDimensions, strides, baseDilations, windowDilations, paddings))
		})
		if err != nil {
			return nil, err
		}
		return outs[0], nil
	}
	out.DType = xs.DType
	xDims, oDims := xs.Dimensions, out.Dimensions
	xStr := rowMajorStrides(xDims)
	// The innermost axis is reduced as a vector when the window does not span it.
	vector := windowDimensions[rank-1] == 1 && strides[rank-1] == 1 && paddings[rank-1] == [2]int{0, 0}
	inner := 1
	if vector {
		inner = xDims[rank-1]
	}
	outer := out.Size() / inner
	var init float32
	switch op {
	case opMax:
		init = float32(math.Inf(-1))
	case opMin:
		init = float32(math.Inf(1))
	}
	n := b.addNode("ReduceWindow", execFunc(func(be *Backend, ins []compute.Buffer, _ []bool) ([]compute.Buffer, error) {
		src := be.f32(ins[0])
		buf, dst, err := be.newF32(out)
		if err != nil {
			return nil, err
		}
		loopRank := rank
		if vector {
			loopRank = rank - 1
		}
		be.pool.ParallelRange(outer, max(1, elementGrain/(inner*max(1, product(windowDimensions, iotaInts(rank))))), func(lo, hi int) {
			idx := make([]int, loopRank)
			win := make([]int, loopRank)
			for o := lo; o < hi; o++ {
				rem := o
				for a := loopRank - 1; a >= 0; a-- {
					idx[a] = rem % oDims[a]
					rem /= oDims[a]
				}
				acc := dst[o*inner : (o+1)*inner]
				for i := range acc {
					acc[i] = init
				}
				clear(win)
			window:
				for {
					off, inside := 0, true
					for a := range loopRank {
						p := idx[a]*strides[a] - paddings[a][0] + win[a]
						if p < 0 || p >= xDims[a] {
							inside = false
							break
						}
						off += p * xStr[a]
					}
					if inside {
						applyBin(op, acc, acc, src[off:off+inner])
					}
					for a := loopRank - 1; a >= 0; a-- {
						win[a]++
						if win[a] < windowDimensions[a] {
							continue window
						}
						win[a] = 0
					}
					break
				}
			}
		})
		return []compute.Buffer{buf}, nil
	}), in, out)
	return n.outputs[0], nil
}

func allOnes(s []int) bool {
	for _, v := range s {
		if v != 1 {
			return false
		}
	}
	return true
}

func iotaInts(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

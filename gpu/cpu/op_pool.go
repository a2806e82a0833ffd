package cpu

import (
	"fmt"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/shapeinference"
)

// SelectAndScatterMax implements backends.Builder (SimpleGo lacks it; the gradient of max
// pooling needs it): each window's source value is added at the position of the window's
// largest operand element (the first one on ties).
func (b *Builder) SelectAndScatterMax(operand, source backends.Op, windowDimensions, windowStrides []int, paddings [][2]int) (backends.Op, error) {
	return b.selectAndScatter("SelectAndScatterMax", true, operand, source, windowDimensions, windowStrides, paddings)
}

// SelectAndScatterMin implements backends.Builder: as SelectAndScatterMax with the smallest
// element.
func (b *Builder) SelectAndScatterMin(operand, source backends.Op, windowDimensions, windowStrides []int, paddings [][2]int) (backends.Op, error) {
	return b.selectAndScatter("SelectAndScatterMin", false, operand, source, windowDimensions, windowStrides, paddings)
}

func (b *Builder) selectAndScatter(name string, isMax bool, operand, source backends.Op, windowDims, strides []int, paddings [][2]int) (backends.Op, error) {
	in, err := b.checkOps(name, operand, source)
	if err != nil {
		return nil, err
	}
	xs, ss := in[0].shape, in[1].shape
	if !isFloat32(xs, ss) {
		return nil, fmt.Errorf("%s: %s/%s not supported (float32 only)", name, xs.DType, ss.DType)
	}
	rank := xs.Rank()
	strides = onesIfEmpty(strides, rank)
	if len(paddings) == 0 {
		paddings = make([][2]int, rank)
	}
	if len(windowDims) != rank || len(strides) != rank || len(paddings) != rank {
		return nil, fmt.Errorf("%s: window %v, strides %v, paddings %v for operand %s", name, windowDims, strides, paddings, xs)
	}
	want, err := shapeinference.ReduceWindowOp(xs, windowDims, strides, nil, nil, paddings)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	if !want.Equal(ss) {
		return nil, fmt.Errorf("%s: source %s, want the pooled shape %s", name, ss, want)
	}
	xDims, sDims := xs.Dimensions, ss.Dimensions
	xStr := rowMajorStrides(xDims)
	// Offsets of the window's elements, as per-axis positions.
	var window [][]int
	var walk func(axis int, pos []int)
	walk = func(axis int, pos []int) {
		if axis == rank {
			window = append(window, append([]int(nil), pos...))
			return
		}
		for i := range windowDims[axis] {
			walk(axis+1, append(pos, i))
		}
	}
	walk(0, nil)
	n := b.addNode(name, execFunc(func(be *Backend, ins []backends.Buffer, _ []bool) ([]backends.Buffer, error) {
		x, src := be.f32(ins[0]), be.f32(ins[1])
		out, y, err := be.newF32(xs)
		if err != nil {
			return nil, err
		}
		clear(y)
		idx := make([]int, rank)
		for si, v := range src {
			// idx is the multi-index of source element si.
			rem := si
			for a := rank - 1; a >= 0; a-- {
				idx[a] = rem % sDims[a]
				rem /= sDims[a]
			}
			best, bestOff := float32(0), -1
			for _, w := range window {
				off := 0
				inside := true
				for a := range rank {
					p := idx[a]*strides[a] - paddings[a][0] + w[a]
					if p < 0 || p >= xDims[a] {
						inside = false
						break
					}
					off += p * xStr[a]
				}
				if !inside {
					continue
				}
				if xv := x[off]; bestOff < 0 || (isMax && xv > best) || (!isMax && xv < best) {
					best, bestOff = xv, off
				}
			}
			if bestOff >= 0 {
				y[bestOff] += v
			}
		}
		return []backends.Buffer{out}, nil
	}), in, xs)
	return n.outputs[0], nil
}

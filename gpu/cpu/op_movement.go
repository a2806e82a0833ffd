package cpu

import (
	"fmt"
	"slices"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/shapes"
)

// Reverse implements compute.Function (GoMLX's convolution gradient reverses the kernel): the
// order of the elements along each of axes is reversed, for any dtype.
func (b *Builder) Reverse(x compute.Value, axes ...int) (compute.Value, error) {
	in, err := b.checkOps("Reverse", x)
	if err != nil {
		return nil, err
	}
	shape := in[0].shape
	rank := shape.Rank()
	rev := make([]bool, rank)
	for _, a := range axes {
		if a < 0 || a >= rank {
			return nil, fmt.Errorf("Reverse: axis %d out of range for shape %s", a, shape)
		}
		rev[a] = true
	}
	dims := slices.Clone(shape.Dimensions)
	str := rowMajorStrides(dims)
	sStr := slices.Clone(str)
	sOff := 0
	for a := range rank {
		if rev[a] && dims[a] > 0 {
			sOff += (dims[a] - 1) * str[a]
			sStr[a] = -str[a]
		}
	}
	n := b.addNode("Reverse", execFunc(func(be *Backend, ins []compute.Buffer, _ []bool) ([]compute.Buffer, error) {
		out, flat, err := be.newBuffer(shape)
		if err != nil {
			return nil, err
		}
		src := ins[0].(*Buffer).flat
		if err := rawCopyND(be.pool, flat, src, dims, 0, str, sOff, sStr); err != nil {
			be.release(out)
			return nil, err
		}
		return []compute.Buffer{out}, nil
	}), in, shape)
	return n.outputs[0], nil
}

// Pad implements compute.Function (the pure-Go backend lacks it; GoMLX's gradient of Slice needs it):
// Start and End elements of fillValue before and after each axis (negative: cropped), Interior
// between neighbours.
func (b *Builder) Pad(x, fillValue compute.Value, axesConfig ...compute.PadAxis) (compute.Value, error) {
	in, err := b.checkOps("Pad", x, fillValue)
	if err != nil {
		return nil, err
	}
	shape, fill := in[0].shape, in[1].shape
	if fill.Rank() != 0 || fill.DType != shape.DType {
		return nil, fmt.Errorf("Pad: fill value must be a scalar of %s, got %s", shape.DType, fill)
	}
	rank := shape.Rank()
	if len(axesConfig) > rank {
		return nil, fmt.Errorf("Pad: %d axes configured for shape %s", len(axesConfig), shape)
	}
	cfg := make([]compute.PadAxis, rank)
	copy(cfg, axesConfig)
	outDims := make([]int, rank)
	// The box of input elements that land inside the output, and where they land.
	boxDims := make([]int, rank)
	first := make([]int, rank)
	for a, c := range cfg {
		d := shape.Dimensions[a]
		if c.Interior < 0 {
			return nil, fmt.Errorf("Pad: negative interior padding %d on axis %d", c.Interior, a)
		}
		size := c.Start + c.End
		if d > 0 {
			size += d + (d-1)*c.Interior
		}
		if size < 0 {
			return nil, fmt.Errorf("Pad: axis %d of %s padded by %+v has negative size %d", a, shape, c, size)
		}
		outDims[a] = size
		step := c.Interior + 1
		lo := 0
		for lo < d && c.Start+lo*step < 0 {
			lo++
		}
		hi := d
		for hi > lo && c.Start+(hi-1)*step >= size {
			hi--
		}
		first[a], boxDims[a] = lo, hi-lo
	}
	outShape := shapes.Make(shape.DType, outDims...)
	inStr, outStr := rowMajorStrides(shape.Dimensions), rowMajorStrides(outDims)
	sOff, dOff := 0, 0
	dStr := make([]int, rank)
	for a, c := range cfg {
		sOff += first[a] * inStr[a]
		dOff += (c.Start + first[a]*(c.Interior+1)) * outStr[a]
		dStr[a] = outStr[a] * (c.Interior + 1)
	}
	n := b.addNode("Pad", execFunc(func(be *Backend, ins []compute.Buffer, _ []bool) ([]compute.Buffer, error) {
		out, flat, err := be.newBuffer(outShape)
		if err != nil {
			return nil, err
		}
		src, fv := ins[0].(*Buffer).flat, ins[1].(*Buffer).flat
		fillRaw(flat, fv)
		if err := rawCopyND(be.pool, flat, src, boxDims, dOff, dStr, sOff, inStr); err != nil {
			be.release(out)
			return nil, err
		}
		return []compute.Buffer{out}, nil
	}), in, outShape)
	return n.outputs[0], nil
}

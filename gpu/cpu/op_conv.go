package cpu

import (
	"fmt"
	"slices"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/shapeinference"

	"github.com/dcl-beam/dcl-beam/gpu/kernels"
)

// ConvGeneral implements compute.Function. For float32 with up to 3 spatial axes and no batch
// grouping it runs kernels.Conv, which reads every operand in place through its strides (any
// axes layout) and computes one packed matrix multiply per channel group, the image packed
// directly (no im2col matrix). GoMLX
// expresses both gradients of a convolution as ConvGeneral again (with swapped axes, input
// dilation for strides, and a Reversed kernel), so they take the same path. Other cases go to
// the pure-Go backend. Nil strides and dilations (what graph.Convolve passes by default) mean 1s.
func (b *Builder) ConvGeneral(input, kernel compute.Value, axes compute.ConvolveAxesConfig, strides []int, paddings [][2]int,
	inputDilations, kernelDilations []int, channelGroupCount, batchGroupCount int) (compute.Value, error) {
	in, err := b.checkOps("ConvGeneral", input, kernel)
	if err != nil {
		return nil, err
	}
	xs, ks := in[0].shape, in[1].shape
	n := xs.Rank() - 2
	if n < 1 {
		return nil, fmt.Errorf("ConvGeneral: input %s needs a batch, a channel and at least one spatial axis", xs)
	}
	strides = onesIfEmpty(strides, n)
	inputDilations = onesIfEmpty(inputDilations, n)
	kernelDilations = onesIfEmpty(kernelDilations, n)
	if len(paddings) == 0 {
		paddings = make([][2]int, n)
	}
	channelGroupCount, batchGroupCount = max(channelGroupCount, 1), max(batchGroupCount, 1)
	outShape, err := shapeinference.ConvGeneral(xs, ks, axes, strides, paddings, inputDilations, kernelDilations, channelGroupCount, batchGroupCount)
	if err != nil {
		return nil, err
	}
	if !isFloat32(xs, ks) || batchGroupCount > 1 || n > 3 {
		outs, err := b.delegate("ConvGeneral", []compute.Value{input, kernel}, func(sf compute.Function, in []compute.Value) ([]compute.Value, error) {
			return ops1(sf.ConvGeneral(in[0], in[1], axes, strides, paddings, inputDilations, kernelDilations, channelGroupCount, batchGroupCount))
		})
		if err != nil {
			return nil, err
		}
		return outs[0], nil
	}

	cs := kernels.ConvShape{
		Batch:       xs.Dimensions[axes.InputBatch],
		Channels:    xs.Dimensions[axes.InputChannels],
		OutChannels: ks.Dimensions[axes.KernelOutputChannels],
		Groups:      channelGroupCount,
	}
	xStr, kStr, yStr := rowMajorStrides(xs.Dimensions), rowMajorStrides(ks.Dimensions), rowMajorStrides(outShape.Dimensions)
	cs.XStrides = kernels.ConvStrides{Major: xStr[axes.InputBatch], Minor: xStr[axes.InputChannels]}
	cs.WStrides = kernels.ConvStrides{Major: kStr[axes.KernelInputChannels], Minor: kStr[axes.KernelOutputChannels]}
	cs.YStrides = kernels.ConvStrides{Major: yStr[axes.OutputBatch], Minor: yStr[axes.OutputChannels]}
	// Spatial axes right-aligned in the 3 of ConvShape; the leading ones have size 1.
	for d := range 3 {
		cs.In[d], cs.Out[d], cs.Kernel[d] = 1, 1, 1
		cs.Stride[d], cs.InputDilation[d], cs.KernelDilation[d] = 1, 1, 1
	}
	for i := range n {
		d := 3 - n + i
		cs.In[d] = xs.Dimensions[axes.InputSpatial[i]]
		cs.Kernel[d] = ks.Dimensions[axes.KernelSpatial[i]]
		cs.Out[d] = outShape.Dimensions[axes.OutputSpatial[i]]
		cs.Stride[d], cs.PadLo[d] = strides[i], paddings[i][0]
		cs.InputDilation[d], cs.KernelDilation[d] = inputDilations[i], kernelDilations[i]
		cs.XStrides.Spatial[d] = xStr[axes.InputSpatial[i]]
		cs.WStrides.Spatial[d] = kStr[axes.KernelSpatial[i]]
		cs.YStrides.Spatial[d] = yStr[axes.OutputSpatial[i]]
	}
	if err := cs.Validate(); err != nil {
		return nil, fmt.Errorf("ConvGeneral: %w", err)
	}
	if b.backend.onConv != nil {
		b.backend.onConv(cs)
	}
	node := b.addNode("ConvGeneral/"+convRole(xStr, axes, inputDilations), execFunc(func(be *Backend, ins []compute.Buffer, _ []bool) ([]compute.Buffer, error) {
		out, y, err := be.newF32(outShape)
		if err != nil {
			return nil, err
		}
		x, w, temps, err := be.productOperands(be.f32(ins[0]), be.f32(ins[1]))
		defer be.releaseAll(temps)
		if err != nil {
			be.release(out)
			return nil, err
		}
		if err := be.pool.Conv(cs, x, w, y); err != nil {
			be.release(out)
			return nil, err
		}
		return []compute.Buffer{out}, nil
	}), in, outShape)
	return node.outputs[0], nil
}

// convRole names what a convolution is in a training graph, for the operation timings:
// GoMLX's kernel gradient convolves with the batch as the contracted axis (the input's
// "batch" axis is its channel axis, the fastest), its input gradient with the kernel's
// channel axes swapped or the input dilated by the forward stride.
func convRole(xStrides []int, axes compute.ConvolveAxesConfig, inputDilations []int) string {
	switch {
	case xStrides[axes.InputBatch] == 1:
		return "kernel-gradient"
	case axes.KernelOutputChannels < axes.KernelInputChannels || slices.ContainsFunc(inputDilations, func(d int) bool { return d > 1 }):
		return "input-gradient"
	}
	return "forward"
}

// onesIfEmpty returns s, or n ones when s is empty.
func onesIfEmpty(s []int, n int) []int {
	if len(s) > 0 {
		return slices.Clone(s)
	}
	ones := make([]int, n)
	for i := range ones {
		ones[i] = 1
	}
	return ones
}

package cpu

import (
	"fmt"
	"slices"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/shapeinference"
	"github.com/gomlx/gomlx/pkg/core/shapes"

	"github.com/dcl-beam/dcl-beam/gpu/kernels"
)

// ConvGeneral implements backends.Builder. For float32 with up to 3 spatial axes and no batch
// grouping it transposes the operands (when needed) into the channels-last layout of
// kernels.Conv, runs it (one packed matrix multiply per channel group, the image packed
// directly, no im2col matrix) and transposes the result into the requested layout. GoMLX
// expresses both gradients of a convolution as ConvGeneral again (with swapped axes, input
// dilation for strides, and a Reversed kernel), so they take the same path. Other cases go to
// SimpleGo, with nil strides and dilations made explicit (SimpleGo's shape inference reads nil
// strides as 0).
func (b *Builder) ConvGeneral(input, kernel backends.Op, axes backends.ConvolveAxesConfig, strides []int, paddings [][2]int,
	inputDilations, kernelDilations []int, channelGroupCount, batchGroupCount int) (backends.Op, error) {
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
	outShape, err := shapeinference.ConvGeneralOp(xs, ks, axes, strides, paddings, inputDilations, kernelDilations, channelGroupCount, batchGroupCount)
	if err != nil {
		return nil, err
	}
	if !isFloat32(xs, ks) || batchGroupCount > 1 || n > 3 {
		outs, err := b.delegate("ConvGeneral", []backends.Op{input, kernel}, func(sb backends.Builder, in []backends.Op) ([]backends.Op, error) {
			return ops1(sb.ConvGeneral(in[0], in[1], axes, strides, paddings, inputDilations, kernelDilations, channelGroupCount, batchGroupCount))
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
	}
	if err := cs.Validate(); err != nil {
		return nil, fmt.Errorf("ConvGeneral: %w", err)
	}
	inPerm := append(append([]int{axes.InputBatch}, axes.InputSpatial...), axes.InputChannels)
	kerPerm := append(slices.Clone(axes.KernelSpatial), axes.KernelInputChannels, axes.KernelOutputChannels)
	outPerm := make([]int, n+2)
	outPerm[axes.OutputBatch], outPerm[axes.OutputChannels] = 0, n+1
	for i, a := range axes.OutputSpatial {
		outPerm[a] = 1 + i
	}
	canonOutDims := make([]int, n+2)
	for j, p := range outPerm {
		canonOutDims[p] = outShape.Dimensions[j]
	}
	plan := &convPlan{shape: cs, xDims: xs.Dimensions, kDims: ks.Dimensions, canonOutDims: canonOutDims, outShape: outShape}
	if !isIdentity(inPerm) {
		plan.inPerm = inPerm
	}
	if !isIdentity(kerPerm) {
		plan.kerPerm = kerPerm
	}
	if !isIdentity(outPerm) {
		plan.outPerm = outPerm
	}
	node := b.addNode("ConvGeneral", plan, in, outShape)
	return node.outputs[0], nil
}

// convPlan runs one ConvGeneral: transposes into kernels.Conv's layout, the convolution, and
// the transpose of its result.
type convPlan struct {
	shape                 kernels.ConvShape
	xDims, kDims          []int
	inPerm, kerPerm       []int // nil when the operand is already channels-last
	outPerm, canonOutDims []int // outPerm nil when the output is channels-last
	outShape              shapes.Shape
}

func (p *convPlan) execute(be *Backend, ins []backends.Buffer, _ []bool) ([]backends.Buffer, error) {
	var temps []backends.Buffer
	defer func() {
		for _, t := range temps {
			be.release(t)
		}
	}()
	canonical := func(buf backends.Buffer, dims, perm []int) ([]float32, error) {
		src := be.f32(buf)
		if perm == nil {
			return src, nil
		}
		t, dst, err := be.newF32(shapes.Make(p.outShape.DType, len(src)))
		if err != nil {
			return nil, err
		}
		temps = append(temps, t)
		transposeF32(be.pool, dst, src, dims, perm)
		return dst, nil
	}
	x, err := canonical(ins[0], p.xDims, p.inPerm)
	if err != nil {
		return nil, err
	}
	w, err := canonical(ins[1], p.kDims, p.kerPerm)
	if err != nil {
		return nil, err
	}
	out, y, err := be.newF32(p.outShape)
	if err != nil {
		return nil, err
	}
	dst := y
	if p.outPerm != nil {
		t, tmp, err := be.newF32(shapes.Make(p.outShape.DType, len(y)))
		if err != nil {
			be.release(out)
			return nil, err
		}
		temps = append(temps, t)
		dst = tmp
	}
	if err := be.pool.Conv(p.shape, x, w, dst); err != nil {
		be.release(out)
		return nil, err
	}
	if p.outPerm != nil {
		transposeF32(be.pool, y, dst, p.canonOutDims, p.outPerm)
	}
	return []backends.Buffer{out}, nil
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

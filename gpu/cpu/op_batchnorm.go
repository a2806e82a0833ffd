package cpu

import (
	"fmt"
	"math"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/shapes"

	"github.com/dcl-beam/dcl-beam/gpu/kernels"
)

// bnLayout views an operand as [outer, channels, inner] around its feature axis.
type bnLayout struct {
	outer, channels, inner int
}

func newBNLayout(s shapes.Shape, axis int) (bnLayout, error) {
	if axis < 0 || axis >= s.Rank() {
		return bnLayout{}, fmt.Errorf("feature axis %d out of range for %s", axis, s)
	}
	l := bnLayout{outer: 1, channels: s.Dimensions[axis], inner: 1}
	for a, d := range s.Dimensions {
		switch {
		case a < axis:
			l.outer *= d
		case a > axis:
			l.inner *= d
		}
	}
	return l, nil
}

// count is the number of values per channel.
func (l bnLayout) count() int { return l.outer * l.inner }

// channelSums returns two per-channel sums over every value of a channel, Σ f(u) and Σ f(u)·g(v)
// for the element-wise pairs of a and b: with b nil, Σ a and Σ a²; otherwise Σ b and
// Σ b·(a - center[c]). Partial sums run in float32 over blocks of at most 64 values and are
// added up in float64, in parallel over parts of the outer index. The parts depend on the
// layout alone, so the sums are the same on any number of threads.
func (l bnLayout) channelSums(pool *kernels.Pool, a, b []float32, center []float32) (s1, s2 []float64) {
	const block = 64
	parts := max(1, min(bnSumParts, l.outer*l.channels*l.inner/elementGrain, l.outer))
	partial := make([][2][]float64, parts)
	pool.ParallelFor(parts, func(t int) {
		acc1, acc2 := make([]float64, l.channels), make([]float64, l.channels)
		lo, hi := t*l.outer/parts, (t+1)*l.outer/parts
		if l.inner == 1 {
			// Channels last: rows of channels; float32 partials over blocks of rows.
			t1, t2 := make([]float32, l.channels), make([]float32, l.channels)
			for r0 := lo; r0 < hi; r0 += block {
				clear(t1)
				clear(t2)
				span := a[r0*l.channels : min(r0+block, hi)*l.channels]
				if b == nil {
					kernels.ChannelSums(t1, t2, span, l.channels)
				} else {
					kernels.ChannelSumsCentred(t1, t2, span, b[r0*l.channels:][:len(span)], center, l.channels)
				}
				for c := range t1 {
					acc1[c] += float64(t1[c])
					acc2[c] += float64(t2[c])
				}
			}
		} else {
			for o := lo; o < hi; o++ {
				for c := range l.channels {
					base := (o*l.channels + c) * l.inner
					xs := a[base : base+l.inner]
					for i0 := 0; i0 < len(xs); i0 += block {
						var p1, p2 float32
						seg := xs[i0:min(i0+block, len(xs))]
						if b == nil {
							for _, v := range seg {
								p1 += v
								p2 += v * v
							}
						} else {
							ys := b[base+i0 : base+i0+len(seg)]
							m := center[c]
							for k, v := range seg {
								p1 += ys[k]
								p2 += ys[k] * (v - m)
							}
						}
						acc1[c] += float64(p1)
						acc2[c] += float64(p2)
					}
				}
			}
		}
		partial[t] = [2][]float64{acc1, acc2}
	})
	s1, s2 = make([]float64, l.channels), make([]float64, l.channels)
	for _, p := range partial {
		for c := range l.channels {
			s1[c] += p[0][c]
			s2[c] += p[1][c]
		}
	}
	return s1, s2
}

// bnSumParts is the most parts channelSums cuts a large operand into: a fixed number, several
// times any thread count here, so a thread that starts late takes fewer.
const bnSumParts = 8

// affine writes out[i] = x[i]·a[c] + b[c] for every element, in parallel.
func (l bnLayout) affine(pool *kernels.Pool, out, x, a, b []float32) {
	pool.ParallelRange(l.outer, max(1, elementGrain/(l.channels*l.inner)), func(lo, hi int) {
		for o := lo; o < hi; o++ {
			if l.inner == 1 {
				row := o * l.channels
				kernels.Affine(out[row:row+l.channels], x[row:row+l.channels], a, b)
				continue
			}
			for c := range l.channels {
				base := (o*l.channels + c) * l.inner
				ac, bc := a[c], b[c]
				xs, os := x[base:base+l.inner], out[base:base+l.inner]
				for i, v := range xs {
					os[i] = v*ac + bc
				}
			}
		}
	})
}

// bnCheck validates the operand and per-channel operands of a batch-norm operation.
func bnCheck(op string, operand shapes.Shape, axis int, perChannel ...shapes.Shape) (bnLayout, error) {
	l, err := newBNLayout(operand, axis)
	if err != nil {
		return l, fmt.Errorf("%s: %w", op, err)
	}
	for _, s := range perChannel {
		if s.Rank() != 1 || s.Dimensions[0] != l.channels || s.DType != operand.DType {
			return l, fmt.Errorf("%s: per-channel operand %s, want [%d] of %s", op, s, l.channels, operand.DType)
		}
	}
	return l, nil
}

// BatchNormForInference implements compute.Function: (x - mean)/sqrt(variance + epsilon)·scale +
// offset per feature, as one fused pass.
func (b *Builder) BatchNormForInference(operand, scale, offset, mean, variance compute.Value, epsilon float32, featureAxis int) (compute.Value, error) {
	in, err := b.checkOps("BatchNormForInference", operand, scale, offset, mean, variance)
	if err != nil {
		return nil, err
	}
	xs := in[0].shape
	if !isFloat32(xs) {
		return nil, fmt.Errorf("BatchNormForInference: %s not supported (float32 only)", xs.DType)
	}
	l, err := bnCheck("BatchNormForInference", xs, featureAxis, in[1].shape, in[2].shape, in[3].shape, in[4].shape)
	if err != nil {
		return nil, err
	}
	n := b.addNode("BatchNormForInference", execFunc(func(be *Backend, ins []compute.Buffer, donate []bool) ([]compute.Buffer, error) {
		x := be.f32(ins[0])
		a, c := inferenceAffine(l.channels, epsilon, be.f32(ins[1]), be.f32(ins[2]), be.f32(ins[3]), be.f32(ins[4]))
		out, y, err := be.outputLike(xs, ins[:1], donate[:1])
		if err != nil {
			return nil, err
		}
		l.affine(be.pool, y, x, a, c)
		return []compute.Buffer{out}, nil
	}), in, xs)
	n.ew = &ewOp{kind: ewAffine, size: xs.Size(), affine: &affineSpec{channels: l.channels, inner: l.inner, epsilon: epsilon},
		inputs: []ewInput{{bcastFull, 0}, {bcastParam, 0}, {bcastParam, 0}, {bcastParam, 0}, {bcastParam, 0}}}
	return n.outputs[0], nil
}

// BatchNormForTraining implements compute.Function: the batch's mean and (biased) variance per
// feature, in float64, and the normalised operand. It is two nodes: the statistics (one pass
// over the data, also folding scale and offset into y = x·a[c] + b[c]) and that affine map, an
// element-wise operation that fuses with what follows (the ReLU) and that a chain reading the
// normalised value long afterwards (the ReLU's gradient) can recompute from x rather than keep.
func (b *Builder) BatchNormForTraining(operand, scale, offset compute.Value, epsilon float32, featureAxis int) (normalized, batchMean, batchVariance compute.Value, err error) {
	in, err := b.checkOps("BatchNormForTraining", operand, scale, offset)
	if err != nil {
		return nil, nil, nil, err
	}
	xs := in[0].shape
	if !isFloat32(xs) {
		return nil, nil, nil, fmt.Errorf("BatchNormForTraining: %s not supported (float32 only)", xs.DType)
	}
	l, err := bnCheck("BatchNormForTraining", xs, featureAxis, in[1].shape, in[2].shape)
	if err != nil {
		return nil, nil, nil, err
	}
	cs := shapes.Make(xs.DType, l.channels)
	stats := b.addNode("BatchNormForTraining/stats", execFunc(func(be *Backend, ins []compute.Buffer, _ []bool) ([]compute.Buffer, error) {
		x, sc, off := be.f32(ins[0]), be.f32(ins[1]), be.f32(ins[2])
		sum, sumSq := l.channelSums(be.pool, x, nil, nil)
		count := float64(max(1, l.count()))
		outs := make([]compute.Buffer, 4)
		flats := make([][]float32, 4)
		for i := range outs {
			buf, flat, err := be.newF32(cs)
			if err != nil {
				for _, o := range outs[:i] {
					be.release(o)
				}
				return nil, err
			}
			outs[i], flats[i] = buf, flat
		}
		mean, variance, a, c := flats[0], flats[1], flats[2], flats[3]
		for ch := range l.channels {
			mu := sum[ch] / count
			v := max(0, sumSq[ch]/count-mu*mu)
			mean[ch], variance[ch] = float32(mu), float32(v)
			inv := 1 / math.Sqrt(v+float64(epsilon))
			a[ch] = float32(float64(sc[ch]) * inv)
			c[ch] = float32(float64(off[ch]) - mu*float64(sc[ch])*inv)
		}
		return outs, nil
	}), in, cs, cs, cs, cs)
	apply := b.addNode("BatchNormForTraining", execFunc(func(be *Backend, ins []compute.Buffer, donate []bool) ([]compute.Buffer, error) {
		x := be.f32(ins[0])
		out, y, err := be.outputLike(xs, ins[:1], donate[:1])
		if err != nil {
			return nil, err
		}
		l.affine(be.pool, y, x, be.f32(ins[1]), be.f32(ins[2]))
		return []compute.Buffer{out}, nil
	}), []*value{in[0], stats.outputs[2], stats.outputs[3]}, xs)
	apply.ew = &ewOp{kind: ewScaleShift, size: xs.Size(), affine: &affineSpec{channels: l.channels, inner: l.inner},
		inputs: []ewInput{{bcastFull, 0}, {bcastParam, 0}, {bcastParam, 0}}}
	return apply.outputs[0], stats.outputs[0], stats.outputs[1], nil
}

// BatchNormGradient implements compute.Function, as XLA defines it: with x̂ = (x-mean)·r,
// r = 1/sqrt(variance+epsilon) and N values per feature, gradOffset = Σ dy,
// gradScale = Σ dy·x̂, gradOperand = scale·r·(dy - gradOffset/N - x̂·gradScale/N).
func (b *Builder) BatchNormGradient(operand, scale, mean, variance, gradOutput compute.Value, epsilon float32, featureAxis int) (gradOperand, gradScale, gradOffset compute.Value, err error) {
	in, err := b.checkOps("BatchNormGradient", operand, scale, mean, variance, gradOutput)
	if err != nil {
		return nil, nil, nil, err
	}
	xs := in[0].shape
	if !isFloat32(xs) {
		return nil, nil, nil, fmt.Errorf("BatchNormGradient: %s not supported (float32 only)", xs.DType)
	}
	if !in[4].shape.Equal(xs) {
		return nil, nil, nil, fmt.Errorf("BatchNormGradient: gradient %s differs from operand %s", in[4].shape, xs)
	}
	l, err := bnCheck("BatchNormGradient", xs, featureAxis, in[1].shape, in[2].shape, in[3].shape)
	if err != nil {
		return nil, nil, nil, err
	}
	cs := shapes.Make(xs.DType, l.channels)
	n := b.addNode("BatchNormGradient", execFunc(func(be *Backend, ins []compute.Buffer, donate []bool) ([]compute.Buffer, error) {
		x, sc, mu, v, dy := be.f32(ins[0]), be.f32(ins[1]), be.f32(ins[2]), be.f32(ins[3]), be.f32(ins[4])
		sumDys, sumDyXmus := l.channelSums(be.pool, x, dy, mu)
		count := float64(max(1, l.count()))
		outs := make([]compute.Buffer, 3)
		flats := make([][]float32, 3)
		// The operand's gradient goes into the output gradient's or the operand's buffer when
		// one is consumed: each element of dx reads only its own dy and x.
		intoDy := donate[4]
		switch {
		case intoDy:
			outs[0], flats[0] = ins[4], dy
		case donate[0]:
			outs[0], flats[0] = ins[0], x
		}
		made := 0 // outs[made:] are made here (and released on failure)
		if outs[0] != nil {
			made = 1
		}
		for i, s := range []shapes.Shape{xs, cs, cs} {
			if outs[i] != nil {
				continue
			}
			buf, flat, err := be.newF32(s)
			if err != nil {
				for _, o := range outs[made:i] {
					be.release(o)
				}
				return nil, err
			}
			outs[i], flats[i] = buf, flat
		}
		dx, dScale, dOffset := flats[0], flats[1], flats[2]
		// dx = k1·dy + k2·x + k3 per feature.
		k1, k2, k3 := make([]float32, l.channels), make([]float32, l.channels), make([]float32, l.channels)
		for c := range l.channels {
			r := 1 / math.Sqrt(float64(v[c])+float64(epsilon))
			sumDy, sumDyXmu := sumDys[c], sumDyXmus[c]
			dOffset[c] = float32(sumDy)
			dScale[c] = float32(sumDyXmu * r)
			g := float64(sc[c]) * r
			q := r * r * sumDyXmu / count
			k1[c] = float32(g)
			k2[c] = float32(-g * q)
			k3[c] = float32(g * (q*float64(mu[c]) - sumDy/count))
		}
		pool := be.pool
		pool.ParallelRange(l.outer, max(1, elementGrain/(l.channels*l.inner)), func(lo, hi int) {
			tmp := make([]float32, l.channels)
			for o := lo; o < hi; o++ {
				if l.inner == 1 {
					row := o * l.channels
					out := dx[row : row+l.channels]
					if intoDy { // dy is read before out overwrites it; the sum is the same
						kernels.Affine(tmp, x[row:row+l.channels], k2, k3)
						kernels.Binary(kernels.OpMul, out, dy[row:row+l.channels], k1)
						kernels.Binary(kernels.OpAdd, out, out, tmp)
						continue
					}
					kernels.Affine(out, x[row:row+l.channels], k2, k3)
					kernels.Binary(kernels.OpMul, tmp, dy[row:row+l.channels], k1)
					kernels.Binary(kernels.OpAdd, out, out, tmp)
					continue
				}
				for c := range l.channels {
					base := (o*l.channels + c) * l.inner
					a, bb, cc := k1[c], k2[c], k3[c]
					for i := base; i < base+l.inner; i++ {
						dx[i] = a*dy[i] + bb*x[i] + cc
					}
				}
			}
		})
		return outs, nil
	}), in, xs, cs, cs)
	return n.outputs[0], n.outputs[1], n.outputs[2], nil
}

// inferenceAffine folds batch norm's statistics into y = x·a[c] + b[c] per channel.
func inferenceAffine(channels int, epsilon float32, scale, offset, mean, variance []float32) (a, b []float32) {
	a, b = make([]float32, channels), make([]float32, channels)
	for i := range a {
		inv := 1 / math.Sqrt(float64(variance[i])+float64(epsilon))
		a[i] = float32(float64(scale[i]) * inv)
		b[i] = float32(float64(offset[i]) - float64(mean[i])*float64(scale[i])*inv)
	}
	return a, b
}

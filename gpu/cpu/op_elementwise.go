package cpu

import (
	"math"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/shapeinference"
	"github.com/gomlx/compute/shapes"

	"github.com/dcl-beam/dcl-beam/gpu/kernels"
)

// Element-wise float32 operations, parallel over the pool, writing into a consumed input's
// buffer when one can be reused. The pure-Go backend's versions run on one goroutine through a
// general broadcasting iterator; other dtypes and broadcast patterns still go to it.

// elementGrain is the number of elements under which a loop runs on one goroutine.
const elementGrain = 1 << 14

type binOp int

// The binary operations, numbered as kernels.BinOp.
const (
	opAdd = binOp(kernels.OpAdd)
	opSub = binOp(kernels.OpSub)
	opMul = binOp(kernels.OpMul)
	opDiv = binOp(kernels.OpDiv)
	opMax = binOp(kernels.OpMax)
	opMin = binOp(kernels.OpMin)
)

// applyBin writes dst[i] = a[i] op b[i] (vectorised where the CPU allows).
func applyBin(op binOp, dst, a, b []float32) { kernels.Binary(kernels.BinOp(op), dst, a, b) }

// applyBinScalar writes dst[i] = a[i] op s, or s op a[i] when scalarFirst.
func applyBinScalar(op binOp, dst, a []float32, s float32, scalarFirst bool) {
	kernels.BinaryScalar(kernels.BinOp(op), dst, a, s, scalarFirst)
}

// bcastKind is how one operand of a binary operation maps onto the output.
type bcastKind int

const (
	bcastFull   bcastKind = iota // same shape as the output
	bcastScalar                  // one value
	bcastSuffix                  // operand index = output index mod n (its non-1 axes are trailing)
	bcastPrefix                  // operand index = output index div inner (its non-1 axes are leading)
	bcastOther
	bcastParam // a per-channel parameter of a fused batch norm, read whole
)

// classify returns how operand (same rank as out, or a scalar) broadcasts onto out, and for
// suffix/prefix patterns the operand's size (suffix) or the output's inner block (prefix).
func classify(operand, out shapes.Shape) (bcastKind, int) {
	if operand.Size() == out.Size() {
		return bcastFull, 0
	}
	if operand.Size() == 1 {
		return bcastScalar, 0
	}
	if operand.Rank() != out.Rank() {
		return bcastOther, 0
	}
	first, last := -1, -1
	for a, d := range operand.Dimensions {
		if d != 1 {
			if first < 0 {
				first = a
			}
			last = a
		}
	}
	for a := first; a <= last; a++ {
		if operand.Dimensions[a] != out.Dimensions[a] {
			return bcastOther, 0 // a size-1 axis between broadcast ones
		}
	}
	if last == out.Rank()-1 {
		return bcastSuffix, operand.Size()
	}
	if first == 0 {
		inner := 1
		for _, d := range out.Dimensions[last+1:] {
			inner *= d
		}
		return bcastPrefix, inner
	}
	return bcastOther, 0
}

func (b *Builder) binary(name string, op binOp, lhs, rhs compute.Value, fallback func(sf compute.Function, in []compute.Value) ([]compute.Value, error)) (compute.Value, error) {
	in, err := b.checkOps(name, lhs, rhs)
	if err != nil {
		return nil, err
	}
	ls, rs := in[0].shape, in[1].shape
	var opType compute.OpType
	switch op {
	case opAdd:
		opType = compute.OpTypeAdd
	case opSub:
		opType = compute.OpTypeSub
	case opMul:
		opType = compute.OpTypeMul
	case opDiv:
		opType = compute.OpTypeDiv
	case opMax:
		opType = compute.OpTypeMax
	case opMin:
		opType = compute.OpTypeMin
	}
	out, err := shapeinference.BinaryOp(opType, ls, rs)
	lk, lsz := classify(ls, out)
	rk, rsz := classify(rs, out)
	if err != nil || !isFloat32(ls) || (lk != bcastFull && rk != bcastFull) || lk == bcastOther || rk == bcastOther {
		outs, err := b.delegate(name, []compute.Value{lhs, rhs}, fallback)
		if err != nil {
			return nil, err
		}
		return outs[0], nil
	}
	n := b.addNode(name, execFunc(func(be *Backend, ins []compute.Buffer, donate []bool) ([]compute.Buffer, error) {
		a, c := be.f32(ins[0]), be.f32(ins[1])
		buf, dst, err := be.outputLike(out, ins, donate)
		if err != nil {
			return nil, err
		}
		size := out.Size()
		// The full-shape operand first; the other one broadcast (or full too).
		full, other, kind, osz, scalarFirst := a, c, rk, rsz, false
		if lk != bcastFull {
			full, other, kind, osz, scalarFirst = c, a, lk, lsz, true
		}
		apply := func(dst, x, y []float32) {
			if scalarFirst {
				applyBin(op, dst, y, x)
			} else {
				applyBin(op, dst, x, y)
			}
		}
		switch kind {
		case bcastFull:
			be.pool.ParallelRange(size, elementGrain, func(lo, hi int) { applyBin(op, dst[lo:hi], a[lo:hi], c[lo:hi]) })
		case bcastScalar:
			s := other[0]
			be.pool.ParallelRange(size, elementGrain, func(lo, hi int) { applyBinScalar(op, dst[lo:hi], full[lo:hi], s, scalarFirst) })
		case bcastSuffix:
			rows := size / osz
			be.pool.ParallelRange(rows, max(1, elementGrain/osz), func(lo, hi int) {
				for r := lo; r < hi; r++ {
					apply(dst[r*osz:(r+1)*osz], full[r*osz:(r+1)*osz], other)
				}
			})
		case bcastPrefix:
			rows := size / osz
			be.pool.ParallelRange(rows, max(1, elementGrain/osz), func(lo, hi int) {
				for r := lo; r < hi; r++ {
					applyBinScalar(op, dst[r*osz:(r+1)*osz], full[r*osz:(r+1)*osz], other[r], scalarFirst)
				}
			})
		}
		return []compute.Buffer{buf}, nil
	}), in, out)
	n.ew = &ewOp{kind: ewBinary, bin: op, size: out.Size(), inputs: []ewInput{{lk, lsz}, {rk, rsz}}}
	return n.outputs[0], nil
}

// outputLike returns a buffer for an element-wise result of shape out: a consumed float32
// input of that shape when there is one, otherwise a new buffer.
func (be *Backend) outputLike(out shapes.Shape, ins []compute.Buffer, donate []bool) (compute.Buffer, []float32, error) {
	for i, buf := range ins {
		if !donate[i] {
			continue
		}
		if buf.(*Buffer).shape.Equal(out) {
			return buf, be.f32(buf), nil
		}
	}
	return be.newF32(out)
}

// Add implements compute.Function.
func (b *Builder) Add(lhs, rhs compute.Value) (compute.Value, error) {
	return b.binary("Add", opAdd, lhs, rhs, func(sf compute.Function, in []compute.Value) ([]compute.Value, error) {
		return ops1(sf.Add(in[0], in[1]))
	})
}

// Sub implements compute.Function.
func (b *Builder) Sub(lhs, rhs compute.Value) (compute.Value, error) {
	return b.binary("Sub", opSub, lhs, rhs, func(sf compute.Function, in []compute.Value) ([]compute.Value, error) {
		return ops1(sf.Sub(in[0], in[1]))
	})
}

// Mul implements compute.Function.
func (b *Builder) Mul(lhs, rhs compute.Value) (compute.Value, error) {
	return b.binary("Mul", opMul, lhs, rhs, func(sf compute.Function, in []compute.Value) ([]compute.Value, error) {
		return ops1(sf.Mul(in[0], in[1]))
	})
}

// Div implements compute.Function.
func (b *Builder) Div(lhs, rhs compute.Value) (compute.Value, error) {
	return b.binary("Div", opDiv, lhs, rhs, func(sf compute.Function, in []compute.Value) ([]compute.Value, error) {
		return ops1(sf.Div(in[0], in[1]))
	})
}

// Max implements compute.Function.
func (b *Builder) Max(lhs, rhs compute.Value) (compute.Value, error) {
	return b.binary("Max", opMax, lhs, rhs, func(sf compute.Function, in []compute.Value) ([]compute.Value, error) {
		return ops1(sf.Max(in[0], in[1]))
	})
}

// Min implements compute.Function.
func (b *Builder) Min(lhs, rhs compute.Value) (compute.Value, error) {
	return b.binary("Min", opMin, lhs, rhs, func(sf compute.Function, in []compute.Value) ([]compute.Value, error) {
		return ops1(sf.Min(in[0], in[1]))
	})
}

// unary adds a float32 element-wise function, parallel; other dtypes go to the pure-Go backend.
func (b *Builder) unary(name string, x compute.Value, f func(dst, src []float32), fallback func(sf compute.Function, in []compute.Value) ([]compute.Value, error)) (compute.Value, error) {
	in, err := b.checkOps(name, x)
	if err != nil {
		return nil, err
	}
	s := in[0].shape
	if !isFloat32(s) {
		outs, err := b.delegate(name, []compute.Value{x}, fallback)
		if err != nil {
			return nil, err
		}
		return outs[0], nil
	}
	n := b.addNode(name, execFunc(func(be *Backend, ins []compute.Buffer, donate []bool) ([]compute.Buffer, error) {
		src := be.f32(ins[0])
		buf, dst, err := be.outputLike(s, ins, donate)
		if err != nil {
			return nil, err
		}
		be.pool.ParallelRange(len(src), elementGrain, func(lo, hi int) { f(dst[lo:hi], src[lo:hi]) })
		return []compute.Buffer{buf}, nil
	}), in, s)
	n.ew = &ewOp{kind: ewUnary, unary: f, size: s.Size(), inputs: []ewInput{{bcastFull, 0}}}
	return n.outputs[0], nil
}

// Neg implements compute.Function.
func (b *Builder) Neg(x compute.Value) (compute.Value, error) {
	return b.unary("Neg", x, func(dst, src []float32) {
		for i, v := range src {
			dst[i] = -v
		}
	}, func(sf compute.Function, in []compute.Value) ([]compute.Value, error) { return ops1(sf.Neg(in[0])) })
}

// Abs implements compute.Function.
func (b *Builder) Abs(x compute.Value) (compute.Value, error) {
	return b.unary("Abs", x, func(dst, src []float32) {
		for i, v := range src {
			dst[i] = float32(math.Abs(float64(v)))
		}
	}, func(sf compute.Function, in []compute.Value) ([]compute.Value, error) { return ops1(sf.Abs(in[0])) })
}

// Sign implements compute.Function: -1, 0 or 1 (NaN stays NaN), as the pure-Go backend.
func (b *Builder) Sign(x compute.Value) (compute.Value, error) {
	return b.unary("Sign", x, func(dst, src []float32) {
		kernels.Sign(dst, src)
	}, func(sf compute.Function, in []compute.Value) ([]compute.Value, error) { return ops1(sf.Sign(in[0])) })
}

// Sqrt implements compute.Function.
func (b *Builder) Sqrt(x compute.Value) (compute.Value, error) {
	return b.unary("Sqrt", x, func(dst, src []float32) {
		for i, v := range src {
			dst[i] = float32(math.Sqrt(float64(v)))
		}
	}, func(sf compute.Function, in []compute.Value) ([]compute.Value, error) { return ops1(sf.Sqrt(in[0])) })
}

// Rsqrt implements compute.Function.
func (b *Builder) Rsqrt(x compute.Value) (compute.Value, error) {
	return b.unary("Rsqrt", x, func(dst, src []float32) {
		for i, v := range src {
			dst[i] = float32(1 / math.Sqrt(float64(v)))
		}
	}, func(sf compute.Function, in []compute.Value) ([]compute.Value, error) { return ops1(sf.Rsqrt(in[0])) })
}

// Exp implements compute.Function.
func (b *Builder) Exp(x compute.Value) (compute.Value, error) {
	return b.unary("Exp", x, func(dst, src []float32) {
		for i, v := range src {
			dst[i] = float32(math.Exp(float64(v)))
		}
	}, func(sf compute.Function, in []compute.Value) ([]compute.Value, error) { return ops1(sf.Exp(in[0])) })
}

// Log implements compute.Function.
func (b *Builder) Log(x compute.Value) (compute.Value, error) {
	return b.unary("Log", x, func(dst, src []float32) {
		for i, v := range src {
			dst[i] = float32(math.Log(float64(v)))
		}
	}, func(sf compute.Function, in []compute.Value) ([]compute.Value, error) { return ops1(sf.Log(in[0])) })
}

// Transpose implements compute.Function: a parallel strided copy for float32.
func (b *Builder) Transpose(x compute.Value, permutation ...int) (compute.Value, error) {
	in, err := b.checkOps("Transpose", x)
	if err != nil {
		return nil, err
	}
	s := in[0].shape
	out, err := shapeinference.Transpose(s, permutation)
	if err != nil || !isFloat32(s) {
		outs, err := b.delegate("Transpose", []compute.Value{x}, func(sf compute.Function, in []compute.Value) ([]compute.Value, error) {
			return ops1(sf.Transpose(in[0], permutation...))
		})
		if err != nil {
			return nil, err
		}
		return outs[0], nil
	}
	if isIdentity(permutation) {
		return x, nil
	}
	dims, perm := s.Dimensions, append([]int(nil), permutation...)
	n := b.addNode("Transpose", execFunc(func(be *Backend, ins []compute.Buffer, _ []bool) ([]compute.Buffer, error) {
		buf, dst, err := be.newF32(out)
		if err != nil {
			return nil, err
		}
		transposeF32(be.pool, dst, be.f32(ins[0]), dims, perm)
		return []compute.Buffer{buf}, nil
	}), in, out)
	return n.outputs[0], nil
}

// BroadcastInDim implements compute.Function: a parallel copy with zero strides on the
// broadcast axes, for float32.
func (b *Builder) BroadcastInDim(x compute.Value, outputShape shapes.Shape, broadcastAxes []int) (compute.Value, error) {
	in, err := b.checkOps("BroadcastInDim", x)
	if err != nil {
		return nil, err
	}
	s := in[0].shape
	if err := shapeinference.BroadcastInDim(s, outputShape, broadcastAxes, nil); err != nil || !isFloat32(s) {
		outs, err := b.delegate("BroadcastInDim", []compute.Value{x}, func(sf compute.Function, in []compute.Value) ([]compute.Value, error) {
			return ops1(sf.BroadcastInDim(in[0], outputShape, broadcastAxes))
		})
		if err != nil {
			return nil, err
		}
		return outs[0], nil
	}
	out := outputShape.Clone()
	inStr := rowMajorStrides(s.Dimensions)
	sStr := make([]int, out.Rank())
	for i, a := range broadcastAxes {
		if s.Dimensions[i] != 1 {
			sStr[a] = inStr[i]
		}
	}
	dStr := rowMajorStrides(out.Dimensions)
	n := b.addNode("BroadcastInDim", execFunc(func(be *Backend, ins []compute.Buffer, _ []bool) ([]compute.Buffer, error) {
		buf, dst, err := be.newF32(out)
		if err != nil {
			return nil, err
		}
		src := be.f32(ins[0])
		if len(src) == 1 {
			v := src[0]
			be.pool.ParallelRange(len(dst), elementGrain, func(lo, hi int) {
				for i := lo; i < hi; i++ {
					dst[i] = v
				}
			})
		} else {
			copyND(be.pool, dst, src, out.Dimensions, 0, dStr, 0, sStr)
		}
		return []compute.Buffer{buf}, nil
	}), in, out)
	if kind, size := broadcastPattern(s, out, broadcastAxes); kind != bcastOther {
		n.ew = &ewOp{kind: ewBroadcast, size: out.Size(), inputs: []ewInput{{kind, size}}}
	}
	n.broadcastAxes = append([]int(nil), broadcastAxes...)
	return n.outputs[0], nil
}

// broadcastPattern classifies BroadcastInDim's source against its output, as classify does
// for a binary operation's operand (bcastOther when it is none of the simple patterns).
func broadcastPattern(src, out shapes.Shape, axes []int) (bcastKind, int) {
	expanded := make([]int, out.Rank())
	for i := range expanded {
		expanded[i] = 1
	}
	for i, a := range axes {
		if i > 0 && a <= axes[i-1] {
			return bcastOther, 0
		}
		expanded[a] = src.Dimensions[i]
	}
	return classify(shapes.Make(src.DType, expanded...), out)
}

// ReduceSum implements compute.Function.
func (b *Builder) ReduceSum(x compute.Value, axes ...int) (compute.Value, error) {
	return b.reduce("ReduceSum", opAdd, x, axes, func(sf compute.Function, in []compute.Value) ([]compute.Value, error) {
		return ops1(sf.ReduceSum(in[0], axes...))
	})
}

// ReduceMax implements compute.Function.
func (b *Builder) ReduceMax(x compute.Value, axes ...int) (compute.Value, error) {
	return b.reduce("ReduceMax", opMax, x, axes, func(sf compute.Function, in []compute.Value) ([]compute.Value, error) {
		return ops1(sf.ReduceMax(in[0], axes...))
	})
}

// ReduceMin implements compute.Function.
func (b *Builder) ReduceMin(x compute.Value, axes ...int) (compute.Value, error) {
	return b.reduce("ReduceMin", opMin, x, axes, func(sf compute.Function, in []compute.Value) ([]compute.Value, error) {
		return ops1(sf.ReduceMin(in[0], axes...))
	})
}

// reduce handles float32 reductions over one contiguous block of axes, viewed as
// [outer, reduced, inner]: in parallel over outer when it is large, over the reduced axis (with
// per-thread partial results) otherwise. Other cases go to the pure-Go backend.
func (b *Builder) reduce(name string, op binOp, x compute.Value, axes []int, fallback func(sf compute.Function, in []compute.Value) ([]compute.Value, error)) (compute.Value, error) {
	in, err := b.checkOps(name, x)
	if err != nil {
		return nil, err
	}
	s := in[0].shape
	if len(axes) == 0 { // no axes: reduce them all
		axes = make([]int, s.Rank())
		for a := range axes {
			axes[a] = a
		}
	}
	out, err := shapeinference.Reduce(s, axes)
	out.DType = s.DType
	reduced := make([]bool, s.Rank())
	for _, a := range axes {
		if a >= 0 && a < s.Rank() {
			reduced[a] = true
		}
	}
	first, last := -1, -1
	contiguous := true
	for a, r := range reduced {
		if !r || s.Dimensions[a] == 1 {
			continue
		}
		if first < 0 {
			first = a
		} else if last != a-1 {
			// A kept axis of size > 1 between reduced ones?
			for m := last + 1; m < a; m++ {
				if s.Dimensions[m] != 1 {
					contiguous = false
				}
			}
		}
		last = a
	}
	if err == nil && op == opAdd && isFloat32(s) {
		if v, ok := b.dotFromProductSum(in[0], axes, out); ok {
			return v, nil
		}
	}
	if err != nil || !isFloat32(s) || !contiguous {
		outs, err := b.delegate(name, []compute.Value{x}, fallback)
		if err != nil {
			return nil, err
		}
		return outs[0], nil
	}
	outer, mid, inner := 1, 1, 1
	for a, d := range s.Dimensions {
		switch {
		case first < 0 || a < first:
			outer *= d
		case a <= last:
			mid *= d
		default:
			inner *= d
		}
	}
	if first < 0 { // only size-1 axes reduced: a copy
		outer, mid, inner = 1, 1, s.Size()
	}
	n := b.addNode(name, execFunc(func(be *Backend, ins []compute.Buffer, _ []bool) ([]compute.Buffer, error) {
		buf, dst, err := be.newF32(out)
		if err != nil {
			return nil, err
		}
		reduceF32(be.pool, op, dst, be.f32(ins[0]), outer, mid, inner)
		return []compute.Buffer{buf}, nil
	}), in, out)
	return n.outputs[0], nil
}

// reduceF32 reduces src [outer, mid, inner] over mid into dst [outer, inner].
func reduceF32(pool *kernels.Pool, op binOp, dst, src []float32, outer, mid, inner int) {
	if mid == 0 {
		var v float32
		switch op {
		case opMax:
			v = float32(math.Inf(-1))
		case opMin:
			v = float32(math.Inf(1))
		}
		for i := range dst {
			dst[i] = v
		}
		return
	}
	// rows reduces rows [lo, hi) of one outer block into acc (inner values).
	rows := func(acc, block []float32, lo, hi int) {
		for r := lo; r < hi; r++ {
			applyBin(op, acc, acc, block[r*inner:(r+1)*inner])
		}
	}
	if outer >= pool.Threads() || mid*inner < 4*elementGrain {
		pool.ParallelRange(outer, max(1, elementGrain/(mid*inner)), func(lo, hi int) {
			for o := lo; o < hi; o++ {
				block := src[o*mid*inner : (o+1)*mid*inner]
				acc := dst[o*inner : (o+1)*inner]
				if inner == 1 && op == opAdd {
					var s float32
					for _, v := range block {
						s += v
					}
					acc[0] = s
					continue
				}
				copy(acc, block[:inner])
				rows(acc, block, 1, mid)
			}
		})
		return
	}
	// Few outer blocks: split the reduced axis, one partial result per part.
	for o := range outer {
		block := src[o*mid*inner : (o+1)*mid*inner]
		parts := min(pool.Threads(), mid)
		partial := make([][]float32, parts)
		pool.ParallelFor(parts, func(t int) {
			lo, hi := t*mid/parts, (t+1)*mid/parts
			acc := make([]float32, inner)
			copy(acc, block[lo*inner:(lo+1)*inner])
			rows(acc, block, lo+1, hi)
			partial[t] = acc
		})
		acc := dst[o*inner : (o+1)*inner]
		copy(acc, partial[0])
		for _, p := range partial[1:] {
			applyBin(op, acc, acc, p)
		}
	}
}

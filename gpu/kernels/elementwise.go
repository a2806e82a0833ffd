package kernels

import "math"

// Element-wise float32 loops for the CPU backend's fused chains: AVX2 (8 floats at a time)
// where the CPU has it, plain Go for the tails and elsewhere. Results are rounded exactly as the
// Go loops round them (no fused multiply-add); max and min return NaN when either operand is
// NaN, as Go's builtins (the sign of a zero result may differ from them).

// BinOp is an element-wise binary operation.
type BinOp int

// The binary operations.
const (
	OpAdd BinOp = iota
	OpSub
	OpMul
	OpDiv
	OpMax
	OpMin
)

// Binary writes dst[i] = x[i] op y[i] for i < len(x); dst and y must be at least as long.
func Binary(op BinOp, dst, x, y []float32) {
	n := len(x)
	dst, y = dst[:n], y[:n]
	v := vectorized(n)
	if v > 0 {
		vecBinary(op, dst, x, y, v)
	}
	binaryGo(op, dst[v:], x[v:], y[v:])
}

// BinaryScalar writes dst[i] = x[i] op s, or s op x[i] when scalarFirst.
func BinaryScalar(op BinOp, dst, x []float32, s float32, scalarFirst bool) {
	n := len(x)
	dst = dst[:n]
	v := vectorized(n)
	if v > 0 {
		vecBinaryScalar(op, dst, x, s, scalarFirst, v)
	}
	binaryScalarGo(op, dst[v:], x[v:], s, scalarFirst)
}

// Sign writes dst[i] = ±1 with x[i]'s sign, and x[i] itself for ±0 and NaN.
func Sign(dst, x []float32) {
	n := len(x)
	dst = dst[:n]
	v := vectorized(n)
	if v > 0 {
		vecSign(dst, x, v)
	}
	for i, e := range x[v:] {
		dst[v+i] = sign32(e)
	}
}

// Affine writes dst[i] = x[i]·m[i] + c[i].
func Affine(dst, x, m, c []float32) {
	n := len(x)
	dst, m, c = dst[:n], m[:n], c[:n]
	v := vectorized(n)
	if v > 0 {
		vecAffine(dst, x, m, c, v)
	}
	for i := v; i < n; i++ {
		dst[i] = x[i]*m[i] + c[i]
	}
}

// ChannelSums adds the rows of x (len(x)/channels rows of channels floats) into per-channel
// sums, t1[c] += x[r][c] and t2[c] += x[r][c]·x[r][c] (a multiply, then an add), the rows in
// order: the bits of Binary's add, multiply and add on each row, in one pass over x.
func ChannelSums(t1, t2, x []float32, channels int) {
	rows := len(x) / channels
	t1, t2 = t1[:channels], t2[:channels]
	v := vectorized(channels)
	if v > 0 && rows > 0 {
		vecChannelSums(t1, t2, x, channels, v, rows)
	}
	for r := range rows {
		row := x[r*channels : (r+1)*channels]
		for c := v; c < channels; c++ {
			t1[c] += row[c]
			t2[c] += float32(row[c] * row[c]) // the conversion keeps the product rounded (no FMA)
		}
	}
}

// ChannelSumsCentred adds the rows of y into t1 and (x − center)·y into t2 per channel, x and y
// holding len(x)/channels rows of channels floats, as ChannelSums does (a subtraction, a
// multiply, then an add, the rows in order).
func ChannelSumsCentred(t1, t2, x, y, center []float32, channels int) {
	rows := len(x) / channels
	t1, t2, center = t1[:channels], t2[:channels], center[:channels]
	y = y[:rows*channels]
	v := vectorized(channels)
	if v > 0 && rows > 0 {
		vecChannelSumsCentred(t1, t2, x, y, center, channels, v, rows)
	}
	for r := range rows {
		xs, ys := x[r*channels:(r+1)*channels], y[r*channels:(r+1)*channels]
		for c := v; c < channels; c++ {
			t1[c] += ys[c]
			t2[c] += float32((xs[c] - center[c]) * ys[c])
		}
	}
}

func binaryGo(op BinOp, dst, x, y []float32) {
	y = y[:len(x)]
	dst = dst[:len(x)]
	switch op {
	case OpAdd:
		for i, v := range x {
			dst[i] = v + y[i]
		}
	case OpSub:
		for i, v := range x {
			dst[i] = v - y[i]
		}
	case OpMul:
		for i, v := range x {
			dst[i] = v * y[i]
		}
	case OpDiv:
		for i, v := range x {
			dst[i] = v / y[i]
		}
	case OpMax:
		for i, v := range x {
			dst[i] = max(v, y[i])
		}
	case OpMin:
		for i, v := range x {
			dst[i] = min(v, y[i])
		}
	}
}

func binaryScalarGo(op BinOp, dst, x []float32, s float32, scalarFirst bool) {
	dst = dst[:len(x)]
	switch {
	case op == OpAdd:
		for i, v := range x {
			dst[i] = v + s
		}
	case op == OpMul:
		for i, v := range x {
			dst[i] = v * s
		}
	case op == OpMax:
		for i, v := range x {
			dst[i] = max(v, s)
		}
	case op == OpMin:
		for i, v := range x {
			dst[i] = min(v, s)
		}
	case op == OpSub && !scalarFirst:
		for i, v := range x {
			dst[i] = v - s
		}
	case op == OpSub:
		for i, v := range x {
			dst[i] = s - v
		}
	case op == OpDiv && !scalarFirst:
		for i, v := range x {
			dst[i] = v / s
		}
	case op == OpDiv:
		for i, v := range x {
			dst[i] = s / v
		}
	}
}

// sign32 is ±1 with v's sign, v itself for ±0 and NaN, without branches.
func sign32(v float32) float32 {
	bits := math.Float32bits(v)
	d := int64(bits&0x7fffffff) - 1 // in [0, 0x7f800000) for non-zero numbers, ±Inf included
	m := uint32(^(d >> 63) & ((d - 0x7f800000) >> 63))
	return math.Float32frombits(m&(bits&0x80000000|0x3f800000) | ^m&bits)
}

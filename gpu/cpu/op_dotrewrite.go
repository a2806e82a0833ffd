package cpu

import (
	"slices"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/shapes"
)

// GoMLX v0.26 differentiates DotGeneral (and Dot) by broadcasting both operands to the full
// i·j·k product, multiplying and summing the contracted axes: memory and time of the whole
// product instead of a matrix multiply (a 512×512 projector at batch 128 builds a 33M-value
// temporary for each gradient). dotFromProductSum recognises ReduceSum(Mul(a, b)) where a and
// b are broadcasts with distinct free axes and builds the equivalent DotGeneral; the Mul and
// broadcasts are then left unused and never run.

// productOperand is one factor of the product: a source value and, per source axis, the
// product axis it spans.
type productOperand struct {
	src  *value
	axes []int
}

// factor sees through a native BroadcastInDim; otherwise the value maps axis to axis.
func factor(v *value) productOperand {
	if v.node.broadcastAxes != nil && len(v.node.inputs) == 1 {
		return productOperand{src: v.node.inputs[0], axes: v.node.broadcastAxes}
	}
	axes := make([]int, v.shape.Rank())
	for i := range axes {
		axes[i] = i
	}
	return productOperand{src: v, axes: axes}
}

// dotFromProductSum returns the DotGeneral equivalent of ReduceSum(x, axes) when x is such a
// product, and false otherwise.
func (b *Builder) dotFromProductSum(x *value, axes []int, out shapes.Shape) (compute.Value, bool) {
	mul := x.node
	if mul.name != "Mul" || len(mul.inputs) != 2 || len(axes) == 0 || mul.outputs[0].shape.Rank() != x.shape.Rank() {
		return nil, false
	}
	dims := x.shape.Dimensions
	rank := len(dims)
	reduced := make([]bool, rank)
	reducedSize := 1
	for _, a := range axes {
		reduced[a] = true
		reducedSize *= dims[a]
	}
	if reducedSize < 8 {
		return nil, false // a small sum: not worth a matrix multiply
	}
	f := [2]productOperand{factor(mul.inputs[0]), factor(mul.inputs[1])}
	// spans[k][p]: the source axis of factor k that spans product axis p, or -1.
	var spans [2][]int
	for k := range f {
		if f[k].src.shape.Rank() != len(f[k].axes) {
			return nil, false
		}
		spans[k] = slices.Repeat([]int{-1}, rank)
		for i, p := range f[k].axes {
			if d := f[k].src.shape.Dimensions[i]; d == dims[p] && d > 1 {
				spans[k][p] = i
			} else if d != 1 {
				return nil, false
			}
		}
	}
	var contract, batch [2][]int
	var freeAxes [2][]int // product axes only one factor spans, in product order
	for p := range rank {
		a, c := spans[0][p], spans[1][p]
		switch {
		case dims[p] == 1:
		case a >= 0 && c >= 0 && reduced[p]:
			contract[0], contract[1] = append(contract[0], a), append(contract[1], c)
		case a >= 0 && c >= 0:
			batch[0], batch[1] = append(batch[0], a), append(batch[1], c)
		case reduced[p]:
			return nil, false // summed over an axis only one factor has (or neither)
		case a >= 0:
			freeAxes[0] = append(freeAxes[0], p)
		case c >= 0:
			freeAxes[1] = append(freeAxes[1], p)
		default:
			return nil, false // an axis neither factor has
		}
	}
	if len(freeAxes[0]) == 0 || len(freeAxes[1]) == 0 || len(contract[0]) == 0 {
		return nil, false
	}
	// DotGeneral's free axes are the factors' remaining source axes, in source order; their
	// product axes give the order of its output's non-batch axes.
	var order []int // product axis of each output axis of DotGeneral (-1: size 1)
	for i, a := range batch[0] {
		_ = i
		order = append(order, f[0].axes[a])
	}
	for k := range f {
		used := make(map[int]bool)
		for _, a := range slices.Concat(contract[k], batch[k]) {
			used[a] = true
		}
		for i := range f[k].axes {
			if used[i] {
				continue
			}
			if f[k].src.shape.Dimensions[i] == 1 {
				order = append(order, -1)
			} else {
				order = append(order, f[k].axes[i])
			}
		}
	}
	dot, err := b.DotGeneral(f[0].src, contract[0], batch[0], f[1].src, contract[1], batch[1], compute.DotGeneralConfig{})
	if err != nil {
		return nil, false
	}
	// Drop size-1 axes, put the rest in product order, then shape as ReduceSum's output.
	var kept, keptDims []int
	for i, p := range order {
		if p >= 0 {
			kept = append(kept, p)
			keptDims = append(keptDims, dims[p])
		}
		_ = i
	}
	res := dot
	if len(kept) != len(order) {
		if res, err = b.Reshape(res, keptDims...); err != nil {
			return nil, false
		}
	}
	sorted := slices.Clone(kept)
	slices.Sort(sorted)
	perm := make([]int, len(kept))
	for j, p := range sorted {
		perm[j] = slices.Index(kept, p)
	}
	if !isIdentity(perm) {
		if res, err = b.Transpose(res, perm...); err != nil {
			return nil, false
		}
	}
	if rs, _ := b.OpShape(res); !rs.Equal(out) {
		if res, err = b.Reshape(res, out.Dimensions...); err != nil {
			return nil, false
		}
	}
	return res, true
}

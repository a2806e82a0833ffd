package cpu

import (
	"fmt"
	"slices"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"

	"github.com/dcl-beam/dcl-beam/gpu/kernels"
)

// DotGeneral implements compute.Function: for float32 (accumulated and returned in float32),
// batched packed matrix multiplies (kernels.Pool.GemmBatch), reading each operand in place
// when its batch, free and contracting axes each form one strided run, otherwise after one
// transpose. Output axes: batch, lhs free, rhs free. Other dtypes go to the pure-Go backend.
func (b *Builder) DotGeneral(lhsOp compute.Value, lhsContractingAxes, lhsBatchAxes []int, rhsOp compute.Value, rhsContractingAxes, rhsBatchAxes []int, config compute.DotGeneralConfig) (compute.Value, error) {
	in, err := b.checkOps("DotGeneral", lhsOp, rhsOp)
	if err != nil {
		return nil, err
	}
	ls, rs := in[0].shape, in[1].shape
	float32Only := func(dt dtypes.DType) bool { return dt == dtypes.InvalidDType || dt == dtypes.Float32 }
	if !isFloat32(ls, rs) || !float32Only(config.AccumulatorDType) || !float32Only(config.OutputDType) {
		outs, err := b.delegate("DotGeneral", []compute.Value{lhsOp, rhsOp}, func(sf compute.Function, in []compute.Value) ([]compute.Value, error) {
			return ops1(sf.DotGeneral(in[0], lhsContractingAxes, lhsBatchAxes, in[1], rhsContractingAxes, rhsBatchAxes, config))
		})
		if err != nil {
			return nil, err
		}
		return outs[0], nil
	}
	if len(lhsContractingAxes) != len(rhsContractingAxes) || len(lhsBatchAxes) != len(rhsBatchAxes) {
		return nil, fmt.Errorf("DotGeneral: contracting axes %v/%v or batch axes %v/%v differ in number",
			lhsContractingAxes, rhsContractingAxes, lhsBatchAxes, rhsBatchAxes)
	}
	lFree, err := freeAxes(ls, lhsContractingAxes, lhsBatchAxes)
	if err != nil {
		return nil, fmt.Errorf("DotGeneral lhs: %w", err)
	}
	rFree, err := freeAxes(rs, rhsContractingAxes, rhsBatchAxes)
	if err != nil {
		return nil, fmt.Errorf("DotGeneral rhs: %w", err)
	}
	var outDims []int
	batch, m, nn, k := 1, 1, 1, 1
	for i, a := range lhsBatchAxes {
		d := ls.Dimensions[a]
		if rd := rs.Dimensions[rhsBatchAxes[i]]; rd != d {
			return nil, fmt.Errorf("DotGeneral: batch axis %d of lhs %s (%d) and axis %d of rhs %s (%d) differ", a, ls, d, rhsBatchAxes[i], rs, rd)
		}
		outDims = append(outDims, d)
		batch *= d
	}
	for i, a := range lhsContractingAxes {
		d := ls.Dimensions[a]
		if rd := rs.Dimensions[rhsContractingAxes[i]]; rd != d {
			return nil, fmt.Errorf("DotGeneral: contracting axis %d of lhs %s (%d) and axis %d of rhs %s (%d) differ", a, ls, d, rhsContractingAxes[i], rs, rd)
		}
		k *= d
	}
	for _, a := range lFree {
		outDims = append(outDims, ls.Dimensions[a])
		m *= ls.Dimensions[a]
	}
	for _, a := range rFree {
		outDims = append(outDims, rs.Dimensions[a])
		nn *= rs.Dimensions[a]
	}
	outShape := shapes.Make(ls.DType, outDims...)
	plan := &dotPlan{batch: batch, m: m, n: nn, k: k, outShape: outShape}
	plan.lhs = newOperandView(ls.Dimensions, lhsBatchAxes, lFree, lhsContractingAxes)
	plan.rhs = newOperandView(rs.Dimensions, rhsBatchAxes, rFree, rhsContractingAxes)
	node := b.addNode("DotGeneral", plan, in, outShape)
	return node.outputs[0], nil
}

// freeAxes checks the axes are distinct and in range and returns the others, ascending.
func freeAxes(s shapes.Shape, contracting, batch []int) ([]int, error) {
	used := make([]bool, s.Rank())
	for _, a := range slices.Concat(contracting, batch) {
		if a < 0 || a >= s.Rank() || used[a] {
			return nil, fmt.Errorf("axis %d repeated or out of range for %s (contracting %v, batch %v)", a, s, contracting, batch)
		}
		used[a] = true
	}
	var free []int
	for a, u := range used {
		if !u {
			free = append(free, a)
		}
	}
	return free, nil
}

// operandView reads one DotGeneral operand as [batch][rows][depth] with element strides; perm
// is set when the axes do not form strided runs (or neither rows nor depth is contiguous) and
// the operand must first be transposed to [batch, rows, depth].
type operandView struct {
	dims                    []int
	perm                    []int
	bStride, rStride, dStr  int
	batchAxes, rows, depths []int
}

func newOperandView(dims, batchAxes, rowAxes, depthAxes []int) operandView {
	v := operandView{dims: dims, batchAxes: batchAxes, rows: rowAxes, depths: depthAxes}
	str := rowMajorStrides(dims)
	bs, okB := mergedStride(dims, str, batchAxes)
	rs, okR := mergedStride(dims, str, rowAxes)
	ds, okD := mergedStride(dims, str, depthAxes)
	rowsN, depthN := product(dims, rowAxes), product(dims, depthAxes)
	contiguous := rs == 1 || ds == 1 || rowsN == 1 || depthN == 1
	if okB && okR && okD && contiguous {
		v.bStride, v.rStride, v.dStr = bs, rs, ds
		if rowsN == 1 {
			v.rStride = 1
		}
		if depthN == 1 {
			v.dStr = 1
		}
		return v
	}
	v.perm = slices.Concat(batchAxes, rowAxes, depthAxes)
	v.bStride, v.rStride, v.dStr = rowsN*depthN, depthN, 1
	return v
}

// mergedStride returns the stride of axes read as one flattened index (row-major over axes in
// the given order), and false when they do not form one strided run. Axes of size 1 are free.
func mergedStride(dims, str, axes []int) (int, bool) {
	var kept []int
	for _, a := range axes {
		if dims[a] != 1 {
			kept = append(kept, a)
		}
	}
	if len(kept) == 0 {
		return 0, true
	}
	for i := 0; i+1 < len(kept); i++ {
		if str[kept[i]] != str[kept[i+1]]*dims[kept[i+1]] {
			return 0, false
		}
	}
	return str[kept[len(kept)-1]], true
}

func product(dims, axes []int) int {
	p := 1
	for _, a := range axes {
		p *= dims[a]
	}
	return p
}

// dotPlan runs one float32 DotGeneral.
type dotPlan struct {
	batch, m, n, k int
	lhs, rhs       operandView
	outShape       shapes.Shape
}

func (p *dotPlan) execute(be *Backend, ins []compute.Buffer, _ []bool) ([]compute.Buffer, error) {
	var temps []compute.Buffer
	defer func() {
		for _, t := range temps {
			be.release(t)
		}
	}()
	data := func(buf compute.Buffer, v operandView) ([]float32, error) {
		src := be.f32(buf)
		if v.perm == nil {
			return src, nil
		}
		t, dst, err := be.newF32(shapes.Make(p.outShape.DType, len(src)))
		if err != nil {
			return nil, err
		}
		temps = append(temps, t)
		transposeF32(be.pool, dst, src, v.dims, v.perm)
		return dst, nil
	}
	l, err := data(ins[0], p.lhs)
	if err != nil {
		return nil, err
	}
	r, err := data(ins[1], p.rhs)
	if err != nil {
		return nil, err
	}
	l, r, rounded, err := be.productOperands(l, r)
	temps = append(temps, rounded...)
	if err != nil {
		return nil, err
	}
	out, c, err := be.newF32(p.outShape)
	if err != nil {
		return nil, err
	}
	if p.k == 0 || len(c) == 0 {
		clear(c)
		return []compute.Buffer{out}, nil
	}
	be.pool.GemmBatch(p.batch, p.m, p.n, p.k, 1,
		func(i int) kernels.PanelSource {
			return kernels.Strided{Data: l, Off: i * p.lhs.bStride, RowStride: p.lhs.rStride, DepthStride: p.lhs.dStr}
		},
		func(i int) kernels.PanelSource {
			return kernels.Strided{Data: r, Off: i * p.rhs.bStride, RowStride: p.rhs.rStride, DepthStride: p.rhs.dStr}
		},
		0, c, p.n, p.m*p.n)
	return []compute.Buffer{out}, nil
}

package cpu

import (
	"slices"
	"sync"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/shapes"

	"github.com/dcl-beam/dcl-beam/gpu/kernels"
)

// Element-wise fusion: at Compile, chains of float32 element-wise operations of one size
// (binary operations with full, scalar, trailing- or leading-vector operands, unary
// functions, broadcasts of small tensors) become one node that runs them chunk by chunk, each
// chunk's intermediates staying in cache-sized registers. Only the values used outside the
// chain are written to memory. Batch norm and the ReLU gradient written in basic operations
// (as GoMLX's autodiff produces them) shrink from a dozen passes over memory to a few.

type ewKind int

const (
	ewBinary ewKind = iota
	ewUnary
	ewBroadcast
	ewAffine     // batch norm for inference: x·a[c] + b[c], a and b folded from its parameters
	ewScaleShift // batch norm for training's output: x·a[c] + b[c], a and b given
)

// ewOp describes a fusable element-wise node.
type ewOp struct {
	kind   ewKind
	bin    binOp
	unary  func(dst, src []float32)
	size   int       // output elements
	inputs []ewInput // per node input: how it maps onto the output
	affine *affineSpec
}

// affineSpec is a per-channel affine map over [outer, channels, inner].
type affineSpec struct {
	channels, inner int
	epsilon         float32
}

type ewInput struct {
	kind bcastKind
	size int // suffix: operand size; prefix: the output's inner block
}

// fuseChunk is the number of elements a fused chain processes at a time.
const fuseChunk = 1024

// fuseGroup is a chain being formed.
type fuseGroup struct {
	members []*node
	size    int
	closed  bool
}

// fuseElementwise replaces groups of two or more fusable nodes in order with fused nodes.
// A group takes a node whose output has the group's size and one of whose inputs a member
// produced; it closes as soon as a node outside it reads one of its values, so it can run
// where its last member was.
func fuseElementwise(b *Builder, order []*node, graphOutputs []*value) []*node {
	groupOf := make(map[*node]*fuseGroup)
	position := make(map[*node]int, len(order))
	var groups []*fuseGroup
	for i, n := range order {
		position[n] = i
		var join *fuseGroup
		fusable := n.ew != nil
		if fusable {
			// Join the open groups of this size n reads from, merging them if several (a
			// ReLU's Max reads the sum's chain and the chain broadcasting its zeros).
			for i, in := range n.inputs {
				if n.ew.inputs[i].kind == bcastParam {
					continue
				}
				g := groupOf[in.node]
				if g == nil || g.closed || g.size != n.ew.size || g == join {
					continue
				}
				if join == nil {
					join = g
					continue
				}
				join.members = append(join.members, g.members...)
				for _, m := range g.members {
					groupOf[m] = join
				}
				g.members = nil
			}
			// A batch norm's per-channel parameters are read whole, never from a register:
			// one computed inside the group (a tensor of the channels' size) keeps n out.
			for i, in := range n.inputs {
				if n.ew.inputs[i].kind == bcastParam && join != nil && groupOf[in.node] == join {
					join, fusable = nil, false
				}
			}
		}
		// Every other group n reads from is closed: n is outside it.
		for _, in := range n.inputs {
			if g := groupOf[in.node]; g != nil && g != join {
				g.closed = true
			}
		}
		if !fusable {
			continue
		}
		if join == nil {
			join = &fuseGroup{size: n.ew.size}
			groups = append(groups, join)
		}
		join.members = append(join.members, n)
		groupOf[n] = join
	}
	// Values read outside their group (or returned) escape it.
	external := make(map[*value]bool)
	for _, v := range graphOutputs {
		external[v] = true
	}
	for _, n := range order {
		for _, in := range n.inputs {
			if g := groupOf[in.node]; g != nil && groupOf[n] != g {
				external[in] = true
			}
		}
	}
	fusedAt := make(map[*node]*node) // last member → fused node
	skip := make(map[*node]bool)
	for _, g := range groups {
		if len(g.members) < 2 {
			continue
		}
		slices.SortFunc(g.members, func(a, b *node) int { return position[a] - position[b] })
		f := buildFused(b, g, external)
		for _, m := range g.members {
			skip[m] = true
		}
		fusedAt[g.members[len(g.members)-1]] = f
	}
	var out []*node
	for _, n := range order {
		if f := fusedAt[n]; f != nil {
			out = append(out, f)
			continue
		}
		if !skip[n] {
			out = append(out, n)
		}
	}
	return out
}

// operand is where an instruction reads one input: a register (a member's value), or an
// external input with its broadcast pattern.
type operand struct {
	reg  int // >= 0: register; -1: external
	ext  int // index among the fused node's inputs
	kind bcastKind
	size int
}

type instr struct {
	op     *ewOp
	args   []operand
	dst    int // register
	output int // index among the fused node's outputs, or -1
}

// fusedChain runs a fused group.
type fusedChain struct {
	size    int
	instrs  []instr
	nRegs   int
	outputs []shapes.Shape
	// reuse[i] is a full-size input output i may be written into when that input is consumed
	// (no instruction reads it after output i's is computed), or -1.
	reuse []int
}

func buildFused(b *Builder, g *fuseGroup, external map[*value]bool) *node {
	member := make(map[*node]bool)
	for _, m := range g.members {
		member[m] = true
	}
	chain := &fusedChain{size: g.size}
	regOf := make(map[*value]int)
	extOf := make(map[*value]int)
	var inputs []*value
	var outputs []*value
	for _, m := range g.members {
		in := instr{op: m.ew, output: -1}
		for i, v := range m.inputs {
			if member[v.node] {
				in.args = append(in.args, operand{reg: regOf[v], kind: bcastFull})
				continue
			}
			idx, ok := extOf[v]
			if !ok {
				idx = len(inputs)
				extOf[v] = idx
				inputs = append(inputs, v)
			}
			in.args = append(in.args, operand{reg: -1, ext: idx, kind: m.ew.inputs[i].kind, size: m.ew.inputs[i].size})
		}
		v := m.outputs[0]
		in.dst = chain.nRegs
		regOf[v] = chain.nRegs
		chain.nRegs++
		if external[v] {
			in.output = len(outputs)
			outputs = append(outputs, v)
			chain.outputs = append(chain.outputs, v.shape)
		}
		chain.instrs = append(chain.instrs, in)
	}
	// Last instruction reading each full-size external input.
	lastRead := make(map[int]int)
	for k, in := range chain.instrs {
		for _, a := range in.args {
			if a.reg < 0 && a.kind == bcastFull {
				lastRead[a.ext] = k
			}
		}
	}
	chain.reuse = make([]int, len(outputs))
	used := make(map[int]bool)
	for i := range outputs {
		chain.reuse[i] = -1
		producer := -1
		for k, in := range chain.instrs {
			if in.output == i {
				producer = k
			}
		}
		for ext := range inputs {
			last, read := lastRead[ext]
			if read && !used[ext] && last <= producer && inputs[ext].shape.Equal(outputs[i].shape) {
				chain.reuse[i] = ext
				used[ext] = true
				break
			}
		}
	}
	name := "Fused"
	for _, m := range g.members {
		name += "·" + m.name
	}
	f := &node{builder: b, name: name, inputs: inputs, outputs: outputs, run: chain, paramIdx: -1}
	return f
}

func (c *fusedChain) execute(be *Backend, ins []compute.Buffer, donate []bool) ([]compute.Buffer, error) {
	inData := make([][]float32, len(ins))
	for i, in := range ins {
		inData[i] = be.f32(in)
	}
	outs := make([]compute.Buffer, len(c.outputs))
	outData := make([][]float32, len(c.outputs))
	taken := make([]bool, len(ins))
	for i, s := range c.outputs {
		// Write into a consumed input when nothing reads it after this output is written.
		if in := c.reuse[i]; in >= 0 && donate[in] && !taken[in] {
			taken[in] = true
			outs[i], outData[i] = ins[in], inData[in]
			continue
		}
		buf, data, err := be.newF32(s)
		if err != nil {
			for j, o := range outs[:i] {
				if c.reuse[j] < 0 || !taken[c.reuse[j]] {
					be.release(o)
				}
			}
			return nil, err
		}
		outs[i], outData[i] = buf, data
	}
	// Fused batch norms: fold each one's parameters into per-channel a and b.
	affine := make([][2][]float32, len(c.instrs))
	for k, in := range c.instrs {
		if in.op.kind == ewAffine {
			p := func(j int) []float32 { return inData[in.args[j].ext] }
			a, b := inferenceAffine(in.op.affine.channels, in.op.affine.epsilon, p(1), p(2), p(3), p(4))
			affine[k] = [2][]float32{a, b}
		}
	}
	chunks := (c.size + fuseChunk - 1) / fuseChunk
	be.pool.ParallelRange(chunks, max(1, elementGrain/fuseChunk), func(lo, hi int) {
		ws := getFuseWorkspace(c.nRegs)
		defer fuseWorkspaces.Put(ws)
		store, regs, gather, gather2 := ws.store, ws.regs, ws.gather, ws.gather2
		for ch := lo; ch < hi; ch++ {
			start := ch * fuseChunk
			n := min(fuseChunk, c.size-start)
			for k, in := range c.instrs {
				// A value that leaves the chain is computed straight into its output.
				if in.output >= 0 {
					regs[in.dst] = outData[in.output][start : start+n]
				} else {
					regs[in.dst] = store[in.dst*fuseChunk : in.dst*fuseChunk+n]
				}
				dst := regs[in.dst]
				switch in.op.kind {
				case ewUnary:
					in.op.unary(dst, c.load(in.args[0], regs, inData, start, n, gather))
				case ewAffine:
					x := c.load(in.args[0], regs, inData, start, n, gather)
					a, b := affine[k][0], affine[k][1]
					affineChunk(in.op.affine, dst, x, a, b, start)
				case ewScaleShift:
					x := c.load(in.args[0], regs, inData, start, n, gather)
					a, b := inData[in.args[1].ext], inData[in.args[2].ext]
					affineChunk(in.op.affine, dst, x, a, b, start)
				case ewBroadcast:
					src := c.load(in.args[0], regs, inData, start, n, gather)
					if len(src) == 1 {
						for i := range dst {
							dst[i] = src[0]
						}
					} else {
						copy(dst, src)
					}
				case ewBinary:
					a := c.load(in.args[0], regs, inData, start, n, gather)
					b := c.load(in.args[1], regs, inData, start, n, gather2)
					switch {
					case len(a) == 1 && len(b) != 1:
						applyBinScalar(in.op.bin, dst, b, a[0], true)
					case len(b) == 1 && len(a) != 1:
						applyBinScalar(in.op.bin, dst, a, b[0], false)
					case len(a) == 1 && n > 1: // both scalars
						applyBin(in.op.bin, dst[:1], a, b)
						for i := range dst {
							dst[i] = dst[0]
						}
					default:
						applyBin(in.op.bin, dst, a, b)
					}
				}
			}
		}
	})
	return outs, nil
}

// fuseWorkspace is one goroutine's registers and gather buffers for a fused chain, recycled:
// chains run hundreds of times per training step.
type fuseWorkspace struct {
	store, gather, gather2 []float32
	regs                   [][]float32 // this chunk's view of each value
}

var fuseWorkspaces sync.Pool

func getFuseWorkspace(nRegs int) *fuseWorkspace {
	ws, _ := fuseWorkspaces.Get().(*fuseWorkspace)
	if ws == nil {
		ws = &fuseWorkspace{gather: make([]float32, fuseChunk), gather2: make([]float32, fuseChunk)}
	}
	if cap(ws.store) < nRegs*fuseChunk {
		ws.store = make([]float32, nRegs*fuseChunk)
		ws.regs = make([][]float32, nRegs)
	}
	ws.store, ws.regs = ws.store[:nRegs*fuseChunk], ws.regs[:nRegs]
	return ws
}

// load returns elements [start, start+n) of an operand: a register, a slice of a full input,
// a one-element slice for a scalar, or the broadcast values gathered into buf.
func (c *fusedChain) load(a operand, regs, inData [][]float32, start, n int, buf []float32) []float32 {
	if a.reg >= 0 {
		return regs[a.reg]
	}
	src := inData[a.ext]
	switch a.kind {
	case bcastFull:
		return src[start : start+n]
	case bcastScalar:
		return src[:1]
	case bcastSuffix:
		out := buf[:n]
		for i := 0; i < n; {
			off := (start + i) % a.size
			k := copy(out[i:], src[off:])
			i += k
		}
		return out
	case bcastPrefix:
		out := buf[:n]
		for i := 0; i < n; {
			idx := (start + i) / a.size
			run := min(n-i, (idx+1)*a.size-(start+i))
			v := src[idx]
			for j := i; j < i+run; j++ {
				out[j] = v
			}
			i += run
		}
		return out
	}
	panic("fused chain: unsupported operand pattern")
}

// affineChunk writes dst[i] = x[i]·a[c] + b[c] for elements [start, start+len(x)) of a
// [outer, channels, inner] tensor, c being element i's channel: in runs that share a channel
// (inner > 1) or that walk the channels in step (channels last).
func affineChunk(sp *affineSpec, dst, x, a, b []float32, start int) {
	n := len(x)
	if sp.inner == 1 {
		ch := start % sp.channels
		for i := 0; i < n; {
			k := min(n-i, sp.channels-ch)
			kernels.Affine(dst[i:i+k], x[i:i+k], a[ch:ch+k], b[ch:ch+k])
			i += k
			ch = 0
		}
		return
	}
	for i := 0; i < n; {
		pos := start + i
		ch := (pos / sp.inner) % sp.channels
		k := min(n-i, sp.inner-pos%sp.inner)
		kernels.BinaryScalar(kernels.OpMul, dst[i:i+k], x[i:i+k], a[ch], false)
		kernels.BinaryScalar(kernels.OpAdd, dst[i:i+k], dst[i:i+k], b[ch], false)
		i += k
	}
}

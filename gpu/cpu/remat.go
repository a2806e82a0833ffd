package cpu

import (
	"math"
	"slices"
)

// Rematerialisation: at Compile, before fusion, the execution order is rewritten so that fewer
// large values stay alive between the forward and the backward pass.
//
//   - A broadcast of a smaller value read by several fusable operations gets a private copy
//     placed just before each of them, which fuses into that reader's chain and is never
//     written out. (GoMLX's ZerosLike for a ReLU is otherwise a full tensor of zeros kept
//     alive until the ReLU's gradient.)
//   - A value of a cheap element-wise operation read once more long after it was computed (the
//     ReLU's input, batch norm's normalised output or a residual sum, read by the ReLU's
//     gradient) is recomputed by the reading chain from inputs that are alive there anyway (the
//     convolution's output, which batch norm's gradient needs, and the block's input), instead
//     of being kept for the whole backward pass.
//   - The same for a late reader that cannot take the value into a chain (a convolution's
//     kernel gradient reading a ReLU's output): the value is recomputed in a pass of its own
//     just before it, from results of operations that are not recomputable themselves (the
//     convolutions' outputs, kept for batch norm's gradient). In a ResNet training step this
//     keeps about one tensor per convolution instead of two, for one extra element-wise pass
//     per convolution in the backward pass (about 2% of the step).
//
// Recomputation repeats exactly the operations that produced the value, on the same inputs, so
// results are bit for bit the same.

// rematMaxDepth bounds how many operations one recomputation repeats.
const rematMaxDepth = 4

// rematUse is one read of a value: the reading node and where it runs, as the position in the
// original order of the node it runs before (a copy runs just before its reader).
type rematUse struct {
	n    *node
	slot int
	at   int
}

type rematerializer struct {
	b        *Builder
	pos      map[*node]int
	users    map[*value][]rematUse
	isOutput map[*value]bool
	before   map[*node][]*node // copies to run just before a node, in order
	memo     map[[2]any]*value // (value, reader) → its copy for that reader
}

func rematerialize(b *Builder, order []*node, outputs []*value) []*node {
	r := &rematerializer{
		b:        b,
		pos:      make(map[*node]int, len(order)),
		users:    make(map[*value][]rematUse),
		isOutput: make(map[*value]bool),
		before:   make(map[*node][]*node),
		memo:     make(map[[2]any]*value),
	}
	for _, v := range outputs {
		r.isOutput[v] = true
	}
	for i, n := range order {
		r.pos[n] = i
		for slot, in := range n.inputs {
			r.users[in] = append(r.users[in], rematUse{n: n, slot: slot, at: i})
		}
	}
	for _, n := range order {
		r.privateBroadcasts(n)
	}
	for i := len(order) - 1; i >= 0; i-- {
		r.recomputeLateReads(order[i])
	}
	var out []*node
	var emit func(n *node)
	emit = func(n *node) {
		for _, c := range r.before[n] {
			emit(c)
		}
		out = append(out, n)
	}
	for _, n := range order {
		emit(n)
	}
	return r.dropDead(out)
}

// fusableRead reports whether reader u could take the value it reads into its fused chain.
func fusableRead(u rematUse, v *value) bool {
	return u.n.ew != nil && u.n.ew.size == v.shape.Size() && u.n.ew.inputs[u.slot].kind != bcastParam
}

// privateBroadcasts gives each fusable reader of broadcast n's value its own copy of n.
func (r *rematerializer) privateBroadcasts(n *node) {
	if n.ew == nil || n.ew.kind != ewBroadcast || n.ew.inputs[0].kind == bcastFull {
		return
	}
	v := n.outputs[0]
	if len(r.users[v]) < 2 {
		return
	}
	var keep []rematUse
	for _, u := range r.users[v] {
		if !fusableRead(u, v) {
			keep = append(keep, u)
			continue
		}
		r.redirect(u, r.copyFor(v, u.n, u.at, func(*value) bool { return true }))
	}
	r.users[v] = keep
}

// recomputeLateReads makes the late readers of n's value recompute it, when that is cheap, frees
// the value much earlier, and needs no large value kept longer than it is anyway.
func (r *rematerializer) recomputeLateReads(n *node) {
	if !recomputable(n) {
		return
	}
	v := n.outputs[0]
	if r.isOutput[v] {
		return
	}
	us := slices.Clone(r.users[v])
	if len(us) < 2 {
		return
	}
	slices.SortStableFunc(us, func(a, b rematUse) int { return a.at - b.at })
	// The late reads start after the largest gap between reads; every one of them must be able
	// to recompute the value in its chain, and the gap must be at least half the value's life.
	split, gap := 0, 0
	for k := 1; k < len(us); k++ {
		if d := us[k].at - us[k-1].at; d > gap {
			split, gap = k, d
		}
	}
	if split == 0 || 2*gap < us[len(us)-1].at-r.pos[n] {
		return
	}
	late := us[split:]
	for _, u := range late {
		// A reader that cannot take the value into its chain (a convolution's kernel gradient
		// reading a ReLU's output) gets it recomputed in a pass of its own, from values that
		// are kept anyway and are not themselves recomputed (no cascade of recomputations).
		if !r.canRecompute(v, u.at, 0, !fusableRead(u, v)) {
			return
		}
	}
	for _, u := range late {
		leavesOnly := !fusableRead(u, v)
		r.redirect(u, r.copyFor(v, u.n, u.at, func(in *value) bool {
			return r.lastUse(in) < u.at || (leavesOnly && recomputable(in.node))
		}))
	}
	r.users[v] = us[:split]
}

// recomputable reports whether n is a cheap element-wise operation with one output.
func recomputable(n *node) bool {
	return n.ew != nil && n.ew.kind != ewUnary && len(n.outputs) == 1 && n.paramIdx < 0 && n.constant == nil
}

// lastUse is the position of the last read of v (the end for the graph's outputs).
func (r *rematerializer) lastUse(v *value) int {
	if r.isOutput[v] {
		return math.MaxInt
	}
	last := -1
	for _, u := range r.users[v] {
		last = max(last, u.at)
	}
	return last
}

// canRecompute reports whether v can be recomputed at position at from values alive there
// (full-size inputs read later anyway, or themselves recomputable) and small ones; with
// leavesOnly, the values alive there must be results of operations that are not recomputable.
func (r *rematerializer) canRecompute(v *value, at, depth int, leavesOnly bool) bool {
	n := v.node
	if depth >= rematMaxDepth || !recomputable(n) {
		return false
	}
	for i, in := range n.inputs {
		if n.ew.inputs[i].kind != bcastFull {
			continue
		}
		if r.lastUse(in) >= at && !(leavesOnly && recomputable(in.node)) {
			continue
		}
		if !r.canRecompute(in, at, depth+1, leavesOnly) {
			return false
		}
	}
	return true
}

// copyFor returns a copy of v's node, run just before reader, whose inputs for which redo
// holds are themselves copies (recursively).
func (r *rematerializer) copyFor(v *value, reader *node, at int, redo func(*value) bool) *value {
	key := [2]any{v, reader}
	if c := r.memo[key]; c != nil {
		return c
	}
	n := v.node
	inputs := make([]*value, len(n.inputs))
	for i, in := range n.inputs {
		inputs[i] = in
		if n.ew.inputs[i].kind == bcastFull && redo(in) {
			inputs[i] = r.copyFor(in, reader, at, redo)
		}
	}
	c := &node{builder: n.builder, name: n.name, inputs: inputs, run: n.run, paramIdx: -1, ew: n.ew, broadcastAxes: n.broadcastAxes}
	c.outputs = []*value{{id: r.b.nValues, node: c, shape: v.shape}}
	r.b.nValues++
	for slot, in := range inputs {
		r.users[in] = append(r.users[in], rematUse{n: c, slot: slot, at: at})
	}
	r.before[reader] = append(r.before[reader], c)
	r.memo[key] = c.outputs[0]
	return c.outputs[0]
}

// redirect makes reader u read w instead of what it read.
func (r *rematerializer) redirect(u rematUse, w *value) {
	u.n.inputs[u.slot] = w
	r.users[w] = append(r.users[w], rematUse{n: u.n, slot: u.slot, at: u.at})
}

// dropDead removes the nodes none of whose outputs is read or returned any more (parameters
// stay: the executable's inputs are positional).
func (r *rematerializer) dropDead(order []*node) []*node {
	reads := make(map[*value]int)
	for _, n := range order {
		for _, in := range n.inputs {
			reads[in]++
		}
	}
	dead := make(map[*node]bool)
	for i := len(order) - 1; i >= 0; i-- {
		n := order[i]
		if n.paramIdx >= 0 {
			continue
		}
		live := false
		for _, v := range n.outputs {
			if reads[v] > 0 || r.isOutput[v] {
				live = true
			}
		}
		if !live {
			dead[n] = true
			for _, in := range n.inputs {
				reads[in]--
			}
		}
	}
	return slices.DeleteFunc(order, func(n *node) bool { return dead[n] })
}

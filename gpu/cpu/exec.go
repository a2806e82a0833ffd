package cpu

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/shapes"
)

// Executable implements compute.Executable: the nodes needed for the outputs, in the order
// they were built (an order in which every input comes first).
type Executable struct {
	backend *Backend
	name    string
	params  []*node
	order   []*node
	outputs []*value
	uses    []int // per value id: inputs of nodes in order, plus appearances among the outputs
	nValues int
	peak    int64 // planned peak of the values held at once (livePeak), in bytes
}

// Compile implements compute.Builder: it compiles the outputs given to Return.
func (b *Builder) Compile() (compute.Executable, error) {
	if b.compiled {
		return nil, fmt.Errorf("Compile: builder %q is already compiled", b.name)
	}
	if !b.returned {
		return nil, fmt.Errorf("Compile: builder %q: Return was not called", b.name)
	}
	outs := b.outputs
	b.compiled = true
	e := &Executable{backend: b.backend, name: b.name, params: b.params, outputs: outs}
	needed := make(map[*node]bool)
	var mark func(n *node)
	mark = func(n *node) {
		if needed[n] {
			return
		}
		needed[n] = true
		for _, in := range n.inputs {
			mark(in.node)
		}
	}
	for _, v := range outs {
		mark(v.node)
	}
	var order []*node
	for _, n := range b.nodes {
		if needed[n] || n.paramIdx >= 0 {
			order = append(order, n)
		}
	}
	if !b.backend.noRemat {
		order = rematerialize(b, order, outs)
	}
	if !b.backend.noFusion {
		order = fuseElementwise(b, order, outs)
	}
	e.nValues = b.nValues
	e.uses = make([]int, b.nValues)
	for _, v := range outs {
		e.uses[v.id]++
	}
	for _, n := range order {
		e.order = append(e.order, n)
		if n.paramIdx < 0 || needed[n] {
			for _, in := range n.inputs {
				e.uses[in.id]++
			}
		}
	}
	e.peak, _, _ = e.livePeak()
	b.backend.releaseToGo(b.backend.bufs.setLimit(e, e.peak))
	if b.backend.onCompile != nil {
		b.backend.onCompile(e)
	}
	return e, nil
}

// Inputs implements compute.Executable.
func (e *Executable) Inputs() (names []string, inputShapes []shapes.Shape) {
	for _, p := range e.params {
		names = append(names, p.paramName)
		inputShapes = append(inputShapes, p.outputs[0].shape)
	}
	return names, inputShapes
}

// Outputs implements compute.Executable.
func (e *Executable) Outputs() []shapes.Shape {
	out := make([]shapes.Shape, len(e.outputs))
	for i, v := range e.outputs {
		out[i] = v.shape
	}
	return out
}

// Finalize implements compute.Executable: it frees the constants and the pure-Go backend's
// executables.
func (e *Executable) Finalize() {
	for _, n := range e.order {
		if n.constant != nil {
			e.backend.release(n.constant)
			n.constant = nil
		}
		if d, ok := n.run.(delegated); ok {
			d.exe.Finalize()
		}
	}
	e.order = nil
	e.backend.releaseToGo(e.backend.bufs.setLimit(e, 0))
}

// Execute implements compute.Executable. Donated inputs are consumed (their memory may be
// reused) and must not be used afterwards.
func (e *Executable) Execute(inputs []compute.Buffer, donate []bool, _ compute.DeviceNum) (outputs []compute.Buffer, err error) {
	be := e.backend
	if e.order == nil && len(e.outputs) > 0 {
		return nil, fmt.Errorf("executing %q: the executable was finalized", e.name)
	}
	if len(inputs) != len(e.params) {
		return nil, fmt.Errorf("executing %q: %d inputs, want %d", e.name, len(inputs), len(e.params))
	}
	if len(donate) == 0 {
		donate = make([]bool, len(inputs))
	}
	for i, in := range inputs {
		buf, err := be.own(in)
		if err != nil {
			return nil, fmt.Errorf("executing %q: input #%d (%s): %w", e.name, i, e.params[i].paramName, err)
		}
		if want := e.params[i].outputs[0].shape; !buf.shape.Equal(want) {
			return nil, fmt.Errorf("executing %q: input #%d (%s) has shape %s, want %s", e.name, i, e.params[i].paramName, buf.shape, want)
		}
	}
	results := make([]compute.Buffer, e.nValues)
	owned := make([]bool, e.nValues)
	remaining := slices.Clone(e.uses)
	// Results of the pure-Go backend's operations go back to its pools, where its next ones
	// look: kept in this backend's pool they would be found only by operations implemented here.
	fromGo := make([]bool, e.nValues)
	free := func(id int, buf compute.Buffer) {
		if fromGo[id] {
			be.releaseToGo([]compute.Buffer{buf})
			return
		}
		be.release(buf)
	}
	defer func() {
		be.releaseToGo(be.bufs.advance(e.peak))
		if err == nil {
			return
		}
		for id, buf := range results {
			if buf != nil && owned[id] {
				free(id, buf)
			}
		}
	}()
	var inBufs []compute.Buffer
	var inDonate []bool
	for _, n := range e.order {
		switch {
		case n.paramIdx >= 0:
			v := n.outputs[0]
			results[v.id], owned[v.id] = inputs[n.paramIdx], donate[n.paramIdx]
			if remaining[v.id] == 0 && owned[v.id] {
				free(v.id, results[v.id])
				results[v.id] = nil
			}
			continue
		case n.constant != nil:
			v := n.outputs[0]
			results[v.id], owned[v.id] = n.constant, false
			continue
		}
		inBufs, inDonate = inBufs[:0], inDonate[:0]
		for _, in := range n.inputs {
			inBufs = append(inBufs, results[in.id])
			// A value is consumed only by its last use, and only when it appears once among this
			// node's inputs (consuming one slot must not invalidate another).
			inDonate = append(inDonate, owned[in.id] && remaining[in.id] == 1 && countValue(n.inputs, in) == 1)
		}
		var start time.Time
		if be.stats != nil {
			start = time.Now()
		}
		outs, err := n.run.execute(be, inBufs, inDonate)
		if be.stats != nil {
			be.stats.add(n, time.Since(start))
		}
		if err != nil {
			return nil, fmt.Errorf("executing %q, operation %s: %w", e.name, n.name, err)
		}
		if len(outs) != len(n.outputs) {
			return nil, fmt.Errorf("executing %q, operation %s: %d outputs, want %d", e.name, n.name, len(outs), len(n.outputs))
		}
		_, fromGoBackend := n.run.(delegated)
		for slot, in := range n.inputs {
			remaining[in.id]--
			switch {
			case inDonate[slot]:
				// A consumed input the operation did not write its result into is released here
				// (the pure-Go backend releases those it is given itself).
				if !fromGoBackend && !slices.Contains(outs, inBufs[slot]) {
					free(in.id, inBufs[slot])
				}
				results[in.id], owned[in.id] = nil, false
			case remaining[in.id] == 0 && owned[in.id] && results[in.id] != nil:
				free(in.id, results[in.id])
				results[in.id] = nil
			}
		}
		for i, v := range n.outputs {
			fromGo[v.id] = fromGoBackend
			if e.uses[v.id] == 0 {
				free(v.id, outs[i])
				continue
			}
			results[v.id], owned[v.id] = outs[i], true
		}
	}
	outputs = make([]compute.Buffer, len(e.outputs))
	for i, v := range e.outputs {
		buf := results[v.id]
		if buf == nil {
			return nil, fmt.Errorf("executing %q: output #%d was not computed", e.name, i)
		}
		if owned[v.id] {
			outputs[i] = buf
			owned[v.id] = false // the caller owns it now; a second appearance gets a copy
			continue
		}
		if outputs[i], err = be.clone(buf); err != nil {
			return nil, fmt.Errorf("executing %q: copying output #%d: %w", e.name, i, err)
		}
	}
	for id, buf := range results {
		if buf != nil && owned[id] {
			free(id, buf)
		}
	}
	return outputs, nil
}

func countValue(vs []*value, v *value) int {
	n := 0
	for _, x := range vs {
		if x == v {
			n++
		}
	}
	return n
}

// statName is the node's name for OpStats: the operation, and "/go" when the pure-Go backend
// runs it.
func (n *node) statName() string {
	name := n.name
	if _, ok := n.run.(delegated); ok {
		name += "/go"
	}
	return name
}

// inputShapes lists the node's inputs' shapes, for OpStats by shape.
func (n *node) inputShapes() string {
	var b strings.Builder
	for i, in := range n.inputs {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(in.shape.String())
	}
	return b.String()
}

package cpu

// livePeak walks the execution order as Execute runs it and returns the largest total size, in
// bytes, of the values held at once (the inputs included, a node's inputs and outputs both
// counted while it runs, no output written into a consumed input), where that happens (an index
// into the order), and the values held then.
func (e *Executable) livePeak() (peak int64, at int, held []*value) {
	remaining := make([]int, len(e.uses))
	copy(remaining, e.uses)
	alive := make(map[*value]bool)
	var cur int64
	hold := func(v *value) {
		alive[v] = true
		cur += int64(v.shape.ByteSize())
	}
	drop := func(v *value) {
		if alive[v] {
			delete(alive, v)
			cur -= int64(v.shape.ByteSize())
		}
	}
	isOutput := make(map[*value]bool, len(e.outputs))
	for _, v := range e.outputs {
		isOutput[v] = true
	}
	for _, p := range e.params {
		hold(p.outputs[0])
	}
	for i, n := range e.order {
		if n.paramIdx >= 0 {
			continue
		}
		for _, v := range n.outputs {
			hold(v)
		}
		if cur > peak {
			peak, at = cur, i
			held = held[:0]
			for v := range alive {
				held = append(held, v)
			}
		}
		for _, in := range n.inputs {
			remaining[in.id]--
			if remaining[in.id] == 0 && !isOutput[in] && in.node.paramIdx < 0 {
				drop(in)
			}
		}
		for _, v := range n.outputs {
			if e.uses[v.id] == 0 {
				drop(v)
			}
		}
	}
	return peak, at, held
}

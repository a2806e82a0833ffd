package cpu

//go:generate go run ./internal/gendelegate -native=ConvGeneral,DotGeneral,Dot,Reverse,Pad,SelectAndScatterMax,SelectAndScatterMin,BatchNormForInference,BatchNormForTraining,BatchNormGradient,Add,Sub,Mul,Div,Max,Min,Neg,Abs,Sign,Sqrt,Rsqrt,Exp,Log,Transpose,BroadcastInDim,ReduceSum,ReduceMax,ReduceMin,ReduceWindow -out=gen_delegate.go

import (
	"fmt"
	"reflect"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	"github.com/gomlx/gomlx/pkg/core/shapes"
)

// Builder implements backends.Builder: it records a graph of nodes, each either a kernel of
// this package or a one-operation SimpleGo executable, compiled when the operation is added.
type Builder struct {
	backend  *Backend
	name     string
	nodes    []*node
	params   []*node
	nValues  int
	compiled bool
}

var _ backends.Builder = (*Builder)(nil)

// value is one output of a node: the backends.Op handed to GoMLX.
type value struct {
	id    int
	node  *node
	shape shapes.Shape
}

// node is one operation of the graph.
type node struct {
	builder *Builder
	name    string
	inputs  []*value
	outputs []*value
	run     executor // nil for parameters and constants

	paramIdx  int // index among the parameters, or -1
	paramName string
	constant  backends.Buffer // the value of a constant node

	ew *ewOp // set for float32 element-wise operations that can be fused
	// broadcastAxes is set for native BroadcastInDim nodes: where each source axis goes.
	broadcastAxes []int
}

// executor runs one node: it receives the input buffers and, per input, whether the node may
// consume it (reuse its memory or release it); it returns the output buffers, newly made or
// consumed inputs.
type executor interface {
	execute(be *Backend, inputs []backends.Buffer, donate []bool) ([]backends.Buffer, error)
}

// execFunc adapts a function to executor.
type execFunc func(be *Backend, inputs []backends.Buffer, donate []bool) ([]backends.Buffer, error)

func (f execFunc) execute(be *Backend, inputs []backends.Buffer, donate []bool) ([]backends.Buffer, error) {
	return f(be, inputs, donate)
}

// Name implements backends.Builder.
func (b *Builder) Name() string { return b.name }

// addNode appends a node with the given inputs and output shapes and returns its outputs.
func (b *Builder) addNode(name string, run executor, inputs []*value, outShapes ...shapes.Shape) *node {
	n := &node{builder: b, name: name, inputs: inputs, run: run, paramIdx: -1}
	for _, s := range outShapes {
		n.outputs = append(n.outputs, &value{id: b.nValues, node: n, shape: s})
		b.nValues++
	}
	b.nodes = append(b.nodes, n)
	return n
}

// checkOps converts GoMLX ops into this builder's values.
func (b *Builder) checkOps(opName string, ops ...backends.Op) ([]*value, error) {
	if b.compiled {
		return nil, fmt.Errorf("%s: builder %q is already compiled", opName, b.name)
	}
	vs := make([]*value, len(ops))
	for i, op := range ops {
		v, ok := op.(*value)
		if !ok || v == nil {
			return nil, fmt.Errorf("%s: input #%d is %T, not an op of backend %s", opName, i, op, BackendName)
		}
		if v.node == nil || v.node.builder != b {
			return nil, fmt.Errorf("%s: input #%d was built by another builder than %q", opName, i, b.name)
		}
		vs[i] = v
	}
	return vs, nil
}

// OpShape implements backends.Builder.
func (b *Builder) OpShape(op backends.Op) (shapes.Shape, error) {
	v, ok := op.(*value)
	if !ok || v == nil {
		return shapes.Invalid(), fmt.Errorf("OpShape: %T is not an op of backend %s", op, BackendName)
	}
	return v.shape, nil
}

// Parameter implements backends.Builder.
func (b *Builder) Parameter(name string, shape shapes.Shape, sharding *backends.ShardingSpec) (backends.Op, error) {
	if b.compiled {
		return nil, fmt.Errorf("Parameter %q: builder %q is already compiled", name, b.name)
	}
	if sharding != nil {
		return nil, fmt.Errorf("Parameter %q: backend %s has one device and no sharding", name, BackendName)
	}
	if !shape.Ok() {
		return nil, fmt.Errorf("Parameter %q: invalid shape %s", name, shape)
	}
	n := b.addNode("Parameter", nil, nil, shape)
	n.paramIdx = len(b.params)
	n.paramName = name
	b.params = append(b.params, n)
	return n.outputs[0], nil
}

// Constant implements backends.Builder: the value is copied into a buffer held by the graph.
func (b *Builder) Constant(flat any, dims ...int) (backends.Op, error) {
	if b.compiled {
		return nil, fmt.Errorf("Constant: builder %q is already compiled", b.name)
	}
	ft := reflect.TypeOf(flat)
	if ft == nil || ft.Kind() != reflect.Slice {
		return nil, fmt.Errorf("Constant: flat is %T, not a slice", flat)
	}
	dtype := dtypes.FromGoType(ft.Elem())
	if dtype == dtypes.InvalidDType {
		return nil, fmt.Errorf("Constant: %T is not a slice of a GoMLX dtype", flat)
	}
	shape := shapes.Make(dtype, dims...)
	if n := reflect.ValueOf(flat).Len(); n != shape.Size() {
		return nil, fmt.Errorf("Constant: %d values for shape %s (%d values)", n, shape, shape.Size())
	}
	buf, err := b.backend.sg.BufferFromFlatData(0, flat, shape)
	if err != nil {
		return nil, fmt.Errorf("Constant %s: %w", shape, err)
	}
	n := b.addNode("Constant", nil, nil, shape)
	n.constant = buf
	return n.outputs[0], nil
}

// DistributedSPMD implements backends.Builder: only one device.
func (b *Builder) DistributedSPMD(numDevices int) error {
	if numDevices == 1 {
		return nil
	}
	return fmt.Errorf("backend %s has one device, cannot run on %d", BackendName, numDevices)
}

// DistributedAutoSharding implements backends.Builder: not supported.
func (b *Builder) DistributedAutoSharding(meshes ...backends.Mesh) error {
	return fmt.Errorf("backend %s has one device and no auto-sharding", BackendName)
}

// DeviceAssignment implements backends.Builder: device 0 only.
func (b *Builder) DeviceAssignment(devices ...backends.DeviceNum) error {
	if len(devices) == 1 && devices[0] == 0 {
		return nil
	}
	return fmt.Errorf("backend %s has only device 0, cannot assign %v", BackendName, devices)
}

// delegate adds a node that runs SimpleGo's implementation of one operation: call builds it on
// a fresh SimpleGo builder whose parameters stand for the inputs, and the result is compiled
// at once, so shape errors surface while the graph is built, as with SimpleGo itself.
func (b *Builder) delegate(opName string, ops []backends.Op, call func(sb backends.Builder, in []backends.Op) ([]backends.Op, error)) ([]backends.Op, error) {
	inputs, err := b.checkOps(opName, ops...)
	if err != nil {
		return nil, err
	}
	sb := b.backend.sg.Builder(b.name + "/" + opName)
	params := make([]backends.Op, len(inputs))
	for i, v := range inputs {
		if params[i], err = sb.Parameter(fmt.Sprintf("x%d", i), v.shape, nil); err != nil {
			return nil, fmt.Errorf("%s: %w", opName, err)
		}
	}
	outs, err := call(sb, params)
	if err != nil {
		return nil, err
	}
	// An operation that changes nothing (a reshape to the same shape, say) returns its input.
	if len(outs) == 1 {
		for i, p := range params {
			if outs[0] == p {
				return []backends.Op{inputs[i]}, nil
			}
		}
	}
	outShapes := make([]shapes.Shape, len(outs))
	for i, o := range outs {
		if outShapes[i], err = sb.OpShape(o); err != nil {
			return nil, fmt.Errorf("%s: %w", opName, err)
		}
	}
	exe, err := sb.Compile(outs, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: compiling with SimpleGo: %w", opName, err)
	}
	n := b.addNode(opName, delegated{exe}, inputs, outShapes...)
	res := make([]backends.Op, len(n.outputs))
	for i, v := range n.outputs {
		res[i] = v
	}
	return res, nil
}

// delegated runs a one-operation SimpleGo executable.
type delegated struct{ exe backends.Executable }

func (d delegated) execute(_ *Backend, inputs []backends.Buffer, donate []bool) ([]backends.Buffer, error) {
	return d.exe.Execute(inputs, donate, 0)
}

// concatOps joins lists of ops (used by the generated delegating methods).
func concatOps(lists ...[]backends.Op) []backends.Op {
	var all []backends.Op
	for _, l := range lists {
		all = append(all, l...)
	}
	return all
}

func ops1(a backends.Op, err error) ([]backends.Op, error) {
	if err != nil {
		return nil, err
	}
	return []backends.Op{a}, nil
}

func ops2(a, b backends.Op, err error) ([]backends.Op, error) {
	if err != nil {
		return nil, err
	}
	return []backends.Op{a, b}, nil
}

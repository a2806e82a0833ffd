package cpu

//go:generate go run ./internal/gendelegate -native=ConvGeneral,DotGeneral,Reverse,Pad,SelectAndScatterMax,SelectAndScatterMin,BatchNormForInference,BatchNormForTraining,BatchNormGradient,Add,Sub,Mul,Div,Max,Min,Neg,Abs,Sign,Sqrt,Rsqrt,Exp,Log,Transpose,BroadcastInDim,ReduceSum,ReduceMax,ReduceMin,ReduceWindow -out=gen_delegate.go

import (
	"fmt"
	"reflect"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/notimplemented"
	"github.com/gomlx/compute/shapes"
)

// Builder implements compute.Builder and is its own main compute.Function: it records a graph
// of nodes, each either a kernel of this package or a one-operation executable of GoMLX's
// pure-Go backend, compiled when the operation is added. The backend builds main functions
// only (Capabilities().Functions is false, so GoMLX asks for no closures); the collective,
// dynamic-shape and fused operations come from notimplemented.Function, and GoMLX replaces a
// fused operation a backend lacks by the standard operations it is made of.
type Builder struct {
	notimplemented.Function

	backend  *Backend
	name     string
	nodes    []*node
	params   []*node
	outputs  []*value // set by Return
	returned bool
	nValues  int
	compiled bool
}

var (
	_ compute.Builder  = (*Builder)(nil)
	_ compute.Function = (*Builder)(nil)
)

// errNotImplemented is the error of the operations the backend does not have.
func errNotImplemented(op compute.OpType) error {
	return fmt.Errorf("backend %s: operation %s: %w", BackendName, op, compute.ErrNotImplemented)
}

// value is one output of a node: the compute.Value handed to GoMLX.
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
	constant  compute.Buffer // the value of a constant node

	ew *ewOp // set for float32 element-wise operations that can be fused
	// broadcastAxes is set for native BroadcastInDim nodes: where each source axis goes.
	broadcastAxes []int
}

// executor runs one node: it receives the input buffers and, per input, whether the node may
// consume it (reuse its memory or release it); it returns the output buffers, newly made or
// consumed inputs.
type executor interface {
	execute(be *Backend, inputs []compute.Buffer, donate []bool) ([]compute.Buffer, error)
}

// execFunc adapts a function to executor.
type execFunc func(be *Backend, inputs []compute.Buffer, donate []bool) ([]compute.Buffer, error)

func (f execFunc) execute(be *Backend, inputs []compute.Buffer, donate []bool) ([]compute.Buffer, error) {
	return f(be, inputs, donate)
}

// Name implements compute.Builder and compute.Function.
func (b *Builder) Name() string { return b.name }

// Main implements compute.Builder: the builder is its own main function.
func (b *Builder) Main() compute.Function { return b }

// NewFunction implements compute.Builder: the backend has main functions only.
func (b *Builder) NewFunction(name string) (compute.Function, error) {
	return nil, fmt.Errorf("NewFunction %q: %w", name, errNotImplemented(compute.OpTypeInvalid))
}

// Builder implements compute.Function.
func (b *Builder) Builder() compute.Builder { return b }

// Parent implements compute.Function: a main function has none.
func (b *Builder) Parent() compute.Function { return nil }

// Closure implements compute.Function: the backend has main functions only.
func (b *Builder) Closure() (compute.Function, error) {
	return nil, fmt.Errorf("Closure: %w", errNotImplemented(compute.OpTypeInvalid))
}

// Shape implements compute.Function.
func (b *Builder) Shape(v compute.Value) (shapes.Shape, error) { return b.OpShape(v) }

// Return implements compute.Function: the outputs of the computation Compile compiles.
func (b *Builder) Return(outputs []compute.Value, shardings []*compute.ShardingSpec) error {
	if len(shardings) != 0 {
		return fmt.Errorf("Return: backend %s has one device and no sharding", BackendName)
	}
	if b.returned {
		return fmt.Errorf("Return: builder %q has returned already", b.name)
	}
	outs, err := b.checkOps("Return", outputs...)
	if err != nil {
		return err
	}
	b.outputs, b.returned = outs, true
	return nil
}

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
func (b *Builder) checkOps(opName string, ops ...compute.Value) ([]*value, error) {
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

// OpShape implements compute.Builder.
func (b *Builder) OpShape(op compute.Value) (shapes.Shape, error) {
	v, ok := op.(*value)
	if !ok || v == nil {
		return shapes.Invalid(), fmt.Errorf("OpShape: %T is not an op of backend %s", op, BackendName)
	}
	return v.shape, nil
}

// Parameter implements compute.Function.
func (b *Builder) Parameter(name string, shape shapes.Shape, sharding *compute.ShardingSpec) (compute.Value, error) {
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

// Constant implements compute.Function: the value is copied into a buffer held by the graph.
func (b *Builder) Constant(flat any, dims ...int) (compute.Value, error) {
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
	buf, err := b.backend.BufferFromFlatData(0, flat, shape)
	if err != nil {
		return nil, fmt.Errorf("Constant %s: %w", shape, err)
	}
	n := b.addNode("Constant", nil, nil, shape)
	n.constant = buf
	return n.outputs[0], nil
}

// DistributedSPMD implements compute.Builder: only one device.
func (b *Builder) DistributedSPMD(numDevices int) error {
	if numDevices == 1 {
		return nil
	}
	return fmt.Errorf("backend %s has one device, cannot run on %d", BackendName, numDevices)
}

// DistributedAutoSharding implements compute.Builder: not supported.
func (b *Builder) DistributedAutoSharding(meshes ...compute.Mesh) error {
	return fmt.Errorf("backend %s has one device and no auto-sharding", BackendName)
}

// DeviceAssignment implements compute.Builder: device 0 only.
func (b *Builder) DeviceAssignment(devices ...compute.DeviceNum) error {
	if len(devices) == 1 && devices[0] == 0 {
		return nil
	}
	return fmt.Errorf("backend %s has only device 0, cannot assign %v", BackendName, devices)
}

// delegate adds a node that runs the pure-Go backend's implementation of one operation: call
// builds it in a fresh main function of that backend whose parameters stand for the inputs,
// and the result is compiled at once, so shape errors surface while the graph is built, as
// with that backend itself.
func (b *Builder) delegate(opName string, ops []compute.Value, call func(sf compute.Function, in []compute.Value) ([]compute.Value, error)) ([]compute.Value, error) {
	inputs, err := b.checkOps(opName, ops...)
	if err != nil {
		return nil, err
	}
	sb := b.backend.goBackend.Builder(b.name + "/" + opName)
	sf := sb.Main()
	params := make([]compute.Value, len(inputs))
	for i, v := range inputs {
		if params[i], err = sf.Parameter(fmt.Sprintf("x%d", i), v.shape, nil); err != nil {
			return nil, fmt.Errorf("%s: %w", opName, err)
		}
	}
	outs, err := call(sf, params)
	if err != nil {
		return nil, err
	}
	// An operation that changes nothing (a reshape to the same shape, say) returns its input.
	if len(outs) == 1 {
		for i, p := range params {
			if outs[0] == p {
				return []compute.Value{inputs[i]}, nil
			}
		}
	}
	outShapes := make([]shapes.Shape, len(outs))
	for i, o := range outs {
		if outShapes[i], err = sf.Shape(o); err != nil {
			return nil, fmt.Errorf("%s: %w", opName, err)
		}
	}
	if err := sf.Return(outs, nil); err != nil {
		return nil, fmt.Errorf("%s: %w", opName, err)
	}
	exe, err := sb.Compile()
	if err != nil {
		return nil, fmt.Errorf("%s: compiling with the pure-Go backend: %w", opName, err)
	}
	n := b.addNode(opName, delegated{exe}, inputs, outShapes...)
	res := make([]compute.Value, len(n.outputs))
	for i, v := range n.outputs {
		res[i] = v
	}
	return res, nil
}

// delegated runs a one-operation executable of the pure-Go backend on the buffers inside this
// backend's: the inputs it is given to consume are its to release or reuse.
type delegated struct{ exe compute.Executable }

func (d delegated) execute(be *Backend, inputs []compute.Buffer, donate []bool) ([]compute.Buffer, error) {
	inner := make([]compute.Buffer, len(inputs))
	for i, in := range inputs {
		buf, err := be.own(in)
		if err != nil {
			return nil, fmt.Errorf("input #%d: %w", i, err)
		}
		inner[i] = buf.inner
	}
	outs, err := d.exe.Execute(inner, donate, 0)
	if err != nil {
		return nil, err
	}
	for i, o := range outs {
		if outs[i], err = be.wrap(o); err != nil {
			return nil, err
		}
	}
	return outs, nil
}

// concatOps joins lists of ops (used by the generated delegating methods).
func concatOps(lists ...[]compute.Value) []compute.Value {
	var all []compute.Value
	for _, l := range lists {
		all = append(all, l...)
	}
	return all
}

func ops1(a compute.Value, err error) ([]compute.Value, error) {
	if err != nil {
		return nil, err
	}
	return []compute.Value{a}, nil
}

func ops2(a, b compute.Value, err error) ([]compute.Value, error) {
	if err != nil {
		return nil, err
	}
	return []compute.Value{a, b}, nil
}

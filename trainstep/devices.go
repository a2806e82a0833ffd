package trainstep

// Data-parallel training on several devices of one backend (dcl train --devices).
//
// A step on N devices is the one-device step's program, compiled by XLA for N devices with
// GoMLX's AutoSharding over a one-axis device mesh: the two views' batch axis is sharded over
// the mesh (each device receives its own pairs, B/N of them), the variables are replicated,
// and XLA's partitioner (Shardy) inserts the collectives the program needs. Nothing in the
// program is written per device, so every global quantity is global by construction: batch
// norm takes the statistics of the whole batch (the SyncBN of multi-GPU recipes), the loss
// sees every view of the global batch as a negative with its gradient flowing back to the
// device that computed it, the gradients are summed over the global batch, the optimiser and
// weight decay update the replicated weights once, MoCo's key encoder, queue and NNCLR's
// support set stay replicated, and the mean q is over the global batch. What differs from one
// device is the order of the sums over the batch (partial sums per device, then across
// devices), hence float32 rounding: devices_test.go bounds it.
//
// The batch's layout inside the program keeps each device's data local: the 2B views that
// SimCLR and NNCLR encode as one batch are laid out device by device (device d's view-1 rows,
// then its view-2 rows), not view by view, and the projections are put back in view order
// only for the loss. That layout is also what BNDevice's per-device statistics are taken over.
//
// Device counts are free in checkpoints: the variables are replicated, and a checkpoint holds
// one copy; a run resumes on any number of devices.

import (
	"fmt"
	"strings"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/distributed"
	. "github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/gomlx/gomlx/ml/model"

	"github.com/dcl-beam/dcl-beam/internal/usage"
)

// BNScope says what training-mode batch norm takes its statistics over on several devices.
type BNScope string

const (
	// BNGlobal takes them over the whole global batch, as on one device (the default; the
	// SyncBN that multi-GPU SimCLR and MoCo recipes use).
	BNGlobal BNScope = "global"
	// BNDevice takes them over each device's share of the batch, as PyTorch's DDP does without
	// SyncBN: a run's results then depend on its number of devices.
	BNDevice BNScope = "device"
)

// BNScopes lists the scopes, the default first.
func BNScopes() []BNScope { return []BNScope{BNGlobal, BNDevice} }

// ParseBNScope accepts "global" (or "") and "device", in any case.
func ParseBNScope(s string) (BNScope, error) {
	scope := BNScope(strings.ToLower(strings.TrimSpace(s)))
	if scope == "" {
		return BNGlobal, nil
	}
	return scope, scope.Validate()
}

// Validate reports a scope this package does not implement.
func (b BNScope) Validate() error {
	switch b {
	case "", BNGlobal, BNDevice:
		return nil
	}
	return fmt.Errorf("batch-norm scope %q: want global or device", string(b))
}

// AllDevices asks for every device the backend has (dcl train --devices=all).
const AllDevices = -1

// ParseDevices reads a device count: a positive number, or "all" (AllDevices).
func ParseDevices(s string) (int, error) {
	s = strings.TrimSpace(s)
	if strings.EqualFold(s, "all") {
		return AllDevices, nil
	}
	var n int
	if _, err := fmt.Sscanf(s, "%d", &n); err != nil || fmt.Sprint(n) != s || n < 1 {
		return 0, fmt.Errorf("devices %q: want a positive number or all", s)
	}
	return n, nil
}

// FormatDevices writes a device count as ParseDevices reads it.
func FormatDevices(n int) string {
	if n == AllDevices {
		return "all"
	}
	return fmt.Sprint(n)
}

// orGlobal is the scope, "" read as BNGlobal (a checkpoint written before the scope existed).
func (b BNScope) orGlobal() BNScope {
	if b == "" {
		return BNGlobal
	}
	return b
}

// ResolveDevices turns a device count (AllDevices, or 0 for one) into the number of the
// backend's devices a step runs on, checking that the backend has them and that a global
// batch of batchSize view pairs splits evenly over them.
func ResolveDevices(backend compute.Backend, devices, batchSize int) (int, error) {
	have := backend.NumDevices()
	switch {
	case devices == AllDevices:
		devices = have
	case devices == 0:
		devices = 1
	case devices < 0:
		return 0, fmt.Errorf("devices %d: want a positive number or all", devices)
	}
	if devices > have {
		return 0, fmt.Errorf("backend %s has %d device(s), not the %d asked for", backend.Name(), have, devices)
	}
	if batchSize%devices != 0 {
		return 0, batchSplitError(batchSize, devices)
	}
	return devices, nil
}

// batchSplitError is a global batch of n view pairs that does not split evenly over devices.
func batchSplitError(n, devices int) error {
	return usage.Value("batch-size", n, "%d view pairs do not split evenly over %d devices: each device trains on an equal share of the global batch; want a multiple of %d",
		n, devices, devices)
}

// meshAxis names the data mesh's one axis.
const meshAxis = "data"

// dataMesh is a step's devices: a one-axis mesh over the first of the backend's devices, the
// sharding of a batch over it, and replication. A nil *dataMesh is one device.
type dataMesh struct {
	mesh       *distributed.DeviceMesh
	batch      *distributed.ShardingSpec // the first axis split over the devices
	replicated *distributed.ShardingSpec
}

func newDataMesh(backend compute.Backend, devices int) (*dataMesh, error) {
	switch have := backend.NumDevices(); {
	case devices < 1:
		return nil, fmt.Errorf("a step needs at least one device, got %d", devices)
	case devices > have:
		return nil, fmt.Errorf("backend %s has %d device(s), not the %d asked for", backend.Name(), have, devices)
	case devices == 1:
		return nil, nil
	}
	mesh, err := distributed.NewDeviceMesh([]int{devices}, []string{meshAxis})
	if err != nil {
		return nil, err
	}
	batch, err := distributed.BuildSpec(mesh).S(meshAxis).Done()
	if err != nil {
		return nil, err
	}
	return &dataMesh{mesh: mesh, batch: batch, replicated: distributed.NewReplicatedShardingSpec(mesh)}, nil
}

func (m *dataMesh) size() int {
	if m == nil {
		return 1
	}
	return m.mesh.NumDevices()
}

// replicatedOutputs makes e, a program of two inputs, one over the mesh whose inputs are
// split over it and whose outputs (updated variables included) are replicated: a training
// step's.
func (m *dataMesh) replicatedOutputs(e *model.Exec) *model.Exec {
	if m == nil {
		return e
	}
	// GoMLX repeats the last output spec for every output, the variables' included.
	return e.AutoSharding(m.mesh).WithInputShardingSpecs(m.batch, m.batch).WithOutputShardingSpecs(m.replicated)
}

// shardedOutputs makes e, a program of one input, one over the mesh whose input and outputs
// are split over it along their first axis: feature extraction's.
func (m *dataMesh) shardedOutputs(e *model.Exec) *model.Exec {
	if m == nil {
		return e
	}
	return e.AutoSharding(m.mesh).WithInputShardingSpecs(m.batch).WithOutputShardingSpecs(m.batch)
}

// place makes the tensors of n images (uint8 HWC): one on one device, else one per device
// holding its equal share, so that each device receives only its own images.
func (m *dataMesh) place(images []uint8, n, h, w, c int) ([]*tensors.Tensor, error) {
	d := m.size()
	if n%d != 0 {
		return nil, batchSplitError(n, d)
	}
	per := n / d
	size := per * h * w * c
	out := make([]*tensors.Tensor, d)
	for i := range out {
		out[i] = tensors.FromFlatDataAndDimensions(images[i*size:(i+1)*size], per, h, w, c)
	}
	return out, nil
}

// args orders the per-device inputs of a call as GoMLX takes them: device by device.
func (m *dataMesh) args(inputs ...[]*tensors.Tensor) []any {
	var out []any
	for d := range m.size() {
		for _, in := range inputs {
			out = append(out, in[d])
		}
	}
	return out
}

// firstCopy returns the first device's outputs of a call whose outputs are replicated and
// releases the other devices' copies.
func (m *dataMesh) firstCopy(out []*tensors.Tensor) []*tensors.Tensor {
	k := len(out) / m.size()
	finalizeAll(out[k:])
	return out[:k:k]
}

// gather reads output i of a call with k outputs per device, split over the devices along its
// first axis, as one float32 slice in the order of the devices.
func (m *dataMesh) gather(out []*tensors.Tensor, k, i int) []float32 {
	var flat []float32
	for d := range m.size() {
		flat = append(flat, tensors.MustCopyFlatData[float32](out[d*k+i])...)
	}
	return flat
}

func roundUp(n, m int) int { return (n + m - 1) / m * m }

// EncodeViews runs the encoder (MethodGraph.Encode) on both views, [B, H, W, C] each, as one
// batch of 2B, and returns the projections in device order: on D devices, device d's B/D
// view-1 rows, then its view-2 rows, device after device (on one device, all of view 1, then
// all of view 2). Batch norm takes its statistics over the 2B views (BNGlobal) or over each
// device's rows (BNDevice). InViewOrder turns any [2B, …] value of this layout into [view 1;
// view 2].
func (g *MethodGraph) EncodeViews(view1, view2 *Node) *Node {
	return g.Encode(g.deviceOrder(view1, view2))
}

// deviceOrder stacks two [B, …] values as [2B, …] in device order (EncodeViews).
func (g *MethodGraph) deviceOrder(a, b *Node) *Node {
	d := g.Devices
	if d <= 1 {
		return Concatenate([]*Node{a, b}, 0)
	}
	dims := a.Shape().Dimensions
	split := func(x *Node) *Node { return Reshape(x, append([]int{d, dims[0] / d}, dims[1:]...)...) }
	both := Concatenate([]*Node{split(a), split(b)}, 1) // [D, 2B/D, …]
	return Reshape(both, append([]int{2 * dims[0]}, dims[1:]...)...)
}

// InViewOrder reorders a [2B, …] value in device order (EncodeViews) as [view 1; view 2].
func (g *MethodGraph) InViewOrder(x *Node) *Node {
	d := g.Devices
	if d <= 1 {
		return x
	}
	dims := x.Shape().Dimensions
	grouped := Reshape(x, append([]int{d, 2, dims[0] / (2 * d)}, dims[1:]...)...) // [D, 2, B/D, …]
	return Reshape(Transpose(grouped, 0, 1), dims...)
}

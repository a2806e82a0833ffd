//go:build cuda

package trainstep

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/gomlx/compute"
	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"

	"github.com/dcl-beam/dcl-beam/gpu"
	"github.com/dcl-beam/dcl-beam/internal/testing/xlacputest"
)

// How far a step on N devices may be from the same step on one.
//
// On N devices the program computes the same function of the same global batch: what differs
// is only the order of the sums over the batch. A sum over the batch (batch norm's mean and
// variance, the loss's mean over anchors and its log-sum-exp over negatives, every weight
// gradient, which sums over the batch's rows) is taken as N partial sums, one per device, then
// a sum across devices. Float32 addition is not associative: a sum of K terms s = Σ x_k
// computed in two orders differs by at most (K−1)·u·Σ|x_k| (u = 2⁻²⁴), and for rounding errors
// of random sign by about u·sqrt(K)·rms(x)·sqrt(K) — the same order as the error of either
// order against the exact sum. So the N-device step is as far from the one-device step as two
// one-device steps that sum the batch in different orders are from each other; no formula in
// K predicts the distance after several steps, because the training step amplifies any
// difference of weights by its own (model-dependent) Lipschitz constant, step after step.
//
// The measured reference is therefore the one-device step on the same pairs in another order
// (reversed, and rotated, within each batch-norm group): every loss, every batch-norm statistic and every
// gradient is a symmetric function of the batch's pairs, so the permuted run computes the
// same function as the reference with only its summation order changed — the very difference
// that N devices make. The test asks of N = 2 and 4 devices, for each step's loss and for the
// weights after the run (as a fraction of how far the run moved them), a distance at most
// deviceFactor times the larger of the permuted runs', or deviceFactor times a floor of a few units of
// rounding where the permuted run happens to round identically. A bug in the distributed step
// (negatives seen by their own device only, batch norm per device, a gradient summed on one
// device, an update applied twice) changes the function, and its distance is orders of
// magnitude beyond: TestXLACPUDevicesCheckBites shows it.

// deviceFactor is how many times the permuted runs' distance an N-device run may be: the
// distances of different summation orders vary by a small factor (measured: up to 5 for
// resnet18-cifar's weights against one permuted order).
const deviceFactor = 8

// roundingFloor is the smallest distance the check allows for: a loss's or an update's
// relative difference of a few float32 roundings (u = 2⁻²⁴).
const roundingFloor = 4.0 / (1 << 24)

// deviceRun is what a few training steps did: each step's loss and mean NPC multiplier q, and
// the float32 variables before and after.
type deviceRun struct {
	loss, meanQ   []float64
	before, after map[string][]float32
}

// deviceCase is a step configuration and image size whose N-device steps are checked.
type deviceCase struct {
	name string
	cfg  StepConfig
	size int
}

const (
	deviceBatch = 16 // view pairs per step: 4 or 8 per device
	deviceSteps = 3
)

func deviceCases() []deviceCase {
	with := func(model, method string, loss LossKind, size int) deviceCase {
		cfg := testStepConfig(model)
		cfg.Method, cfg.Loss.Kind = method, loss
		switch method {
		case MoCoMethod:
			cfg.MethodConfig = MethodConfig{SettingQueueSize: 64, SettingBNSplits: 2}
		case NNCLRMethod:
			cfg.MethodConfig = MethodConfig{SettingQueueSize: 64, SettingPredictorHidden: 16}
		}
		return deviceCase{name: fmt.Sprintf("%s/%s/%s", model, method, loss), cfg: cfg, size: size}
	}
	return []deviceCase{
		with(SmallCNN, SimCLRMethod, DCL, 8),
		with(SmallCNN, SimCLRMethod, InfoNCE, 8),
		with(SmallCNN, SimCLRMethod, DCLW, 8),
		with(SmallCNN, SimCLRMethod, Hypersphere, 8),
		with(SmallCNN, MoCoMethod, DCL, 8),
		with(SmallCNN, NNCLRMethod, DCL, 8),
		with(ResNet18CIFAR, SimCLRMethod, DCLW, 8),
		with(ResNet18CIFAR, MoCoMethod, DCL, 8),
		with(ResNet18CIFAR, NNCLRMethod, DCL, 8),
	}
}

// permutedBatch reorders b's pairs within each of groups equal blocks (MoCo's batch-norm
// groups; 1 for the others), reversed or rotated by half a block, which changes only the
// order of the batch's sums.
func permutedBatch(b *Batch, groups int, reversed bool) *Batch {
	out := &Batch{N: b.N, H: b.H, W: b.W, C: b.C, View1: make([]uint8, len(b.View1)), View2: make([]uint8, len(b.View2))}
	img, per := b.H*b.W*b.C, b.N/groups
	for i := range b.N {
		j := i/per*per + (i%per+per/2)%per
		if reversed {
			j = i/per*per + per - 1 - i%per
		}
		copy(out.View1[i*img:(i+1)*img], b.View1[j*img:(j+1)*img])
		copy(out.View2[i*img:(i+1)*img], b.View2[j*img:(j+1)*img])
	}
	return out
}

func floatVariables(s *Step) map[string][]float32 {
	out := map[string][]float32{}
	for v := range s.Store().IterVariables() {
		if val, err := v.Value(); err == nil && val.DType().String() == "Float32" {
			out[v.Path()] = tensors.MustCopyFlatData[float32](val)
		}
	}
	return out
}

// Orders of a batch's pairs trainOn may use.
const (
	asGiven = iota
	reversed
	rotated
)

// trainOn runs deviceSteps steps of c on devices devices of be, on the pairs in order.
func trainOn(t *testing.T, be compute.Backend, c deviceCase, devices, order int) deviceRun {
	t.Helper()
	s, err := NewStepOn(be, devices, c.cfg, c.size, c.size)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Finalize()
	groups := 1
	if c.cfg.Method == MoCoMethod {
		groups = bnGroups(deviceBatch, int(c.cfg.MethodConfig[SettingBNSplits]))
	}
	r := deviceRun{before: floatVariables(s)}
	for i := range deviceSteps {
		b := RandomBatch(uint64(i+1), deviceBatch, c.size, c.size, 1)
		if order != asGiven {
			b = permutedBatch(b, groups, order == reversed)
		}
		res, err := s.Run(b, 0.05)
		if err != nil {
			t.Fatal(err)
		}
		r.loss, r.meanQ = append(r.loss, res.Loss), append(r.meanQ, res.MeanQ)
	}
	r.after = floatVariables(s)
	return r
}

// inBatchOrder are the variables that hold rows in the order of the batches that wrote them
// (MoCo's queue of keys, NNCLR's support set): a permuted batch puts them elsewhere.
var inBatchOrder = map[string]bool{"/method/moco/queue": true, "/method/nnclr/support": true}

// distance is how far run a is from reference ref: the largest relative difference of a
// step's loss or mean q (both reductions over the global batch); the difference of the weights after the run over how far ref moved them (the
// norms over every float32 variable together, inBatchOrder's left out); and the relative
// difference of inBatchOrder's variables (0 where there are none).
func distance(a, ref deviceRun) (loss, weights, rows float64) {
	for i := range ref.loss {
		loss = max(loss, relDiff(a.loss[i], ref.loss[i]), relDiff(a.meanQ[i], ref.meanQ[i]))
	}
	var diff, moved, rowDiff, rowNorm float64
	for k, w := range ref.after {
		if inBatchOrder[k] {
			for i := range w {
				d := float64(a.after[k][i]) - float64(w[i])
				rowDiff, rowNorm = rowDiff+d*d, rowNorm+float64(w[i])*float64(w[i])
			}
			continue
		}
		for i := range w {
			d := float64(a.after[k][i]) - float64(w[i])
			m := float64(w[i]) - float64(ref.before[k][i])
			diff, moved = diff+d*d, moved+m*m
		}
	}
	if rowNorm > 0 {
		rows = math.Sqrt(rowDiff / rowNorm)
	}
	return loss, math.Sqrt(diff / moved), rows
}

// relDiff is |a − ref|/|ref|: 0 where both are NaN (a method without q), +Inf where one is.
func relDiff(a, ref float64) float64 {
	switch {
	case math.IsNaN(a) && math.IsNaN(ref):
		return 0
	case math.IsNaN(a) || math.IsNaN(ref):
		return math.Inf(1)
	}
	return math.Abs(a-ref) / math.Abs(ref)
}

// devicesBackend is xla-cpu with 4 virtual devices.
func devicesBackend(t *testing.T) compute.Backend {
	be := xlacputest.Backend(t, gpu.Options{Devices: 4})
	if n := be.NumDevices(); n != 4 {
		t.Fatalf("xla-cpu asked for 4 devices has %d", n)
	}
	return be
}

// devicesDiffer runs c on one device, on one device with the pairs in two other orders, then
// on each of devices, and says how each that is farther from one device than the bound
// differs. It also returns the largest relative difference of the first step's loss (which
// only the forward pass decides) and the loss's bound.
func devicesDiffer(t *testing.T, be compute.Backend, c deviceCase, devices ...int) (differ []string, firstLoss, lossTol float64) {
	t.Helper()
	ref := trainOn(t, be, c, 1, asGiven)
	var lossNoise, weightNoise float64
	for _, order := range []int{reversed, rotated} {
		loss, weights, _ := distance(trainOn(t, be, c, 1, order), ref)
		t.Logf("%s on one device, pairs in another order: loss and q %.2g, weights %.2g", c.name, loss, weights)
		lossNoise, weightNoise = max(lossNoise, loss), max(weightNoise, weights)
	}
	lossTol = deviceFactor * max(lossNoise, roundingFloor)
	weightTol := deviceFactor * max(weightNoise, roundingFloor)
	for _, d := range devices {
		run := trainOn(t, be, c, d, asGiven)
		firstLoss = max(firstLoss, relDiff(run.loss[0], ref.loss[0]))
		loss, weights, rows := distance(run, ref)
		t.Logf("%s on %d devices: loss and q %.2g (bound %.2g), weights %.2g, queue %.2g (bound %.2g)", c.name, d, loss, lossTol, weights, rows, weightTol)
		if loss > lossTol || weights > weightTol || rows > weightTol {
			differ = append(differ, fmt.Sprintf("%s on %d devices is not the one-device step: loss or mean q differs by %.3g (bound %.3g), weights by %.3g of their update and the queue by %.3g (bound %.3g); losses %v, one device %v",
				c.name, d, loss, lossTol, weights, rows, weightTol, run.loss, ref.loss))
		}
	}
	return differ, firstLoss, lossTol
}

// TestXLACPUDevicesTrainAsOne: on 2 and 4 of xla-cpu's virtual devices, every method and loss
// trains what it trains on one device, step by step, within the bound of a different
// summation order.
func TestXLACPUDevicesTrainAsOne(t *testing.T) {
	be := devicesBackend(t)
	for _, c := range deviceCases() {
		t.Run(c.name, func(t *testing.T) {
			differ, _, _ := devicesDiffer(t, be, c, 2, 4)
			for _, msg := range differ {
				t.Error(msg)
			}
		})
	}
}

// TestXLACPUDevicesCheckBites: the check of TestXLACPUDevicesTrainAsOne fails a step that is
// not the one-device step: batch norm's statistics taken per device (BNDevice, the DDP
// default without SyncBN), and negatives gathered without their gradient (gatherNoGradMethod,
// a DDP all-gather whose backward pass returns nothing).
func TestXLACPUDevicesCheckBites(t *testing.T) {
	be := devicesBackend(t)
	t.Run("bn-per-device", func(t *testing.T) {
		c := deviceCases()[0]
		c.cfg.BNScope = BNDevice
		if differ, _, _ := devicesDiffer(t, be, c, 2); len(differ) != 1 {
			t.Errorf("batch norm per device passes the N-device check")
		}
	})
	t.Run("negatives-without-gradient", func(t *testing.T) {
		RegisterMethod(MethodSpec{Name: gatherNoGradMethod, Display: "SimCLR, negatives gathered without gradient",
			New: func(StepConfig) (Method, error) { return gatherNoGrad{}, nil }})
		t.Cleanup(func() { UnregisterMethod(gatherNoGradMethod) })
		c := deviceCases()[0]
		c.cfg.Method = gatherNoGradMethod
		differ, first, lossTol := devicesDiffer(t, be, c, 2)
		if len(differ) != 1 {
			t.Errorf("negatives gathered without gradient pass the N-device check")
		}
		// Its loss is SimCLR's: the first step, before any update, is within the bound.
		if first > lossTol {
			t.Errorf("the first step's loss differs by %.3g (bound %.3g): the variant changes the loss, not only its gradient", first, lossTol)
		}
	})
}

// gatherNoGradMethod names SimCLR as a data-parallel trainer computes it when its all-gather
// of the projections has no backward pass: each device's anchors see every device's
// projections as negatives, but only its own carry a gradient, the others' are constants.
// The loss's value is SimCLR's; its gradient lacks every term of an anchor on one device
// through a negative on another. Registered only by TestXLACPUDevicesCheckBites.
const gatherNoGradMethod = "simclr-gather-no-grad"

type gatherNoGrad struct{ simCLR }

func (gatherNoGrad) Name() string { return gatherNoGradMethod }

// TrainGraph is simCLR's on the same encoded batch and through the same loss graph, once per
// device: device d's loss is the sum of its own anchors' losses, computed on the projections
// with every other device's rows behind StopGradient; the step's loss is their sum over the
// 2B anchors. On one device nothing is stopped, and it is SimCLR.
func (gatherNoGrad) TrainGraph(g *MethodGraph, view1, view2 *Node) TrainNodes {
	z := g.EncodeViews(view1, view2) // device order: device d holds rows [d·r, (d+1)·r)
	rows := z.Shape().Dim(0)
	perDevice := rows / g.Devices
	owner := DivScalar(Iota(g.Graph, shapes.Make(dtypes.Int32, rows), 0), perDevice) // each row's device
	anchorOwner := g.InViewOrder(owner)
	var loss, q *Node
	for d := range g.Devices {
		mine := Equal(owner, AddScalar(ZerosLike(owner), d))
		nodes := StackedLossGraph(g.InViewOrder(Where(mine, z, StopGradient(z))), g.Loss)
		own := ReduceAllSum(Where(Equal(anchorOwner, AddScalar(ZerosLike(anchorOwner), d)), nodes.PerAnchor, ZerosLike(nodes.PerAnchor)))
		if loss == nil {
			loss, q = own, nodes.Q
		} else {
			loss = Add(loss, own)
		}
	}
	if g.Loss.Reduction != Sum {
		loss = DivScalar(loss, float64(rows))
	}
	return TrainNodes{Loss: loss, Q: q}
}

// TestXLACPUCheckpointsFreeOfDevices: a checkpoint written on 4 devices restores on 1, and one
// written on 1 restores on 4, bit for bit: every variable (weights, batch-norm running
// averages, momentum buffers, MoCo's key encoder and queue) is what the other count saved, once
// the restored step has placed it on its own devices and read it back. A checkpoint restored on
// the count that wrote it continues bit for bit, as the one-device resume tests demand; on
// another count the next steps are that count's steps from the same state, which
// TestXLACPUDevicesTrainAsOne bounds (and cmd/dcl's TestXLACPUTrainDevices follows through dcl
// train --resume).
func TestXLACPUCheckpointsFreeOfDevices(t *testing.T) {
	be := devicesBackend(t)
	ctx := context.Background()
	c := deviceCases()[4] // small-cnn MoCo: every kind of state a step keeps
	if c.cfg.Method != MoCoMethod {
		t.Fatalf("case %s: want MoCo", c.name)
	}
	newStep := func(t *testing.T, devices int) *Step {
		s, err := NewStepOn(be, devices, c.cfg, c.size, c.size)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Finalize)
		return s
	}
	run := func(t *testing.T, s *Step, seed uint64) StepResult {
		res, err := s.Run(RandomBatch(seed, deviceBatch, c.size, c.size, 1), 0.05)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	for _, counts := range [][2]int{{4, 1}, {1, 4}} {
		from, to := counts[0], counts[1]
		t.Run(fmt.Sprintf("%d-to-%d", from, to), func(t *testing.T) {
			dir := t.TempDir()
			written := filepath.Join(dir, "written"+CheckpointExt)
			trained := newStep(t, from)
			run(t, trained, 1)
			run(t, trained, 2)
			if err := SaveCheckpoint(ctx, written, trained, nil, TrainState{StepsDone: 2}); err != nil {
				t.Fatal(err)
			}
			ckpt, err := ReadCheckpoint(ctx, written)
			if err != nil {
				t.Fatal(err)
			}
			restore := func(devices int) *Step {
				s := newStep(t, devices)
				if err := ckpt.Restore(s); err != nil {
					t.Fatal(err)
				}
				return s
			}

			// Restored on the other count, used there (Gradients changes nothing), written again.
			other := restore(to)
			if _, err := other.Gradients(RandomBatch(3, deviceBatch, c.size, c.size, 1)); err != nil {
				t.Fatal(err)
			}
			rewritten := filepath.Join(dir, "rewritten"+CheckpointExt)
			if err := SaveCheckpoint(ctx, rewritten, other, nil, TrainState{StepsDone: 2}); err != nil {
				t.Fatal(err)
			}
			sameBytes(t, variableBytes(t, written), variableBytes(t, rewritten))

			// Restored on the same count, the next step is the uninterrupted step, bit for bit.
			same := restore(from)
			want, got := run(t, trained, 3), run(t, same, 3)
			if got != want {
				t.Errorf("on %d devices, the step after the checkpoint gives %+v; uninterrupted, %+v", from, got, want)
			}
			resumed := floatVariables(same)
			for k, w := range floatVariables(trained) {
				if !slices.Equal(resumed[k], w) {
					t.Errorf("on %d devices, variable %s after the step from the checkpoint differs from the uninterrupted step's", from, k)
				}
			}
		})
	}
}

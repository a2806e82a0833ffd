package trainstep

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/gomlx/compute"
	. "github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
	"github.com/gomlx/gomlx/ml/model"
)

// PackedStep trains several runs in one compiled program: one launch computes every run's
// training step. Each run is a Step of its own (its model, loss, temperature, optimiser and
// method settings, initial weights); the pack copies each one's variables into a store of its
// own, run k's under the scope "/run<k>", and builds one graph that holds, side by side, the
// training step each Step would build alone: K independent sub-graphs, each reading and
// updating only its run's variables, with each run's learning rate in its own variable.
//
// Independent sub-graphs, not the runs stacked on a leading axis, because:
//   - every run computes exactly the operations it computes alone, on the same shapes, so on
//     the CPU backend (whose kernels depend only on their operands and shapes, one operation
//     after another) a packed run's losses and weights are those of the run alone, bit for bit;
//     stacking would turn each convolution into a grouped one and each batch-norm reduction
//     into one over another shape, which sum in other orders;
//   - any method's graph packs unchanged, instead of every layer learning a run axis;
//   - on XLA it is still one executable and one launch per step for K runs, with the runs'
//     independent kernels left to XLA's scheduler and fusion.
//
// Between steps the runs' variables live in the pack's store; Sync copies one run's back into
// its Step (for a checkpoint, the kNN monitor, or the end), which then reads as if it had
// trained alone.
type PackedStep struct {
	backend compute.Backend
	steps   []*Step
	store   *model.Store
	train   *model.Exec
	// vars[k][i] is the copy in store of the i-th variable of steps[k]'s store, in its order.
	vars [][]packedVariable
	// launches counts the steps launched; synced[k] is how many run k's Step has seen.
	launches int
	synced   []int
}

// packedVariable is one variable of a packed run and its copy in the pack's store.
type packedVariable struct {
	own, packed *model.Variable
}

// packRoot is the scope of run k's variables in a pack's store.
func packRoot(k int) string { return model.RootScopePath + "run" + strconv.Itoa(k) }

// CanPack reports why a step of cfg cannot train in a pack: methods whose graphs read the
// model's variables by their paths in the store (MoCo's momentum encoder, NNCLR's support
// set) find nothing under a pack's run scopes, and train alone.
func CanPack(cfg StepConfig) error {
	if m := methodName(cfg.Method); m != SimCLRMethod {
		return fmt.Errorf("method %s trains alone: its graph reads the model's variables by their paths in the store", m)
	}
	return nil
}

// NewPackedStep packs steps, which must share the backend: it copies their variables into
// the pack's store and prepares the packed training program (compiled on the first Launch).
// The steps stay the caller's; their variables are current again after Sync.
func NewPackedStep(steps ...*Step) (*PackedStep, error) {
	if len(steps) == 0 {
		return nil, errors.New("a pack needs at least one run")
	}
	p := &PackedStep{backend: steps[0].backend, steps: steps, store: model.NewStore(), synced: make([]int, len(steps))}
	for k, s := range steps {
		if s.backend != p.backend {
			return nil, fmt.Errorf("run %d of the pack is on backend %s, run 0 on %s: a pack runs on one", k, s.backend.Name(), p.backend.Name())
		}
		if err := CanPack(s.cfg); err != nil {
			return nil, fmt.Errorf("run %d of the pack: %w", k, err)
		}
		root := packRoot(k)
		var vars []packedVariable
		for v := range s.store.IterVariables() {
			value, err := v.Value()
			if err != nil {
				return nil, fmt.Errorf("run %d of the pack: reading %s: %w", k, v.Path(), err)
			}
			clone, err := value.Clone()
			if err != nil {
				return nil, fmt.Errorf("run %d of the pack: copying %s: %w", k, v.Path(), err)
			}
			c, err := p.store.CreateVariable(root+v.Path(), clone)
			if err != nil {
				return nil, fmt.Errorf("run %d of the pack: %w", k, err)
			}
			c.SetTrainable(v.Trainable)
			vars = append(vars, packedVariable{own: v, packed: c})
		}
		p.vars = append(p.vars, vars)
	}
	var err error
	if p.train, err = model.NewExec(p.backend, p.store, p.trainGraph); err != nil {
		return nil, fmt.Errorf("preparing the packed training step: %w", err)
	}
	p.train.SetMaxCache(2)
	return p, nil
}

// Runs is the number of runs in the pack.
func (p *PackedStep) Runs() int { return len(p.steps) }

// Step is run k's own Step (current after Sync(k)).
func (p *PackedStep) Step(k int) *Step { return p.steps[k] }

// trainGraph is every run's training step, run after run, each on its two views.
func (p *PackedStep) trainGraph(_ *model.Scope, views []*Node) []*Node {
	out := make([]*Node, 0, 2*len(p.steps))
	for k, s := range p.steps {
		loss, q := s.trainGraph(p.store.Scope(packRoot(k)), views[2*k], views[2*k+1])
		out = append(out, loss, q)
	}
	return out
}

// Launch starts one training step of every run, run k on batches[k] at learning rate lrs[k],
// in one call of the packed program, and returns each run's pending results (see
// Step.Launch).
func (p *PackedStep) Launch(batches []*Batch, lrs []float64) ([]*PendingStep, error) {
	if len(batches) != len(p.steps) || len(lrs) != len(p.steps) {
		return nil, fmt.Errorf("a pack of %d runs got %d batches and %d learning rates", len(p.steps), len(batches), len(lrs))
	}
	args := make([]any, 0, 2*len(batches))
	defer func() {
		for _, a := range args {
			_ = a.(*tensors.Tensor).FinalizeAll()
		}
	}()
	for k, b := range batches {
		if err := checkBatch(b); err != nil {
			return nil, fmt.Errorf("run %d of the pack: %w", k, err)
		}
		if err := learningRateVariableIn(p.store.Scope(packRoot(k))).SetValue(tensors.FromScalar(float32(lrs[k]))); err != nil {
			return nil, fmt.Errorf("run %d of the pack: setting the learning rate: %w", k, err)
		}
		args = append(args, tensors.FromFlatDataAndDimensions(b.View1, b.N, b.H, b.W, b.C),
			tensors.FromFlatDataAndDimensions(b.View2, b.N, b.H, b.W, b.C))
	}
	b := batches[0]
	out, err := p.train.Call(args...)
	if err != nil {
		return nil, fmt.Errorf("packed training step of %d runs on batches of %d %dx%dx%d view pairs: %w", len(p.steps), b.N, b.H, b.W, b.C, err)
	}
	p.launches++
	pending := make([]*PendingStep, len(p.steps))
	for k := range pending {
		pending[k] = &PendingStep{out: out[2*k : 2*k+2 : 2*k+2],
			what: fmt.Sprintf("training step of run %d of a pack of %d, on a batch of %d %dx%dx%d view pairs", k, len(p.steps), b.N, b.H, b.W, b.C)}
	}
	return pending, nil
}

// Sync copies run k's variables as the pack has trained them into its Step, which then holds
// what it would hold had it taken those steps alone.
func (p *PackedStep) Sync(k int) error {
	if p.synced[k] == p.launches {
		return nil
	}
	for _, v := range p.vars[k] {
		value, err := v.packed.Value()
		if err != nil {
			return fmt.Errorf("run %d of the pack: reading %s: %w", k, v.own.Path(), err)
		}
		clone, err := value.Clone()
		if err != nil {
			return fmt.Errorf("run %d of the pack: copying %s: %w", k, v.own.Path(), err)
		}
		if err := v.own.SetValue(clone); err != nil {
			return fmt.Errorf("run %d of the pack: %w", k, err)
		}
	}
	p.synced[k] = p.launches
	return nil
}

// Finalize releases the packed program and the pack's copies of the variables; the Steps
// stay.
func (p *PackedStep) Finalize() {
	p.train.Finalize()
	p.store.Finalize()
}

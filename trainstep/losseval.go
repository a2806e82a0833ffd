package trainstep

import (
	"fmt"
	"math"
	"sync"

	"github.com/gomlx/compute"
	. "github.com/gomlx/gomlx/core/graph"
	"github.com/gomlx/gomlx/core/tensors"
)

// LossResult is one evaluation of a contrastive loss on a batch of N view pairs, in float64.
// In the in-batch form per-anchor slices have 2N entries: the view-1 anchors (image 0..N-1),
// then the view-2 anchors; in the queue form (EvalQueue) N, one per query.
type LossResult struct {
	// Loss is the reduced loss (mean over the anchors, or their sum).
	Loss float64 `json:"loss"`
	// PerAnchor are the anchor losses before reduction.
	PerAnchor []float64 `json:"per_anchor"`
	// Q are the NPC multipliers q = 1 - exp(s)/(exp(s)+U); InfoNCE_ik - DCL_ik = -log q_ik.
	Q []float64 `json:"q"`
	// MeanQ is the mean of Q.
	MeanQ float64 `json:"mean_q"`
	// Weights are DCLW's N weights w_i (nil for InfoNCE and DCL).
	Weights []float64 `json:"weights,omitempty"`
	// Grad1 and Grad2 are the gradients of Loss with respect to the raw (unnormalised) z1 and z2.
	Grad1 [][]float64 `json:"grad1"`
	Grad2 [][]float64 `json:"grad2"`
}

// LossEvaluator evaluates a loss and its gradients on float64 embeddings, reusing the compiled
// graph across calls with the same N and D. It is safe for concurrent use.
type LossEvaluator struct {
	cfg       LossConfig
	mu        sync.Mutex
	exec      *Exec
	queueExec *Exec // built on the first EvalQueue
}

// NewLossEvaluator prepares cfg's loss on backend (a CPU backend from package gpu is the usual
// choice; the evaluation runs in float64).
func NewLossEvaluator(backend compute.Backend, cfg LossConfig) (*LossEvaluator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	exec, err := NewExec(backend, func(z1, z2 *Node) []*Node {
		return lossOutputs(LossGraph(z1, z2, cfg), z1, z2)
	})
	if err != nil {
		return nil, fmt.Errorf("building the %s loss graph: %w", cfg.Kind, err)
	}
	exec.SetMaxCache(8)
	e := &LossEvaluator{cfg: cfg, exec: exec}
	if spec, _ := LookupLoss(cfg.Kind); !spec.InBatchOnly {
		e.queueExec, err = NewExec(backend, func(z1, z2, queue *Node) []*Node {
			return lossOutputs(QueueLossGraph(z1, z2, queue, cfg), z1, z2)
		})
		if err != nil {
			return nil, fmt.Errorf("building the %s queue loss graph: %w", cfg.Kind, err)
		}
		e.queueExec.SetMaxCache(8)
	}
	return e, nil
}

// lossOutputs are what an evaluator's graph returns: loss, per-anchor losses, q, weights
// (zeros when the loss has none) and the gradients with respect to z1 and z2.
func lossOutputs(nodes LossNodes, z1, z2 *Node) []*Node {
	grads := Gradient(nodes.Loss, z1, z2)
	w := nodes.Weights
	if w == nil {
		w = ZerosLike(ReduceSum(z1, 1))
	}
	return []*Node{nodes.Loss, nodes.PerAnchor, nodes.Q, w, grads[0], grads[1]}
}

// Eval computes the loss, per-anchor losses, NPC multipliers and gradients of z1, z2 ([N][D]
// each, N ≥ 2, rows neither zero nor with NaN or Inf entries).
func (e *LossEvaluator) Eval(z1, z2 [][]float64) (*LossResult, error) {
	n, d, err := checkEmbeddings(z1, z2)
	if err != nil {
		return nil, err
	}
	return e.call(e.exec, tensors.FromFlatDataAndDimensions(flatten(z1, d), n, d), tensors.FromFlatDataAndDimensions(flatten(z2, d), n, d))
}

// EvalQueue computes the queue form of the loss (QueueLossGraph): the N rows of z1 are the
// queries, row i of z2 the key of query i, and the K rows of queue the negatives of every
// query. Per-anchor slices have N entries; the gradients are those of the formula with
// respect to z1 and z2 (a trainer would detach the keys).
func (e *LossEvaluator) EvalQueue(z1, z2, queue [][]float64) (*LossResult, error) {
	if e.queueExec == nil {
		return nil, fmt.Errorf("the %s loss needs every view of the batch as a negative: it has no queue form", e.cfg.Kind)
	}
	n, d, err := checkEmbeddings(z1, z2)
	if err != nil {
		return nil, err
	}
	if len(queue) == 0 {
		return nil, fmt.Errorf("the queue is empty: the queue form needs at least one negative")
	}
	if err := checkRows("queue", queue, d); err != nil {
		return nil, err
	}
	return e.call(e.queueExec, tensors.FromFlatDataAndDimensions(flatten(z1, d), n, d),
		tensors.FromFlatDataAndDimensions(flatten(z2, d), n, d), tensors.FromFlatDataAndDimensions(flatten(queue, d), len(queue), d))
}

func (e *LossEvaluator) call(exec *Exec, inputs ...*tensors.Tensor) (*LossResult, error) {
	d := inputs[0].Shape().Dim(1)
	args := make([]any, len(inputs))
	for i, t := range inputs {
		args[i] = t
	}
	e.mu.Lock()
	out, err := exec.Call(args...)
	e.mu.Unlock()
	for _, t := range inputs {
		t.FinalizeAll()
	}
	if err != nil {
		return nil, fmt.Errorf("evaluating the %s loss: %w", e.cfg.Kind, err)
	}
	defer func() {
		for _, t := range out {
			t.FinalizeAll()
		}
	}()
	res := &LossResult{
		Loss:      tensors.ToScalar[float64](out[0]),
		PerAnchor: tensors.MustCopyFlatData[float64](out[1]),
		Q:         tensors.MustCopyFlatData[float64](out[2]),
		Grad1:     unflatten(tensors.MustCopyFlatData[float64](out[4]), d),
		Grad2:     unflatten(tensors.MustCopyFlatData[float64](out[5]), d),
	}
	if spec, _ := LookupLoss(e.cfg.Kind); spec.HasWeights {
		res.Weights = tensors.MustCopyFlatData[float64](out[3])
	}
	for _, q := range res.Q {
		res.MeanQ += q
	}
	res.MeanQ /= float64(len(res.Q))
	return res, nil
}

// Finalize releases the compiled graphs.
func (e *LossEvaluator) Finalize() {
	e.exec.Finalize()
	if e.queueExec != nil {
		e.queueExec.Finalize()
	}
}

// LossAndGrad is a one-off LossEvaluator on backend: the loss of cfg on z1, z2 with its NPC
// multipliers and gradients. Use a LossEvaluator to evaluate many batches.
func LossAndGrad(backend compute.Backend, z1, z2 [][]float64, cfg LossConfig) (*LossResult, error) {
	e, err := NewLossEvaluator(backend, cfg)
	if err != nil {
		return nil, err
	}
	defer e.Finalize()
	return e.Eval(z1, z2)
}

func checkEmbeddings(z1, z2 [][]float64) (n, d int, err error) {
	n = len(z1)
	if n < 2 {
		return 0, 0, fmt.Errorf("a contrastive loss needs at least 2 view pairs, got %d", n)
	}
	if len(z2) != n {
		return 0, 0, fmt.Errorf("z1 has %d rows but z2 has %d: want one row per image in each", n, len(z2))
	}
	d = len(z1[0])
	if d == 0 {
		return 0, 0, fmt.Errorf("embeddings have no dimensions")
	}
	for _, z := range []struct {
		name string
		rows [][]float64
	}{{"z1", z1}, {"z2", z2}} {
		if err := checkRows(z.name, z.rows, d); err != nil {
			return 0, 0, err
		}
	}
	return n, d, nil
}

// checkRows reports a row of name that does not have d finite values or is all zeros.
func checkRows(name string, rows [][]float64, d int) error {
	for i, row := range rows {
		if len(row) != d {
			return fmt.Errorf("%s row %d has %d values, want %d like z1 row 0", name, i, len(row), d)
		}
		var sq, largest float64
		for j, v := range row {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("%s[%d][%d] = %v: embeddings must be finite", name, i, j, v)
			}
			sq += v * v
			largest = max(largest, math.Abs(v))
		}
		switch {
		case math.IsInf(sq, 0):
			// The loss normalises the row by the square root of this sum, which would be
			// infinite and turn the row into zeros.
			return fmt.Errorf("%s row %d: its squared length overflows (values up to %g): scale the row down", name, i, largest)
		case sq == 0 && largest > 0:
			return fmt.Errorf("%s row %d: its squared length underflows to 0 (values up to %g): scale the row up", name, i, largest)
		case sq == 0:
			return fmt.Errorf("%s row %d is all zeros: it has no direction to normalise", name, i)
		}
	}
	return nil
}

func flatten(rows [][]float64, d int) []float64 {
	out := make([]float64, 0, len(rows)*d)
	for _, r := range rows {
		out = append(out, r...)
	}
	return out
}

func unflatten(flat []float64, d int) [][]float64 {
	out := make([][]float64, len(flat)/d)
	for i := range out {
		out[i] = flat[i*d : (i+1)*d : (i+1)*d]
	}
	return out
}

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
// Per-anchor slices have 2N entries: the view-1 anchors (image 0..N-1), then the view-2 anchors.
type LossResult struct {
	// Loss is the reduced loss (mean over the 2N anchors, or their sum).
	Loss float64 `json:"loss"`
	// PerAnchor are the 2N anchor losses before reduction.
	PerAnchor []float64 `json:"per_anchor"`
	// Q are the 2N NPC multipliers q = 1 - exp(s)/(exp(s)+U); InfoNCE_ik - DCL_ik = -log q_ik.
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
	cfg  LossConfig
	mu   sync.Mutex
	exec *Exec
}

// NewLossEvaluator prepares cfg's loss on backend (a CPU backend from package gpu is the usual
// choice; the evaluation runs in float64).
func NewLossEvaluator(backend compute.Backend, cfg LossConfig) (*LossEvaluator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	exec, err := NewExec(backend, func(z1, z2 *Node) []*Node {
		nodes := LossGraph(z1, z2, cfg)
		grads := Gradient(nodes.Loss, z1, z2)
		w := nodes.Weights
		if w == nil {
			w = ZerosLike(ReduceSum(z1, 1))
		}
		return []*Node{nodes.Loss, nodes.PerAnchor, nodes.Q, w, grads[0], grads[1]}
	})
	if err != nil {
		return nil, fmt.Errorf("building the %s loss graph: %w", cfg.Kind, err)
	}
	exec.SetMaxCache(8)
	return &LossEvaluator{cfg: cfg, exec: exec}, nil
}

// Eval computes the loss, per-anchor losses, NPC multipliers and gradients of z1, z2 ([N][D]
// each, N ≥ 2, rows neither zero nor with NaN or Inf entries).
func (e *LossEvaluator) Eval(z1, z2 [][]float64) (*LossResult, error) {
	n, d, err := checkEmbeddings(z1, z2)
	if err != nil {
		return nil, err
	}
	t1 := tensors.FromFlatDataAndDimensions(flatten(z1, d), n, d)
	t2 := tensors.FromFlatDataAndDimensions(flatten(z2, d), n, d)
	e.mu.Lock()
	out, err := e.exec.Call(t1, t2)
	e.mu.Unlock()
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
func (e *LossEvaluator) Finalize() { e.exec.Finalize() }

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
	for view, z := range [][][]float64{z1, z2} {
		for i, row := range z {
			if len(row) != d {
				return 0, 0, fmt.Errorf("z%d row %d has %d values, want %d like z1 row 0", view+1, i, len(row), d)
			}
			var sq float64
			for j, v := range row {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					return 0, 0, fmt.Errorf("z%d[%d][%d] = %v: embeddings must be finite", view+1, i, j, v)
				}
				sq += v * v
			}
			if sq == 0 {
				return 0, 0, fmt.Errorf("z%d row %d is all zeros: it has no direction to normalise", view+1, i)
			}
		}
	}
	return n, d, nil
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

package trainstep

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph"

	"github.com/dcl-beam/dcl-beam/internal/registry"
	"github.com/dcl-beam/dcl-beam/internal/usage"
)

// LossKind names a contrastive loss as the --loss flag spells it.
type LossKind string

const (
	// InfoNCE is SimCLR's NT-Xent: the positive pair is in the denominator.
	InfoNCE LossKind = "infonce"
	// DCL is the decoupled loss: the positive pair is removed from the denominator.
	DCL LossKind = "dcl"
	// DCLW is DCL with the positive term weighted by w_i = 2 - N·softmax_i(<z1_i,z2_i>/σ).
	DCLW LossKind = "dclw"
	// DCLWExp is DCL with the appendix's other weight, w_i = δ·exp(-σ·<z1_i,z2_i>).
	DCLWExp LossKind = "dclw-exp"
	// Hypersphere is Wang & Isola's alignment and uniformity loss, which the paper's appendix
	// compares DCL with.
	Hypersphere LossKind = "hypersphere"
)

// Reduction says how the 2N per-anchor losses become one number.
type Reduction string

const (
	// Mean averages over the 2N anchors (the default; comparable across batch sizes).
	Mean Reduction = "mean"
	// Sum is the paper's Σ over the 2N anchors.
	Sum Reduction = "sum"
)

// LossConfig selects and parameterises a contrastive loss. Checkpoints store it (JSON: the
// kind, τ, then the loss's parameters under their JSON keys, the reduction and weight_grad).
type LossConfig struct {
	Kind LossKind
	// Temperature is τ > 0 (paper: 0.07 for CIFAR and STL-10, 0.1 for ImageNet).
	Temperature float64
	// Params holds the loss's parameters by name (LossSpec.Params); one left out takes its
	// declared default, one the loss does not declare is ignored.
	Params registry.Values
	// Reduction defaults to Mean when empty.
	Reduction Reduction
	// WeightGrad lets the gradient flow through DCLW's weights w_i, as the paper's formula and
	// lightly's DCLWLoss do (the training setting dclw_grad, true by default); false treats
	// them as constants in the backward pass.
	WeightGrad bool
}

// MarshalJSON writes the configuration as checkpoints have always held it: "sigma" is
// always present (0 where the loss reads no σ), the other parameters where set.
func (c LossConfig) MarshalJSON() ([]byte, error) {
	head, err := json.Marshal(struct {
		Kind        LossKind `json:"kind"`
		Temperature float64  `json:"temperature"`
		Sigma       float64  `json:"sigma"`
	}{c.Kind, c.Temperature, c.Params.Float(ParamSigma)})
	if err != nil {
		return nil, err
	}
	others := slices.DeleteFunc(LossParams(), func(p registry.Param) bool { return p.Name == ParamSigma })
	buf, err := registry.AppendJSON(head[:len(head)-1], others, c.Params, false)
	if err != nil {
		return nil, fmt.Errorf("loss %s: %w", c.Kind, err)
	}
	tail, err := json.Marshal(struct {
		Reduction  Reduction `json:"reduction"`
		WeightGrad bool      `json:"weight_grad"`
	}{c.Reduction, c.WeightGrad})
	if err != nil {
		return nil, err
	}
	return append(append(buf, ','), tail[1:]...), nil
}

// UnmarshalJSON reads a LossConfig: every key a registered loss declares is a parameter, any
// other key is an error. Keys match in any letter case, as checkpoints from before the JSON
// names spelt them as Go field names ("WeightGrad"); a σ of 0 is one the loss did not read.
func (c *LossConfig) UnmarshalJSON(data []byte) error {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(data, &fields); err != nil {
		return err
	}
	*c = LossConfig{}
	params := LossParams()
	for _, key := range slices.Sorted(maps.Keys(fields)) {
		raw := fields[key]
		var err error
		switch strings.ToLower(key) {
		case "kind":
			err = json.Unmarshal(raw, &c.Kind)
		case "temperature":
			err = json.Unmarshal(raw, &c.Temperature)
		case "reduction":
			err = json.Unmarshal(raw, &c.Reduction)
		case "weight_grad", "weightgrad":
			err = json.Unmarshal(raw, &c.WeightGrad)
		default:
			p, ok := registry.ByJSONName(params, key)
			if !ok {
				return fmt.Errorf("loss: unknown key %q (no registered loss declares it)", key)
			}
			var v float64
			if v, err = p.DecodeJSON(raw); err == nil && !(p.Name == ParamSigma && v == 0) {
				if c.Params == nil {
					c.Params = registry.Values{}
				}
				c.Params[p.Name] = v
			}
		}
		if err != nil {
			return fmt.Errorf("loss: %s: %w", key, err)
		}
	}
	return nil
}

// DefaultLossConfig is DCL with the paper's CIFAR temperature (PaperDefaults).
func DefaultLossConfig() LossConfig { return PaperDefaults().LossConfig() }

// ParseLossKind accepts a loss's name or one of its aliases (LossSpec), in any case.
func ParseLossKind(s string) (LossKind, error) {
	name, _, err := lossRegistry.Resolve(strings.ToLower(strings.TrimSpace(s)))
	if err != nil {
		return "", fmt.Errorf("unknown loss %q: want %s", s, lossNameList())
	}
	return LossKind(name), nil
}

// Validate reports a configuration that cannot be computed: an unknown loss, τ, a parameter
// outside its declared range (each check runs here once), or an unknown reduction.
func (c LossConfig) Validate() error {
	spec, ok := LookupLoss(c.Kind)
	if !ok {
		return fmt.Errorf("unknown loss %q: want %s", c.Kind, lossNameList())
	}
	if !(c.Temperature > 0) || math.IsInf(c.Temperature, 0) {
		return usage.Value("temperature", c.Temperature, "must be a positive number")
	}
	if _, err := registry.Resolve(spec.Display, spec.Params, c.Params, false); err != nil {
		return err
	}
	switch c.Reduction {
	case "", Mean, Sum:
	default:
		return fmt.Errorf("unknown reduction %q: want mean or sum", c.Reduction)
	}
	return nil
}

// withUsedParams returns c with exactly the parameters its loss declares, defaults filled
// in, so that checkpoints hold what the loss used and two settings of one loss compare
// equal.
func (c LossConfig) withUsedParams() LossConfig {
	spec, ok := LookupLoss(c.Kind)
	if !ok {
		return c
	}
	c.Params = registry.Fill(spec.Params, c.Params)
	c.WeightGrad = c.WeightGrad && spec.HasWeights
	return c
}

// LossNodes are the graph values of one contrastive loss evaluation.
type LossNodes struct {
	// Loss is the scalar loss (mean or sum over anchors, as configured).
	Loss *Node
	// PerAnchor holds the 2N anchor losses: view-1 anchors 0..N-1, then view-2 anchors.
	PerAnchor *Node
	// Q holds the NPC multiplier of each anchor, same order; it carries no gradient.
	Q *Node
	// Weights holds DCLW's w_i per image (N values); nil for the other losses.
	Weights *Node
}

// LossGraph builds the contrastive loss of a batch of N view pairs: z1 and z2 are the
// projector outputs [N, D] of view 1 and view 2 (any float dtype; they are L2-normalised here).
//
// Every one of the 2N views is an anchor; the positive of anchor (k, i) is the other view of
// image i and its negatives are both views of every image j ≠ i (2N-2 of them). With
// s = <z1_i, z2_i>/τ and U_ik the sum of exp(<z_i^k, z_j^l>/τ) over the negatives:
//
//	InfoNCE_ik = -s + log(exp(s) + U_ik)    DCL_ik = -s + log U_ik    DCLW_ik = -w_i s + log U_ik
//	q_ik = 1 - exp(s)/(exp(s) + U_ik)       (so InfoNCE_ik - DCL_ik = -log q_ik)
//
// Log-sum-exps are taken with the masked row maximum subtracted, so no temperature overflows.
// It panics (as GoMLX graph builders do) on shapes that do not fit; check cfg with Validate.
func LossGraph(z1, z2 *Node, cfg LossConfig) LossNodes {
	if z1.Rank() != 2 || !z1.Shape().Equal(z2.Shape()) {
		panic(fmt.Sprintf("LossGraph: z1 %s and z2 %s must both be [N, D]", z1.Shape(), z2.Shape()))
	}
	return StackedLossGraph(Concatenate([]*Node{z1, z2}, 0), cfg)
}

// StackedLossGraph is LossGraph on z = [z1; z2], [2N, D], view-1 rows first: the layout of a
// model run on both views as one batch; it takes no slices of z.
func StackedLossGraph(z *Node, cfg LossConfig) LossNodes {
	if z.Rank() != 2 || z.Shape().Dim(0)%2 != 0 {
		panic(fmt.Sprintf("StackedLossGraph: z %s must be [2N, D]", z.Shape()))
	}
	g := z.Graph()
	n := z.Shape().Dim(0) / 2
	invTau := 1 / cfg.Temperature

	z = l2Normalize(z)
	cos := Dot(z, Transpose(z, 0, 1)).Product() // [2N, 2N] cosine similarities
	logits := MulScalar(cos, invTau)

	// Anchor a is a view of image a mod N; its positive is view (a+N) mod 2N.
	rowIndex := Iota(g, shapes.Make(dtypes.Int32, 2*n, 2*n), 0)
	colIndex := Iota(g, shapes.Make(dtypes.Int32, 2*n, 2*n), 1)
	negative := NotEqual(ModScalar(rowIndex, n), ModScalar(colIndex, n))
	positive := Equal(ModScalar(AddScalar(rowIndex, n), 2*n), colIndex)
	zero := ScalarZero(g, z.DType())
	posCos := ReduceSum(Where(positive, cos, zero), 1) // [2N]: <z1_i, z2_i>, twice
	pos := MulScalar(posCos, invTau)

	logU := maskedLogSumExp(logits, negative, 1) // [2N]

	return anchorLoss(AnchorTerms{Pos: pos, PosCos: posCos, LogU: logU, N: n, Cos: cos}, cfg)
}

// QueueLossGraph is the loss of MoCo's form: A queries [A, D], each with its key [A, D] as
// the positive and all K rows of queue [K, D] as negatives (any float dtype; every row is
// L2-normalised here). With s_i = <q_i, k_i>/τ and U_i = Σ_k exp(<q_i, queue_k>/τ):
//
//	InfoNCE_i = -s_i + log(exp(s_i) + U_i)    DCL_i = -s_i + log U_i
//
// reduced over the A anchors. Gradients flow to queries, keys and queue alike: a trainer
// detaches what it does not train. Losses that need the in-batch cosines (InBatchOnly) have
// no queue form; it panics on them, as on shapes that do not fit.
func QueueLossGraph(queries, keys, queue *Node, cfg LossConfig) LossNodes {
	if queries.Rank() != 2 || !queries.Shape().Equal(keys.Shape()) || queue.Rank() != 2 || queue.Shape().Dim(1) != queries.Shape().Dim(1) {
		panic(fmt.Sprintf("QueueLossGraph: queries %s and keys %s must both be [A, D], the queue [K, D]", queries.Shape(), keys.Shape()))
	}
	q, k := l2Normalize(queries), l2Normalize(keys)
	invTau := 1 / cfg.Temperature
	posCos := ReduceSum(Mul(q, k), 1)
	logits := MulScalar(Dot(q, Transpose(l2Normalize(queue), 0, 1)).Product(), invTau) // [A, K]
	return anchorLoss(AnchorTerms{Pos: MulScalar(posCos, invTau), PosCos: posCos, LogU: logSumExp(logits, 1), N: q.Shape().Dim(0)}, cfg)
}

// PairLossGraph is the loss of NNCLR's form: A anchors [A, D], the positive of anchor i is
// row i of targets [A, D] and its negatives are the other A-1 targets (every row
// L2-normalised here). InfoNCE is NNCLR's cross-entropy over the rows of anchors·targetsᵀ/τ;
// DCL drops the positive from each row's denominator.
func PairLossGraph(anchors, targets *Node, cfg LossConfig) LossNodes {
	if anchors.Rank() != 2 || !anchors.Shape().Equal(targets.Shape()) {
		panic(fmt.Sprintf("PairLossGraph: anchors %s and targets %s must both be [A, D]", anchors.Shape(), targets.Shape()))
	}
	a, t := l2Normalize(anchors), l2Normalize(targets)
	g := a.Graph()
	n := a.Shape().Dim(0)
	invTau := 1 / cfg.Temperature
	posCos := ReduceSum(Mul(a, t), 1)
	logits := MulScalar(Dot(a, Transpose(t, 0, 1)).Product(), invTau) // [A, A]
	offDiagonal := NotEqual(Iota(g, shapes.Make(dtypes.Int32, n, n), 0), Iota(g, shapes.Make(dtypes.Int32, n, n), 1))
	return anchorLoss(AnchorTerms{Pos: MulScalar(posCos, invTau), PosCos: posCos, LogU: maskedLogSumExp(logits, offDiagonal, 1), N: n}, cfg)
}

// anchorLoss builds cfg's per-anchor losses from the shared terms, their NPC multipliers
// and the reduction over the anchors.
func anchorLoss(t AnchorTerms, cfg LossConfig) LossNodes {
	spec, ok := LookupLoss(cfg.Kind)
	if !ok {
		panic(fmt.Sprintf("loss graph: unknown loss %q", cfg.Kind))
	}
	if spec.InBatchOnly && t.Cos == nil {
		panic(fmt.Sprintf("loss graph: %s needs the in-batch cosines; it has no queue form", spec.Display))
	}
	cfg.Params = registry.Fill(spec.Params, cfg.Params)
	perAnchor, weights := spec.PerAnchor(t, cfg)

	// q = 1 - exp(s)/(exp(s)+U) = sigmoid(log U - s).
	q := StopGradient(Sigmoid(Sub(t.LogU, t.Pos)))

	loss := ReduceAllSum(perAnchor)
	if cfg.Reduction != Sum {
		loss = DivScalar(loss, float64(t.anchors()))
	}
	return LossNodes{Loss: loss, PerAnchor: perAnchor, Q: q, Weights: weights}
}

// l2Normalize divides each row by max(‖row‖, 1e-12), as torch.nn.functional.normalize does, so
// a zero row gives zeros rather than NaNs.
func l2Normalize(x *Node) *Node {
	sq := ReduceAndKeep(Square(x), ReduceSum, -1)
	sq = MaxScalar(sq, 1e-24)
	// Div and Sqrt rather than Mul and Rsqrt: GoMLX v0.28 still has no gradient for Rsqrt
	// (TestRsqrtHasNoGradient).
	return Div(x, Sqrt(sq))
}

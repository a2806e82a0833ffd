package trainstep

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph"
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
)

// Reduction says how the 2N per-anchor losses become one number.
type Reduction string

const (
	// Mean averages over the 2N anchors (the default; comparable across batch sizes).
	Mean Reduction = "mean"
	// Sum is the paper's Σ over the 2N anchors.
	Sum Reduction = "sum"
)

// LossConfig selects and parameterises a contrastive loss. Checkpoints store it (JSON).
type LossConfig struct {
	Kind LossKind `json:"kind"`
	// Temperature is τ > 0 (paper: 0.07 for CIFAR and STL-10, 0.1 for ImageNet).
	Temperature float64 `json:"temperature"`
	// Sigma is DCLW's σ > 0 (paper: 0.5); ignored by the losses that do not use it.
	Sigma float64 `json:"sigma"`
	// Reduction defaults to Mean when empty.
	Reduction Reduction `json:"reduction"`
	// WeightGrad lets the gradient flow through DCLW's weights w_i; by default they are
	// treated as constants in the backward pass.
	WeightGrad bool `json:"weight_grad"`
}

// UnmarshalJSON reads a LossConfig, also as checkpoints from before the JSON names spelt it
// (Go field names: only "WeightGrad" differs beyond letter case).
func (c *LossConfig) UnmarshalJSON(data []byte) error {
	type plain LossConfig
	var v struct {
		plain
		LegacyWeightGrad *bool `json:"WeightGrad"`
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return err
	}
	*c = LossConfig(v.plain)
	if v.LegacyWeightGrad != nil {
		c.WeightGrad = *v.LegacyWeightGrad
	}
	return nil
}

// DefaultLossConfig is DCL with the paper's CIFAR temperature (PaperDefaults).
func DefaultLossConfig() LossConfig { return PaperDefaults().LossConfig() }

// ParseLossKind accepts a loss's name or one of its aliases (LossSpec), in any case.
func ParseLossKind(s string) (LossKind, error) {
	key := strings.ToLower(strings.TrimSpace(s))
	for _, spec := range Losses() {
		if string(spec.Kind) == key || slices.Contains(spec.Aliases, key) {
			return spec.Kind, nil
		}
	}
	return "", fmt.Errorf("unknown loss %q: want %s", s, lossNameList())
}

// Validate reports a configuration that cannot be computed.
func (c LossConfig) Validate() error {
	spec, ok := LookupLoss(c.Kind)
	if !ok {
		return fmt.Errorf("unknown loss %q: want %s", c.Kind, lossNameList())
	}
	if !(c.Temperature > 0) || math.IsInf(c.Temperature, 0) {
		return fmt.Errorf("temperature %v: must be a positive number", c.Temperature)
	}
	if spec.UsesSigma && (!(c.Sigma > 0) || math.IsInf(c.Sigma, 0)) {
		return fmt.Errorf("sigma %v: %s needs a positive number", c.Sigma, spec.Display)
	}
	switch c.Reduction {
	case "", Mean, Sum:
	default:
		return fmt.Errorf("unknown reduction %q: want mean or sum", c.Reduction)
	}
	return nil
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
	dtype := z.DType()
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
	zero := ScalarZero(g, dtype)
	posCos := ReduceSum(Where(positive, cos, zero), 1) // [2N]: <z1_i, z2_i>, twice
	pos := MulScalar(posCos, invTau)

	// log U_a, stabilised by the largest negative logit of each row.
	masked := Where(negative, logits, Scalar(g, dtype, -1e30))
	rowMax := StopGradient(ReduceAndKeep(masked, ReduceMax, 1)) // [2N, 1]
	expNeg := Where(negative, Exp(Sub(logits, rowMax)), zero)
	logU := Add(Log(ReduceSum(expNeg, 1)), Reshape(rowMax, 2*n)) // [2N]

	spec, ok := LookupLoss(cfg.Kind)
	if !ok {
		panic(fmt.Sprintf("LossGraph: unknown loss %q", cfg.Kind))
	}
	perAnchor, weights := spec.PerAnchor(AnchorTerms{Pos: pos, PosCos: posCos, LogU: logU, N: n}, cfg)

	// q = 1 - exp(s)/(exp(s)+U) = sigmoid(log U - s).
	q := StopGradient(Sigmoid(Sub(logU, pos)))

	loss := ReduceAllSum(perAnchor)
	if cfg.Reduction != Sum {
		loss = DivScalar(loss, float64(2*n))
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

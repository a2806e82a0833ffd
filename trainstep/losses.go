package trainstep

import (
	"fmt"
	"math"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/compute/shapes"
	. "github.com/gomlx/gomlx/core/graph"

	"github.com/dcl-beam/dcl-beam/internal/registry"
)

// LossSpec is everything the toolkit knows about one contrastive loss of the in-batch form
// (every view an anchor, its other view the positive, both views of the other images the
// negatives): the names the command line and configs accept, its parameters and how the loss
// of each anchor is built from the shared terms. The command line (its flags and `dcl
// loss`), reproduce's config keys and checks, checkpoints and the report read this registry;
// adding a loss, parameters included, is one RegisterLoss call.
type LossSpec struct {
	// Kind is the loss's name (--loss, a config's loss, checkpoints).
	Kind LossKind
	// Aliases are other names ParseLossKind accepts (lower case).
	Aliases []string
	// Display is the name reports print, e.g. "SimCLR (InfoNCE)".
	Display string
	// Params are the parameters the loss reads beyond τ (LossConfig.Params): each becomes a
	// flag of `dcl train` and `dcl loss`, a key of a reproduce run and of the checkpoint's
	// loss, and its check runs where LossConfig.Validate resolves the values.
	Params []registry.Param
	// HasWeights says PerAnchor returns per-image weights (reported as LossResult.Weights).
	HasWeights bool
	// InBatchOnly says PerAnchor reads AnchorTerms.Cos, which only the in-batch form has:
	// methods whose negatives come from a queue (MoCo, NNCLR) refuse the loss.
	InBatchOnly bool
	// PerAnchor builds the anchor losses from the terms every loss of this form shares, and
	// the N per-image weights when HasWeights (else nil); cfg.Params holds every parameter
	// the loss declares (defaults filled in). The NPC multiplier q = sigmoid(log U - s) is
	// defined for every loss of this form, so the step reports it whatever the loss.
	PerAnchor func(t AnchorTerms, cfg LossConfig) (perAnchor, weights *Node)
}

// The parameters of the built-in losses, by their names (config keys; flags with '-').
const (
	// ParamSigma is DCLW's σ (and the σ of the exponential weight).
	ParamSigma = "sigma"
	// ParamDelta is the appendix's exponential DCLW weight's δ.
	ParamDelta = "delta"
	// ParamAlpha is the hypersphere loss's alignment exponent α (checkpoints: "alpha").
	ParamAlpha = "align_alpha"
	// ParamUniformT is the hypersphere loss's uniformity scale t.
	ParamUniformT = "uniform_t"
)

// AnchorTerms are the graph values of one batch every loss of the registry is built from;
// entries are per anchor. In the in-batch form there are 2N anchors (the view-1 anchors, then
// the view-2 anchors); in the queue forms (MoCo, NNCLR) one per query, N or 2N.
type AnchorTerms struct {
	// Pos is s = <anchor, positive>/τ, PosCos the cosine <anchor, positive> itself.
	Pos, PosCos *Node
	// LogU is log Σ_negatives exp(<anchor, negative>/τ), stabilised.
	LogU *Node
	// N is the number of images (view pairs) in the batch.
	N int
	// Cos is the [2N, 2N] matrix of cosines between the stacked views [z1; z2] in the
	// in-batch form, and nil in the queue forms (see LossSpec.InBatchOnly).
	Cos *Node
}

// anchors is the number of anchors the terms hold.
func (t AnchorTerms) anchors() int { return t.Pos.Shape().Dim(0) }

var lossRegistry = registry.New[LossSpec]("loss")

// RegisterLoss adds a loss; it panics on a spec without a kind, a builder or with a name or
// alias already taken (programming errors, found when the binary starts).
func RegisterLoss(spec LossSpec) {
	if spec.Kind == "" || spec.PerAnchor == nil || spec.Display == "" {
		panic(fmt.Sprintf("trainstep.RegisterLoss: %q needs a kind, a display name and PerAnchor", spec.Kind))
	}
	lossRegistry.Register(string(spec.Kind), spec, spec.Aliases...)
	// Every loss's parameters share one flag and one key per name: a clash is found here.
	registry.Merge(LossVariants())
}

// UnregisterLoss removes a loss: for tests that register one for their own duration.
func UnregisterLoss(kind LossKind) { lossRegistry.Unregister(string(kind)) }

// Losses returns the registered losses, in registration order.
func Losses() []LossSpec { return lossRegistry.Values() }

// LossNames returns the registered loss names, in registration order.
func LossNames() []string { return lossRegistry.Names() }

// LookupLoss returns the spec of a loss by its name (not an alias: configurations hold names).
func LookupLoss(kind LossKind) (LossSpec, bool) { return lossRegistry.Lookup(string(kind)) }

// LossVariants are the losses' names and declared parameters, which the command line's flags
// and reproduce's keys are derived from.
func LossVariants() []registry.Variant {
	var out []registry.Variant
	for _, s := range Losses() {
		out = append(out, registry.Variant{Name: string(s.Kind), Params: s.Params})
	}
	return out
}

// LossParams are the parameters any loss declares, one per name, in order of declaration.
func LossParams() []registry.Param { return registry.Merge(LossVariants()) }

func lossNameList() string { return lossRegistry.List() }

// positive declares a loss parameter that must be a positive number.
func positive(name string, def float64, doc string) registry.Param {
	return registry.Param{Name: name, Default: def, Doc: doc, Check: registry.Positive}
}

func init() {
	RegisterLoss(LossSpec{
		Kind: InfoNCE, Aliases: []string{"simclr", "nt-xent", "ntxent"}, Display: "SimCLR (InfoNCE)",
		PerAnchor: func(t AnchorTerms, _ LossConfig) (*Node, *Node) {
			return Sub(LogAddExp(t.Pos, t.LogU), t.Pos), nil
		},
	})
	RegisterLoss(LossSpec{
		Kind: DCL, Display: "DCL",
		PerAnchor: func(t AnchorTerms, _ LossConfig) (*Node, *Node) {
			return Sub(t.LogU, t.Pos), nil
		},
	})
	RegisterLoss(LossSpec{
		Kind: DCLW, Display: "DCLW", HasWeights: true,
		Params: []registry.Param{positive(ParamSigma, 0.5, "σ of the weight w = 2 - N·softmax(<z1,z2>/σ) (paper: 0.5)")},
		PerAnchor: func(t AnchorTerms, cfg LossConfig) (*Node, *Node) {
			// w_i = 2 - N·softmax_i(<z1_i, z2_i>/σ): mean 1, larger for harder (less similar)
			// positives. In the in-batch form each image's similarity appears twice in
			// PosCos, so the softmax over its 2N entries is half the one over N and
			// N·softmax_N = 2N·softmax_2N: A·softmax_A over the A anchors is right in every
			// form.
			a := t.anchors()
			w := AddScalar(MulScalar(Softmax(MulScalar(t.PosCos, 1/cfg.Params.Float(ParamSigma)), 0), -float64(a)), 2)
			return weightedPositive(t, w, cfg)
		},
	})
	RegisterLoss(LossSpec{
		Kind: DCLWExp, Display: "DCLW (exp. weight)", HasWeights: true,
		Params: []registry.Param{
			positive(ParamSigma, 0.5, "σ of the weight δ·exp(-σ·<z1,z2>)"),
			positive(ParamDelta, 3, "δ of the weight δ·exp(-σ·<z1,z2>) (paper's appendix: 3)"),
		},
		PerAnchor: func(t AnchorTerms, cfg LossConfig) (*Node, *Node) {
			// The appendix's alternative weight w_i = δ·exp(-σ·<z1_i, z2_i>): larger for
			// harder positives too, but not normalised to mean 1.
			return weightedPositive(t, MulScalar(Exp(MulScalar(t.PosCos, -cfg.Params.Float(ParamSigma))), cfg.Params.Float(ParamDelta)), cfg)
		},
	})
	RegisterLoss(LossSpec{
		Kind: Hypersphere, Aliases: []string{"align-uniform"}, Display: "Hypersphere (align + uniform)",
		Params: []registry.Param{
			// Checkpoints have stored α as "alpha" since the loss came.
			{Name: ParamAlpha, JSON: "alpha", Default: 2, Doc: "alignment exponent α (Wang & Isola: 2)", Check: registry.Positive},
			positive(ParamUniformT, 2, "uniformity scale t (Wang & Isola: 2)"),
		}, InBatchOnly: true,
		PerAnchor: hypersphere,
	})
}

// weightedPositive is DCL with the positive term of each anchor weighted by w (one entry per
// anchor): log U - w·s, and the N per-image weights (the first N entries). The weights are
// constants in the backward pass unless cfg.WeightGrad.
func weightedPositive(t AnchorTerms, w *Node, cfg LossConfig) (perAnchor, weights *Node) {
	if !cfg.WeightGrad {
		w = StopGradient(w)
	}
	return Sub(t.LogU, Mul(w, t.Pos)), StopGradient(Slice(w, AxisRange(0, t.N)))
}

// hypersphere is Wang & Isola's alignment and uniformity loss (ICML 2020) with unit weights,
// as their CIFAR and STL-10 settings use:
//
//	L = E_i ‖z1_i − z2_i‖^α + ½ Σ_views log E_{i≠j} exp(−t‖z_i − z_j‖²)
//
// over the L2-normalised views. Per anchor it is the alignment of its image plus the
// uniformity of its view, so the mean over the 2N anchors is L. For unit vectors
// ‖a − b‖² = 2 − 2<a, b>, so both terms come from the cosines.
func hypersphere(t AnchorTerms, cfg LossConfig) (*Node, *Node) {
	g := t.Pos.Graph()
	n := t.N
	dtype := t.Pos.DType()
	sqDist := MaxScalar(AddScalar(MulScalar(t.PosCos, -2), 2), 0)
	align := sqDist
	if alpha := cfg.Params.Float(ParamAlpha); alpha != 2 {
		align = Pow(sqDist, Scalar(g, dtype, alpha/2))
	}
	// log mean over the N(N-1) ordered pairs of distinct images of one view, per view.
	row := Iota(g, shapes.Make(dtypes.Int32, 2*n, 2*n), 0)
	col := Iota(g, shapes.Make(dtypes.Int32, 2*n, 2*n), 1)
	nInt := Scalar(g, dtypes.Int32, n)
	sameView := And(Equal(Div(row, nInt), Div(col, nInt)), NotEqual(row, col))
	logits := MulScalar(AddScalar(t.Cos, -1), 2*cfg.Params.Float(ParamUniformT))
	perRow := maskedLogSumExp(logits, sameView, 1)                                         // [2N]
	perView := AddScalar(logSumExp(Reshape(perRow, 2, n), 1), -math.Log(float64(n*(n-1)))) // [2]
	uniform := Reshape(BroadcastToDims(Reshape(perView, 2, 1), 2, n), 2*n)
	return Add(align, uniform), nil
}

// maskedLogSumExp is log Σ exp(x) over the entries of axis where mask holds, with the largest
// of them subtracted first so no temperature overflows. Masked-out entries enter the
// exponential as a very negative number, not as exp(x) times zero: their exp(x) may be
// infinite, and the backward pass would then multiply it by zero (NaN).
func maskedLogSumExp(x, mask *Node, axis int) *Node {
	return logSumExp(Where(mask, x, Scalar(x.Graph(), x.DType(), -1e30)), axis)
}

// logSumExp is log Σ exp(x) over axis, stabilised by the axis's maximum.
func logSumExp(x *Node, axis int) *Node {
	m := StopGradient(ReduceAndKeep(x, ReduceMax, axis))
	return Add(Log(ReduceSum(Exp(Sub(x, m)), axis)), Squeeze(m, axis))
}

package trainstep

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	. "github.com/gomlx/gomlx/core/graph"
)

// LossSpec is everything the toolkit knows about one contrastive loss of the in-batch form
// (every view an anchor, its other view the positive, both views of the other images the
// negatives): the names the command line and configs accept, its parameters and how the loss
// of each anchor is built from the shared terms. The command line, `dcl loss`, reproduce's
// config checks and its report read this registry; adding a loss is one RegisterLoss call.
type LossSpec struct {
	// Kind is the loss's name (--loss, a config's loss, checkpoints).
	Kind LossKind
	// Aliases are other names ParseLossKind accepts (lower case).
	Aliases []string
	// Display is the name reports print, e.g. "SimCLR (InfoNCE)".
	Display string
	// UsesSigma says the loss reads LossConfig.Sigma (then it must be positive).
	UsesSigma bool
	// HasWeights says PerAnchor returns per-image weights (reported as LossResult.Weights).
	HasWeights bool
	// PerAnchor builds the 2N anchor losses from the terms every in-batch loss shares, and
	// the N per-image weights when HasWeights (else nil). The NPC multiplier
	// q = sigmoid(log U - s) is defined for every loss of this form, so the step reports it
	// whatever the loss.
	PerAnchor func(t AnchorTerms, cfg LossConfig) (perAnchor, weights *Node)
}

// AnchorTerms are the graph values of one batch every in-batch loss is built from; entries
// are per anchor (2N: the view-1 anchors, then the view-2 anchors).
type AnchorTerms struct {
	// Pos is s = <z1_i, z2_i>/τ, PosCos the cosine <z1_i, z2_i> itself.
	Pos, PosCos *Node
	// LogU is log Σ_negatives exp(<z_a, z_neg>/τ), stabilised.
	LogU *Node
	// N is the number of view pairs.
	N int
}

var lossRegistry = struct {
	sync.RWMutex
	specs []LossSpec
}{}

// RegisterLoss adds a loss; it panics on a spec without a kind, a builder or with a name or
// alias already taken (programming errors, found when the binary starts).
func RegisterLoss(spec LossSpec) {
	lossRegistry.Lock()
	defer lossRegistry.Unlock()
	if spec.Kind == "" || spec.PerAnchor == nil || spec.Display == "" {
		panic(fmt.Sprintf("trainstep.RegisterLoss: %q needs a kind, a display name and PerAnchor", spec.Kind))
	}
	names := append([]string{string(spec.Kind)}, spec.Aliases...)
	for _, other := range lossRegistry.specs {
		for _, name := range names {
			if name == string(other.Kind) || slices.Contains(other.Aliases, name) {
				panic(fmt.Sprintf("trainstep.RegisterLoss: name %q of loss %q is taken by %q", name, spec.Kind, other.Kind))
			}
		}
	}
	lossRegistry.specs = append(lossRegistry.specs, spec)
}

// Losses returns the registered losses, in registration order.
func Losses() []LossSpec {
	lossRegistry.RLock()
	defer lossRegistry.RUnlock()
	return slices.Clone(lossRegistry.specs)
}

// LossNames returns the registered loss names, in registration order.
func LossNames() []string {
	var names []string
	for _, spec := range Losses() {
		names = append(names, string(spec.Kind))
	}
	return names
}

// LookupLoss returns the spec of a loss by its name (not an alias: configurations hold names).
func LookupLoss(kind LossKind) (LossSpec, bool) {
	for _, spec := range Losses() {
		if spec.Kind == kind {
			return spec, true
		}
	}
	return LossSpec{}, false
}

func lossNameList() string {
	names := LossNames()
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
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
		Kind: DCLW, Display: "DCLW", UsesSigma: true, HasWeights: true,
		PerAnchor: func(t AnchorTerms, cfg LossConfig) (*Node, *Node) {
			// w_i = 2 - N·softmax_i(<z1_i, z2_i>/σ): mean 1, larger for harder (less similar)
			// positives. Each image's similarity appears twice in PosCos, so the softmax over
			// its 2N entries is half the one over N and N·softmax_N = 2N·softmax_2N.
			w2 := AddScalar(MulScalar(Softmax(MulScalar(t.PosCos, 1/cfg.Sigma), 0), -float64(2*t.N)), 2)
			if !cfg.WeightGrad {
				w2 = StopGradient(w2)
			}
			return Sub(t.LogU, Mul(w2, t.Pos)), StopGradient(Slice(w2, AxisRange(0, t.N)))
		},
	})
}

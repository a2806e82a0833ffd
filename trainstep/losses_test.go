package trainstep

import (
	"encoding/json"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	. "github.com/gomlx/gomlx/core/graph"

	"github.com/dcl-beam/dcl-beam/internal/registry"
)

func TestLossRegistry(t *testing.T) {
	if got := LossNames(); !slices.Equal(got[:3], []string{"infonce", "dcl", "dclw"}) {
		t.Fatalf("LossNames() = %v", got)
	}
	for _, tt := range []struct {
		give string
		want LossKind
	}{{"InfoNCE", InfoNCE}, {"simclr", InfoNCE}, {"NT-Xent", InfoNCE}, {"dcl", DCL}, {" DCLW ", DCLW}} {
		if got, err := ParseLossKind(tt.give); err != nil || got != tt.want {
			t.Errorf("ParseLossKind(%q) = %q, %v; want %q", tt.give, got, err, tt.want)
		}
	}
	if _, err := ParseLossKind("triplet"); err == nil || !strings.Contains(err.Error(), "infonce, dcl") {
		t.Errorf("ParseLossKind(triplet) = %v, want an error listing the losses", err)
	}
	if err := (LossConfig{Kind: DCLW, Temperature: 0.1, Params: registry.Values{"sigma": 0}}).Validate(); err == nil || !strings.Contains(err.Error(), "sigma 0: DCLW: must be a positive number") {
		t.Errorf("DCLW with σ 0: %v, want it refused naming sigma", err)
	}
	if err := (LossConfig{Kind: DCLW, Temperature: 0.1}).Validate(); err != nil {
		t.Errorf("DCLW without σ (its declared default): %v", err)
	}
	if err := (LossConfig{Kind: DCL, Temperature: 0.1}).Validate(); err != nil {
		t.Errorf("DCL without σ: %v", err)
	}
	defer func() {
		if recover() == nil {
			t.Error("a loss registered under a taken alias was accepted")
		}
	}()
	RegisterLoss(LossSpec{Kind: "toy-dup", Aliases: []string{"simclr"}, Display: "dup",
		PerAnchor: func(t AnchorTerms, _ LossConfig) (*Node, *Node) { return t.LogU, nil }})
}

// TestLossConfigJSON: checkpoints store the loss with explicit JSON names, and those written
// before the names existed (Go field names) still read.
func TestLossConfigJSON(t *testing.T) {
	cfg := LossConfig{Kind: DCLW, Temperature: 0.07, Reduction: Sum, WeightGrad: true, Params: registry.Values{"sigma": 0.5}}
	data, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"kind":"dclw","temperature":0.07,"sigma":0.5,"reduction":"sum","weight_grad":true}`; string(data) != want {
		t.Errorf("JSON = %s, want %s", data, want)
	}
	for _, give := range []string{string(data),
		`{"Kind":"dclw","Temperature":0.07,"Sigma":0.5,"Reduction":"sum","WeightGrad":true}`} {
		var got LossConfig
		if err := json.Unmarshal([]byte(give), &got); err != nil || !reflect.DeepEqual(got, cfg) {
			t.Errorf("decoding %s = %+v, %v; want %+v", give, got, err, cfg)
		}
	}
}

// TestToyLossIsOneRegistration adds a loss the way the package doc says and evaluates it:
// validation, the graph and `dcl loss`'s evaluator all find it through the registry.
func TestToyLossIsOneRegistration(t *testing.T) {
	const toy LossKind = "toy-half-dcl"
	if _, ok := LookupLoss(toy); !ok {
		RegisterLoss(LossSpec{Kind: toy, Display: "½ DCL",
			PerAnchor: func(t AnchorTerms, _ LossConfig) (*Node, *Node) {
				return MulScalar(Sub(t.LogU, t.Pos), 0.5), nil
			}})
	}
	z1 := [][]float64{{1, 0.2}, {0.1, 1}, {-0.5, 0.3}}
	z2 := [][]float64{{0.9, 0.1}, {0.2, 0.8}, {-0.4, 0.5}}
	be := newTestBackend(t)
	toyRes, err := LossAndGrad(be, z1, z2, LossConfig{Kind: toy, Temperature: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	dcl, err := LossAndGrad(be, z1, z2, LossConfig{Kind: DCL, Temperature: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(toyRes.Loss-dcl.Loss/2) > 1e-12 || math.Abs(toyRes.MeanQ-dcl.MeanQ) > 1e-12 {
		t.Errorf("toy loss %g (q %g), want half of DCL's %g (q %g)", toyRes.Loss, toyRes.MeanQ, dcl.Loss, dcl.MeanQ)
	}
	if k, err := ParseLossKind("TOY-HALF-DCL"); err != nil || k != toy {
		t.Errorf("ParseLossKind = %q, %v", k, err)
	}
}

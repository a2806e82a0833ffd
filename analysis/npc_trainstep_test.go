package analysis_test

import (
	"context"
	"log/slog"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dcl-beam/dcl-beam/analysis"
	"github.com/dcl-beam/dcl-beam/gpu"
	"github.com/dcl-beam/dcl-beam/trainstep"
)

// This test lives outside package analysis so that trainstep may import analysis without an
// import cycle in the tests.

// TestNPCMatchesTrainerLoss checks the NPC statistics against the trainer's own loss code:
// the same q for every anchor, and -log q = InfoNCE - DCL per anchor.
func TestNPCMatchesTrainerLoss(t *testing.T) {
	// The project's CPU backend, as the trainer uses (GoMLX's stock simplego executor races).
	backend, err := gpu.New(context.Background(), gpu.Options{Kind: gpu.CPU, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Finalize()
	r := rand.New(rand.NewPCG(13, 14))
	for _, tau := range []float64{0.07, 0.5} {
		z1, z2 := analysis.RandomPairs(r, 24, 16, 0.7)
		got, err := analysis.NPCMultipliers(z1, z2, tau)
		if err != nil {
			t.Fatal(err)
		}
		infoNCE, err := trainstep.LossAndGrad(backend, z1, z2, trainstep.LossConfig{Kind: trainstep.InfoNCE, Temperature: tau})
		if err != nil {
			t.Fatal(err)
		}
		dcl, err := trainstep.LossAndGrad(backend, z1, z2, trainstep.LossConfig{Kind: trainstep.DCL, Temperature: tau})
		if err != nil {
			t.Fatal(err)
		}
		for a := range got {
			if d := math.Abs(got[a] - infoNCE.Q[a]); d > 1e-10 {
				t.Errorf("τ=%v anchor %d: q = %.15f, trainstep %.15f", tau, a, got[a], infoNCE.Q[a])
			}
			if d := math.Abs(-math.Log(got[a]) - (infoNCE.PerAnchor[a] - dcl.PerAnchor[a])); d > 1e-9 {
				t.Errorf("τ=%v anchor %d: -log q = %.12f, InfoNCE - DCL = %.12f", tau, a, -math.Log(got[a]), infoNCE.PerAnchor[a]-dcl.PerAnchor[a])
			}
		}
	}
}

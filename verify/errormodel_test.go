package verify

import (
	"context"
	"math"
	"path/filepath"
	"testing"

	"github.com/dcl-beam/dcl-beam/internal/testing/encodertest"
	"github.com/dcl-beam/dcl-beam/trainstep"
)

// TestErrorModelReadsTheCheckpoint checks the model's layers against the small CNN's: four
// 3×3 convolutions (K = 9·C_in), each followed by a batch norm whose gain comes from the
// checkpoint's running statistics; the projector's two dense layers only for projections.
func TestErrorModelReadsTheCheckpoint(t *testing.T) {
	ctx := context.Background()
	data := filepath.Join(t.TempDir(), "pairs")
	encodertest.WritePairShards(t, data, 16, 8, 2, 1, 1)
	out := encodertest.TrainEncoder(t, data, trainstep.StepConfig{
		Model:     trainstep.ModelConfig{Name: trainstep.SmallCNN, BaseWidth: 4, Channels: 1},
		Loss:      trainstep.LossConfig{Kind: trainstep.DCL, Temperature: 0.2},
		Optimizer: trainstep.OptimizerConfig{Kind: trainstep.SGDMomentum, Momentum: 0.9, WeightDecay: 5e-4},
		InitSeed:  7,
	}, trainstep.RunConfig{BatchSize: 4, Epochs: 2, BaseLR: 0.5, WarmupEpochs: 0.5, Seed: 11})
	back, err := NewErrorModel(ctx, out, trainstep.Backbone)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range back.Layers {
		t.Logf("%s: K %d, gain %.3f", l.Scope, l.K, l.Gain)
	}
	// Width 4, one channel in: 1, 4, 8 and 16 input channels.
	wantK := []int{9, 36, 72, 144}
	if len(back.Layers) != len(wantK) {
		t.Fatalf("%d backbone layers, want %d", len(back.Layers), len(wantK))
	}
	above := 0
	for i, l := range back.Layers {
		if l.K != wantK[i] || !(l.Gain >= 1) || math.IsInf(l.Gain, 0) {
			t.Errorf("layer %s: K %d, gain %v; want K %d and a batch norm's gain of at least 1", l.Scope, l.K, l.Gain, wantK[i])
		}
		if l.Gain > 1.01 {
			above++
		}
	}
	if above == 0 {
		t.Error("no batch norm's running statistics give a gain above 1")
	}
	proj, err := NewErrorModel(ctx, out, trainstep.Projection)
	if err != nil {
		t.Fatal(err)
	}
	if len(proj.Layers) != len(wantK)+2 {
		t.Fatalf("%d layers with the projector, want %d", len(proj.Layers), len(wantK)+2)
	}
	if fc2 := proj.Layers[len(proj.Layers)-1]; fc2.Gain != 1 {
		t.Errorf("the projector's last layer %s has gain %v: no batch norm follows it", fc2.Scope, fc2.Gain)
	}
	// u·sqrt(K/6) per layer, TF32's operand rounding far above float32's, and the tolerance
	// ToleranceFactor times the two backends' errors in quadrature.
	e32, etf := back.RMS(Float32Arithmetic), back.RMS(TF32Arithmetic)
	if !(e32 > 0x1p-24*math.Sqrt(144.0/6)) || !(e32 < 1e-5) || !(etf > 50*e32) {
		t.Errorf("rms: float32 %g, tf32 %g", e32, etf)
	}
	if got, want := back.Tolerance(Float32Arithmetic, TF32Arithmetic), ToleranceFactor*math.Hypot(e32, etf); math.Abs(got-want) > 1e-15 {
		t.Errorf("tolerance %g, want %g", got, want)
	}
}

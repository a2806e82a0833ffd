package trainstep

import (
	"context"
	"math"
	"testing"
)

// TestErrorModelReadsTheCheckpoint checks the model's layers against the small CNN's: four
// 3×3 convolutions (K = 9·C_in), each followed by a batch norm whose gain comes from the
// checkpoint's running statistics; the projector's two dense layers only for projections.
func TestErrorModelReadsTheCheckpoint(t *testing.T) {
	ctx := context.Background()
	out := t.TempDir()
	pairs := syntheticPairs(5, 16, 3, 8, 8, 1)
	if _, err := Train(ctx, testStepConfig(SmallCNN), testRunConfig(t, out), quietOptions(t, mustMemorySource(t, pairs))); err != nil {
		t.Fatal(err)
	}
	back, err := NewErrorModel(ctx, out, Backbone)
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
	proj, err := NewErrorModel(ctx, out, Projection)
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

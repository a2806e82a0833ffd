package verify

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/dcl-beam/dcl-beam/analysis"
	"github.com/dcl-beam/dcl-beam/internal/testing/encodertest"
	"github.com/dcl-beam/dcl-beam/trainstep"
)

// TestAgreementOfTheCPUAndItsReference runs the agreement check where it runs without a GPU:
// the CPU backend against the CPU with float64 sums. They differ (float32 rounds), by less
// than the tolerance the error model derives, and kNN and the probe stay within their
// bounds. With both sides' embeddings pushed apart by twice the tolerance, the check fails.
func TestAgreementOfTheCPUAndItsReference(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	pairs, train, test := filepath.Join(dir, "pairs"), filepath.Join(dir, "train"), filepath.Join(dir, "test")
	encodertest.WritePairShards(t, pairs, 48, 8, 2, 1, 1)
	encodertest.WritePairShards(t, train, 60, 8, 1, 1, 2)
	encodertest.WritePairShards(t, test, 30, 8, 1, 1, 1)
	run := encodertest.TrainTinyEncoder(t, pairs)
	o := AgreeOptions{
		Checkpoint: run, Train: train, Test: test, Feature: trainstep.Backbone,
		A: "cpu", B: Reference, Precision: trainstep.TF32, // the CPU computes in float32 whatever is asked
		Bank: 40, Queries: 20, Seed: 1, KNN: analysis.KNNConfig{K: 5, Temperature: 0.1},
		Linear: analysis.DefaultLinearConfig().WithEpochs(3), Logger: slog.New(slog.DiscardHandler),
	}
	res, err := Agree(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("tolerance %.3g; modelled rms %.3g (cpu) and %.3g (reference); measured rms %.3g, max %.3g (bank), %.3g (queries)",
		res.Tolerance, res.A.ModelledRMS, res.B.ModelledRMS, res.Bank.RMS, res.Bank.Max, res.Queries.Max)
	if !res.OK || !res.Agree || !res.KNN.Within || !res.Linear.Within {
		t.Errorf("the CPU and its reference: %+v", res)
	}
	if res.A.Arithmetic != Float32Arithmetic || res.B.Arithmetic != Float64RefArithmetic || res.Precision != trainstep.TF32 {
		t.Errorf("arithmetics %+v and %+v at precision %q: want the CPU's float32 and the reference's float64 sums whatever the precision", res.A.Arithmetic, res.B.Arithmetic, res.Precision)
	}
	if res.Bank.Rows != 40 || res.Queries.Rows != 20 || !(res.Bank.Max > 0) {
		t.Errorf("compared %d and %d rows, largest difference %v: want 40, 20 and float32's rounding showing", res.Bank.Rows, res.Queries.Rows, res.Bank.Max)
	}
	// The model is not vacuous: the difference measured is within a factor of the modelled.
	if want := res.A.ModelledRMS; res.Bank.RMS > 3*want || res.Bank.RMS < want/30 {
		t.Errorf("measured rms difference %.3g, modelled %.3g: the error model is off", res.Bank.RMS, want)
	}

	agreeTestHook = func(side int, bank, queries *analysis.LabeledVectors) {
		if side != 1 {
			return
		}
		for _, v := range []*analysis.LabeledVectors{bank, queries} {
			for i := range v.Vectors.Data {
				v.Vectors.Data[i] *= float32(1 + 2*res.Tolerance)
			}
		}
	}
	defer func() { agreeTestHook = nil }()
	bad, err := Agree(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if bad.Agree || bad.OK || bad.Bank.Max < 1.5*res.Tolerance {
		t.Errorf("embeddings apart by twice the tolerance: agree %v, ok %v, max %.3g (tolerance %.3g)", bad.Agree, bad.OK, bad.Bank.Max, bad.Tolerance)
	}
}

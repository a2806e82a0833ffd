package gpucheck

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/trainstep"
)

// TestMain lets the test binary serve as the check's child processes: Run re-executes it with
// PhaseEnv set, as it re-executes dcl on a GPU machine.
func TestMain(m *testing.M) {
	if IsPhase() {
		if err := RunPhase(context.Background()); err != nil {
			fmt.Fprintln(os.Stderr, "phase:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fashionDir is Fashion-MNIST's folder when its files are there (the feeding test then reads
// real images), else "" (random images).
func fashionDir() string {
	dir := os.Getenv("DCL_FASHION_MNIST")
	if dir == "" {
		dir = "/usr/share/datasets/fashion-mnist"
	}
	if _, err := os.Stat(filepath.Join(dir, "train-images-idx3-ubyte.gz")); err != nil {
		return ""
	}
	return dir
}

func report(loss float64, grads ...trainstep.VariableGradient) trainstep.GradientReport {
	return trainstep.GradientReport{Loss: loss, Gradients: grads}
}

func TestCompare(t *testing.T) {
	g := trainstep.VariableGradient{Name: "/model/a", Size: 100, Sum: 0.5, SumSquares: 4, MaxAbs: 1}
	with := func(f func(*trainstep.VariableGradient)) trainstep.VariableGradient {
		c := g
		f(&c)
		return c
	}
	cases := []struct {
		name string
		got  trainstep.GradientReport
		fail string // substring of the failures, "" for a pass
	}{
		{"identical", report(5, g), ""},
		{"rounding-sized differences", report(5*(1+1e-5), with(func(v *trainstep.VariableGradient) {
			v.SumSquares *= 1 + 2e-4
			v.MaxAbs *= 1 - 1e-4
			v.Sum += 1e-3 * math.Sqrt(4*100) / 2
		})), ""},
		{"loss off", report(5*(1+1e-3), g), "loss"},
		{"norm off", report(5, with(func(v *trainstep.VariableGradient) { v.SumSquares *= 1.01 })), "sum of squares"},
		{"largest element off", report(5, with(func(v *trainstep.VariableGradient) { v.MaxAbs *= 1.01 })), "largest element"},
		{"sum off", report(5, with(func(v *trainstep.VariableGradient) { v.Sum += 0.1 })), "sum 0.6"},
		{"NaN", report(5, with(func(v *trainstep.VariableGradient) { v.SumSquares = math.NaN() })), "sum of squares"},
		{"NaN loss", report(math.NaN(), g), "loss"},
		{"other variables", report(5, with(func(v *trainstep.VariableGradient) { v.Name = "/model/b" })), "gradient 0 is /model/b"},
		{"missing variable", report(5), "0 gradients vs 1"},
	}
	for _, c := range cases {
		r := Compare(report(5, g), c.got)
		failures := strings.Join(r.Failures, "\n")
		if c.fail == "" && !r.Pass {
			t.Errorf("%s: failed: %s", c.name, failures)
		}
		if c.fail != "" && (r.Pass || !strings.Contains(failures, c.fail)) {
			t.Errorf("%s: pass %v, failures %q; want one with %q", c.name, r.Pass, failures, c.fail)
		}
	}
}

// TestQuickOnCPU runs the whole check, small, on the CPU backend, child processes included:
// what runs on a GPU machine must not rot where there is none.
func TestQuickOnCPU(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	torch := filepath.Join(out, "torch.json")
	tj, _ := json.Marshal(TorchResult{Torch: "2.11.0", GPU: "none", Rows: []TorchRow{
		{Model: trainstep.ResNet18CIFAR, Size: 32, Batch: 4, Precision: "float32", TF32: true, ImagesPerSec: 100, MaxReservedMiB: 10},
		{Model: trainstep.ResNet50, Size: 64, Batch: 2, Precision: "bf16", Error: "no CUDA"},
	}})
	if err := os.WriteFile(torch, tj, 0o644); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	r, err := Run(context.Background(), Config{Backend: "cpu", Quick: true, Out: out, Torch: torch, Self: []string{self},
		Data: fashionDir(), Commands: []string{"go test"}, Log: &log})
	if r == nil {
		t.Fatalf("no result: %v\n%s", err, log.String())
	}
	t.Logf("log:\n%s", log.String())
	// bf16 on the CPU backend may not be implemented; every other part must work.
	for _, e := range r.Errors {
		if !strings.Contains(e, "bf16") && !strings.Contains(e, "pytorch") {
			t.Errorf("unexpected problem: %s", e)
		}
	}
	if a := r.Agreement; a == nil || !a.Pass || a.Variables < 20 || a.Reference != "cpu, 1 thread" {
		t.Errorf("agreement %+v", a)
	}
	if len(r.Speed) != 4 {
		t.Fatalf("%d speed rows, want 4", len(r.Speed))
	}
	for _, s := range r.Speed {
		if s.Precision == "float32" && (s.ImagesPerSec <= 0 || s.PeakMemoryMiB <= 0 || len(s.StepMs) != 2) {
			t.Errorf("speed row %+v", s)
		}
	}
	if len(r.Feeding) != 2 {
		t.Fatalf("%d feeding rows, want 2", len(r.Feeding))
	}
	for _, f := range r.Feeding {
		if f.Error != "" || f.ImagesPerSec <= 0 || f.Images != int64(2*(f.Pairs/f.Batch)*f.Batch) || f.Ratio <= 0 {
			t.Errorf("feeding row %+v", f)
		}
	}
	md, err := os.ReadFile(filepath.Join(out, "gpu-check.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Agreement", "result: **agree**", "| resnet18-cifar | 32 | 4 | float32/TF32 |", "100 |", "## Feeding", "quick mode"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("table lacks %q:\n%s", want, md)
		}
	}
	var back Result
	raw, err := os.ReadFile(filepath.Join(out, "gpu-check.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &back); err != nil || back.Agreement == nil || len(back.Speed) != 4 {
		t.Fatalf("gpu-check.json does not read back: %v", err)
	}
	t.Logf("\n%s", md)
}

package verify

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/gpu"
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
	// Floors of 1e-3 in every measure (far above the a priori bound of this shape), TF32's
	// ten times that: a float32 row tolerates 4e-3, a tf32 row 4e-2.
	fl := Floors{Reference: report(5, g), Shape: ProductShape{Depth: 3, FanIn: 16},
		Float32: Spread{Loss: 1e-3, SumSquares: 1e-3, MaxAbs: 1e-3, Sum: 1e-3},
		TF32:    Spread{Loss: 1e-2, SumSquares: 1e-2, MaxAbs: 1e-2, Sum: 1e-2}}
	cases := []struct {
		name      string
		precision trainstep.Precision
		got       trainstep.GradientReport
		fail      string // substring of the failures, "" for a pass
	}{
		{"identical", trainstep.Float32, report(5, g), ""},
		{"within float32's headroom", trainstep.Float32, report(5*(1+3e-3), with(func(v *trainstep.VariableGradient) {
			v.SumSquares *= 1 + 3e-3
			v.MaxAbs *= 1 - 3e-3
			v.Sum += 3e-3 * math.Sqrt(4*100)
		})), ""},
		{"loss off", trainstep.Float32, report(5*(1+1e-2), g), "loss"},
		{"norm off", trainstep.Float32, report(5, with(func(v *trainstep.VariableGradient) { v.SumSquares *= 1.01 })), "sums of squares"},
		{"largest element off", trainstep.Float32, report(5, with(func(v *trainstep.VariableGradient) { v.MaxAbs *= 1.01 })), "largest elements"},
		{"sum off", trainstep.Float32, report(5, with(func(v *trainstep.VariableGradient) { v.Sum += 0.1 })), "sums, RMS"},
		{"TF32-sized, float32 row", trainstep.Float32, report(5, with(func(v *trainstep.VariableGradient) { v.SumSquares *= 1.02 })), "sums of squares"},
		{"TF32-sized, tf32 row", trainstep.TF32, report(5, with(func(v *trainstep.VariableGradient) { v.SumSquares *= 1.02 })), ""},
		{"beyond TF32, tf32 row", trainstep.TF32, report(5, with(func(v *trainstep.VariableGradient) { v.SumSquares *= 1.1 })), "sums of squares"},
		{"NaN", trainstep.TF32, report(5, with(func(v *trainstep.VariableGradient) { v.SumSquares = math.NaN() })), "NaN"},
		{"NaN loss", trainstep.TF32, report(math.NaN(), g), "loss"},
		{"other variables", trainstep.Float32, report(5, with(func(v *trainstep.VariableGradient) { v.Name = "/model/b" })), "gradient 0 is /model/b"},
		{"missing variable", trainstep.Float32, report(5), "0 gradients vs 1"},
	}
	for _, c := range cases {
		r := Compare(fl, c.precision, c.got)
		failures := strings.Join(r.Failures, "\n")
		if c.fail == "" && !r.Pass {
			t.Errorf("%s: failed: %s", c.name, failures)
		}
		if c.fail != "" && (r.Pass || !strings.Contains(failures, c.fail)) {
			t.Errorf("%s: pass %v, failures %q; want one with %q", c.name, r.Pass, failures, c.fail)
		}
	}
}

// TestAprioriFloorWhereFloorsVanish: with no Winograd (small models) the CPU's float32
// floor is 0; the tolerance is then the a priori float32 bound, not 0.
func TestAprioriFloorWhereFloorsVanish(t *testing.T) {
	g := trainstep.VariableGradient{Name: "/model/a", Size: 100, Sum: 0.5, SumSquares: 4, MaxAbs: 1}
	shape := ProductShape{Depth: 20, FanIn: 4608}
	fl := Floors{Reference: report(5, g), Shape: shape}
	ap := shape.AprioriFloor(trainstep.Float32)
	// resnet18-cifar's shape: (2 + √4608)·2⁻²⁴ per layer, √40 layers for gradients.
	if want := math.Sqrt(40) * (2 + math.Sqrt(4608)) * math.Exp2(-24); math.Abs(ap.MaxAbs-want) > 1e-12 || ap.SumSquares != 2*ap.MaxAbs {
		t.Fatalf("a priori floor %+v, want max-abs %.3g and twice that for sums of squares", ap, want)
	}
	near := g
	near.SumSquares *= 1 + 2*ap.SumSquares
	if r := Compare(fl, trainstep.Float32, report(5, near)); !r.Pass {
		t.Errorf("a difference of twice the a priori bound fails: %v", r.Failures)
	}
	far := g
	far.SumSquares *= 1 + 10*ap.SumSquares
	if r := Compare(fl, trainstep.Float32, report(5, far)); r.Pass {
		t.Errorf("a difference of ten times the a priori bound passes")
	}
}

// TestTF32CannotPassTheFloat32Row computes the floors of a real step on the CPU (a
// resnet18-cifar 32 channels wide, so that Winograd applies) and checks the verdicts the
// derivation promises: a float32 computation by other algorithms agrees, TF32 fails the
// float32 row and passes its own.
func TestTF32CannotPassTheFloat32Row(t *testing.T) {
	if testing.Short() {
		t.Skip("computes five training steps' gradients")
	}
	ctx := context.Background()
	p := Phase{Model: trainstep.ResNet18CIFAR, Width: 32, Size: 32, Batch: 16, Channels: 3, Precision: "float32", Seed: 3}
	fl, err := floors(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("float32 floor %+v\nTF32 floor %+v\na priori float32 %+v, tf32 %+v", fl.Float32, fl.TF32, fl.Shape.AprioriFloor(trainstep.Float32), fl.Shape.AprioriFloor(trainstep.TF32))
	if r := fl.TF32.ratio(fl.Float32.scaled(1, fl.Shape.AprioriFloor(trainstep.Float32))); r < 2*Headroom {
		t.Errorf("TF32's floor is only %.1f× float32's: the rows would not tell them apart", r)
	}
	tf32, _, err := p.cpuGradients(ctx, gpu.Options{Kind: gpu.CPU, EmulateTF32: true})
	if err != nil {
		t.Fatal(err)
	}
	if r := Compare(fl, trainstep.Float32, tf32); r.Pass {
		t.Errorf("TF32 (with Winograd) passes the float32 row: spread %+v, tolerances %+v", r.Spread, r.Tolerances)
	}
	if r := Compare(fl, trainstep.TF32, tf32); !r.Pass {
		t.Errorf("TF32 (with Winograd) fails the tf32 row: %v", r.Failures)
	}
	f32, _, err := p.cpuGradients(ctx, gpu.Options{Kind: gpu.CPU, Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r := Compare(fl, trainstep.Float32, f32); !r.Pass {
		t.Errorf("float32 on one thread fails the float32 row: %v", r.Failures)
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
		{Model: trainstep.ResNet18CIFAR, Size: 32, Batch: 4, Precision: "tf32", TF32: true, ImagesPerSec: 100, MaxReservedMiB: 10},
		{Model: trainstep.ResNet18CIFAR, Size: 32, Batch: 4, Precision: "tf32", TF32: true, Compiled: true, ImagesPerSec: 200, MaxReservedMiB: 10},
		{Model: trainstep.ResNet50, Size: 64, Batch: 2, Precision: "bf16", Error: "no CUDA"},
	}})
	if err := os.WriteFile(torch, tj, 0o644); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	r, err := Check(context.Background(), CheckConfig{Backend: "cpu", Quick: true, Out: out, Torch: torch, Self: []string{self},
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
	for _, a := range []*AgreementResult{r.Agreement, r.AgreementTF32} {
		if a == nil || !a.Pass || a.Variables < 20 || a.Reference != "cpu, direct convolutions, 1 thread" {
			t.Errorf("agreement %+v", a)
		}
	}
	if a := r.AgreementTF32; a == nil || a.Precision != "tf32" || a.Spread.SumSquares == 0 {
		t.Errorf("the tf32 row on the CPU did not emulate TF32: %+v", a)
	}
	if len(r.Speed) != 5 {
		t.Fatalf("%d speed rows, want 5", len(r.Speed))
	}
	if l := r.Loop; l == nil || l.Error != "" || l.ImagesPerSec <= 0 || l.Ratio <= 0 || l.Steps != 24 {
		t.Errorf("loop %+v", l)
	}
	for _, s := range r.Speed {
		if s.Precision != "bf16" && (s.ImagesPerSec <= 0 || s.PipelinedImagesPerSec <= 0 || s.PeakMemoryMiB <= 0 || len(s.StepMs) != 2 || s.Allocator != nil) {
			t.Errorf("speed row %+v", s)
		}
	}
	if len(r.Packing) != 1 {
		t.Fatalf("%d packing rows, want 1", len(r.Packing))
	}
	if s := r.Packing[0]; s.Error != "" || s.Runs != 2 || s.AloneImagesPerSec <= 0 || s.PackedImagesPerSec <= 0 || s.Ratio <= 0 || s.PeakMemoryMiB <= 0 {
		t.Errorf("packing row %+v", s)
	}
	if len(r.Feeding) != 4 {
		t.Fatalf("%d feeding rows, want 4 (stored views and base shards, 32 px and JPEG)", len(r.Feeding))
	}
	online := 0
	for _, f := range r.Feeding {
		if f.Error != "" || f.ImagesPerSec <= 0 || f.ImagesPerCPUSecond <= 0 || f.Images != int64(2*(f.Pairs/f.Batch)*f.Batch) || f.Ratio <= 0 {
			t.Errorf("feeding row %+v", f)
		}
		if f.Online {
			online++
		}
	}
	if online != 2 {
		t.Errorf("%d feeding rows read base shards, want 2", online)
	}
	md, err := os.ReadFile(filepath.Join(out, "gpu-check.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Agreement (float32)", "## Agreement (tf32)", "result: **AGREE**", "| resnet18-cifar | 32 | 4 | tf32 |", "| 100 | ", "| 200 | ", "## Packed runs", "| resnet18-cifar | 32 | 4 | tf32 | 2 |", "## The step as dcl train runs it", "## Feeding", "(base, views on the fly)", "quick mode"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("table lacks %q:\n%s", want, md)
		}
	}
	var back CheckResult
	raw, err := os.ReadFile(filepath.Join(out, "gpu-check.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &back); err != nil || back.Agreement == nil || back.AgreementTF32 == nil || back.Loop == nil || len(back.Speed) != 5 || len(back.Packing) != 1 {
		t.Fatalf("gpu-check.json does not read back: %v", err)
	}
	t.Logf("\n%s", md)
}

// TestSection renders the summary from a result and, without one, says no run is committed
// and how to make one; an unknown section is an error.
func TestSection(t *testing.T) {
	r := &CheckResult{Host: Host{GPU: "NVIDIA H200", GPUMiB: 143771, Driver: "580.1", CPUs: 16}, Started: "2026-11-26T00:00:00Z",
		Agreement: &AgreementResult{Precision: "float32", Pass: true, Variables: 65, FloorRatio: 1.2},
		Speed:     []SpeedResult{{Model: "resnet18-cifar", Size: 32, Batch: 32, Precision: "tf32", ImagesPerSec: 1000}}}
	got, err := Section(SummarySection, r)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Measured on NVIDIA H200", "agreement, float32: **AGREE**", "| resnet18-cifar | 32 | 32 | tf32 | 1000 |"} {
		if !strings.Contains(got, want) {
			t.Errorf("the summary lacks %q:\n%s", want, got)
		}
	}
	tables, err := Section(TablesSection, r)
	if err != nil || strings.Contains(tables, "# dcl gpu-check") || strings.Contains(tables, "\n## ") {
		t.Errorf("the tables keep the report's own headings (%v):\n%s", err, tables)
	}
	none, err := Section(SummarySection, nil)
	if err != nil || !strings.Contains(none, "No GPU run of this check is committed yet") || !strings.Contains(none, "make docs") {
		t.Errorf("without a result: %v\n%s", err, none)
	}
	if _, err := Section("other", r); err == nil {
		t.Error("an unknown section was accepted")
	}
}

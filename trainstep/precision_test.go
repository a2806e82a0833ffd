package trainstep

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/gomlx/compute/dtypes"
	"github.com/gomlx/gomlx/core/tensors"
)

func TestParsePrecision(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Precision
		ok   bool
	}{
		{"", Float32, true}, {"float32", Float32, true}, {"FP32", Float32, true}, {"f32", Float32, true},
		{"bf16", BFloat16, true}, {"BFloat16", BFloat16, true}, {" bf16 ", BFloat16, true},
		{"tf32", TF32, true}, {"TF32", TF32, true}, {"tensorfloat32", TF32, true},
		{"fp16", "", false}, {"float64", "", false}, {"int8", "", false},
	} {
		got, err := ParsePrecision(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParsePrecision(%q) = %q, %v; want %q (ok %v)", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestStepConfigValidatesPrecision(t *testing.T) {
	for _, tc := range []struct {
		precision Precision
		ok        bool
	}{{"", true}, {Float32, true}, {TF32, true}, {BFloat16, true}, {"fp16", false}, {"BF16", false}} {
		cfg := testStepConfig(SmallCNN)
		cfg.Precision = tc.precision
		err := cfg.Validate()
		if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), "precision")) {
			t.Errorf("Validate with precision %q: %v, want ok %v", tc.precision, err, tc.ok)
		}
		if s, err := NewStep(newTestBackend(t), cfg, 8, 8); (err == nil) != tc.ok {
			t.Errorf("NewStep with precision %q: %v, want ok %v", tc.precision, err, tc.ok)
		} else if err == nil {
			if got := s.Config().Precision; got != tc.precision.orDefault() {
				t.Errorf("NewStep with precision %q: config says %q", tc.precision, got)
			}
			s.Finalize()
		}
	}
}

// storeBytes copies every variable of s (weights, running averages, momentum, learning rate).
func storeBytes(t *testing.T, s *Step) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for v := range s.Store().IterVariables() {
		if err := v.MustValue().ConstBytes(func(b []byte) { out[v.Path()] = slices.Clone(b) }); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestGradientsChangeNothing: Gradients updates no variable (weights, batch-norm running
// averages, momentum), so a step after it gives exactly the loss and variables of a step
// without it; and it reports one entry per trainable model variable, sorted by name.
func TestGradientsChangeNothing(t *testing.T) {
	backend := newTestBackend(t)
	for _, precision := range []Precision{Float32, BFloat16} {
		t.Run(string(precision), func(t *testing.T) {
			cfg := testStepConfig(SmallCNN)
			cfg.Precision = precision
			build := func() *Step {
				s, err := NewStep(backend, cfg, 8, 8)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(s.Finalize)
				// One step first, so the momentum buffers and running averages are not zero.
				if _, err := s.Run(RandomBatch(1, 4, 8, 8, 1), 0.1); err != nil {
					t.Fatal(err)
				}
				return s
			}
			probed, plain := build(), build()
			before := storeBytes(t, probed)
			rep, err := probed.Gradients(RandomBatch(2, 4, 8, 8, 1))
			if err != nil {
				t.Fatal(err)
			}
			sameBytes(t, before, storeBytes(t, probed))
			var names []string
			for v := range probed.Store().IterVariables() {
				if v.Trainable && isModelScope(v.Scope()) {
					names = append(names, v.Path())
				}
			}
			slices.Sort(names)
			var got []string
			for _, g := range rep.Gradients {
				got = append(got, g.Name)
				if g.Size < 1 || !(g.SumSquares > 0) || math.IsInf(g.SumSquares, 0) || g.MaxAbs*g.MaxAbs > g.SumSquares*(1+1e-12) {
					t.Errorf("gradient of %s: %+v", g.Name, g)
				}
			}
			if !slices.Equal(got, names) {
				t.Errorf("gradients of %v, want the trainable model variables %v", got, names)
			}
			if math.IsNaN(rep.Loss) || !(rep.MeanQ > 0 && rep.MeanQ < 1) {
				t.Errorf("report %+v", rep)
			}
			next := RandomBatch(3, 4, 8, 8, 1)
			a, err := probed.Run(next, 0.1)
			if err != nil {
				t.Fatal(err)
			}
			b, err := plain.Run(next, 0.1)
			if err != nil {
				t.Fatal(err)
			}
			if a != b {
				t.Errorf("step after Gradients %+v, without %+v", a, b)
			}
			sameBytes(t, storeBytes(t, plain), storeBytes(t, probed))
		})
	}
}

// TestGradientsMatchFiniteDifferences: on small-cnn in float32, the gradient checksums give
// the derivative of the loss along directions that move every value of variable v by the
// same amount, c_v·ε/size_v (random c_v; dividing by the size lets every kind of variable,
// kernels as well as batch-norm offsets, contribute alike): Σ_v c_v·sum_v/size_v. It is
// checked against central differences of Gradients' own loss (training mode, batch
// statistics), which also shows that Gradients reads the variables' current values.
//
// The tolerance is 5% + 1e-3. The loss is piecewise smooth (ReLU kinks): at this size,
// differences over ε ≥ 1e-2 cross enough kinks to be off by 5–20%, and below 1e-4 float32
// rounding of the loss (~3e-7) dominates; at ε = 1e-3 seeds 1–6 were within 4%.
func TestGradientsMatchFiniteDifferences(t *testing.T) {
	s, err := NewStep(newTestBackend(t), testStepConfig(SmallCNN), 8, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Finalize()
	const eps = 1e-3
	for seed := uint64(1); seed <= 3; seed++ {
		b := RandomBatch(seed, 6, 8, 8, 1)
		rep, err := s.Gradients(b)
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(seed, 9))
		c := make([]float64, len(rep.Gradients))
		orig := make([][]float32, len(rep.Gradients))
		var want float64
		for i, g := range rep.Gradients {
			c[i] = r.NormFloat64() / float64(g.Size)
			want += c[i] * g.Sum
			orig[i] = tensors.MustCopyFlatData[float32](s.Store().GetVariable(g.Name).MustValue())
		}
		// lossAt sets every variable to its original value plus d·c_v and returns the loss.
		lossAt := func(d float64) float64 {
			for i, g := range rep.Gradients {
				v := s.Store().GetVariable(g.Name)
				moved := make([]float32, len(orig[i]))
				for j := range moved {
					moved[j] = orig[i][j] + float32(d*c[i])
				}
				if err := v.SetValue(tensors.FromFlatDataAndDimensions(moved, v.Shape().Dimensions...)); err != nil {
					t.Fatal(err)
				}
			}
			r, err := s.Gradients(b)
			if err != nil {
				t.Fatal(err)
			}
			return r.Loss
		}
		fd := (lossAt(eps) - lossAt(-eps)) / (2 * eps)
		if tol := 0.05*math.Abs(want) + 1e-3; math.Abs(fd-want) > tol {
			t.Errorf("seed %d: finite difference %.6g, from the gradient checksums %.6g (tolerance %.2g)", seed, fd, want, tol)
		}
		if back := lossAt(0); back != rep.Loss {
			t.Errorf("seed %d: loss %v with the variables restored, %v before", seed, back, rep.Loss)
		}
	}
}

// pairBatch puts pairs (one size) into one Batch.
func pairBatch(pairs []Pair) *Batch {
	first := pairs[0].View1
	b := &Batch{N: len(pairs), H: first.H, W: first.W, C: first.C}
	for _, p := range pairs {
		b.View1 = append(b.View1, p.View1.Pix...)
		b.View2 = append(b.View2, p.View2.Pix...)
	}
	return b
}

// TestBFloat16TracksFloat32: small-cnn on 8×8 images, from the same seed and on the same
// batch of view pairs: in bf16 the first loss is within 3% of float32's (they were 1%
// apart), seven steps reduce it by the same amount ±20% (3%), the variables stay float32, and
// the gradient norms of the first step are within 10% of float32's (5%: a bfloat16 value
// carries 8 significant bits).
func TestBFloat16TracksFloat32(t *testing.T) {
	backend := newTestBackend(t)
	const steps = 8
	batch := pairBatch(syntheticPairs(3, 8, 4, 8, 8, 1))
	losses := map[Precision][]float64{}
	reports := map[Precision]GradientReport{}
	for _, precision := range []Precision{Float32, BFloat16} {
		cfg := testStepConfig(SmallCNN)
		cfg.Precision = precision
		s, err := NewStep(backend, cfg, 8, 8)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Finalize()
		if reports[precision], err = s.Gradients(batch); err != nil {
			t.Fatal(err)
		}
		for range steps {
			res, err := s.Run(batch, 0.05)
			if err != nil {
				t.Fatal(err)
			}
			if math.IsNaN(res.Loss) || math.IsInf(res.Loss, 0) {
				t.Fatalf("%s: loss %v", precision, res.Loss)
			}
			losses[precision] = append(losses[precision], res.Loss)
		}
		for v := range s.Store().IterVariables() {
			if v.DType() != dtypes.Float32 {
				t.Errorf("%s: variable %s is %s, want float32 master weights", precision, v.Path(), v.DType())
			}
		}
	}
	f32, bf16 := losses[Float32], losses[BFloat16]
	t.Logf("float32 losses %.5f", f32)
	t.Logf("bf16 losses    %.5f", bf16)
	if d := math.Abs(bf16[0]-f32[0]) / math.Abs(f32[0]); d > 0.03 {
		t.Errorf("first loss %v in bf16, %v in float32: %.1f%% apart", bf16[0], f32[0], 100*d)
	}
	drop32, drop16 := f32[0]-f32[steps-1], bf16[0]-bf16[steps-1]
	if !(drop32 > 0) || math.Abs(drop16-drop32) > 0.2*drop32 {
		t.Errorf("loss drop over %d steps: %v in bf16, %v in float32", steps-1, drop16, drop32)
	}
	g32, g16 := reports[Float32], reports[BFloat16]
	if math.Abs(g16.Loss-g32.Loss) > 0.03*math.Abs(g32.Loss) {
		t.Errorf("Gradients loss %v in bf16, %v in float32", g16.Loss, g32.Loss)
	}
	for i := range g32.Gradients {
		a, b := g32.Gradients[i], g16.Gradients[i]
		if a.Name != b.Name {
			t.Fatalf("gradient %d is %s in float32 and %s in bf16", i, a.Name, b.Name)
		}
		if r := math.Sqrt(b.SumSquares / a.SumSquares); math.Abs(r-1) > 0.1 {
			t.Errorf("%s: gradient norm %.4g in bf16, %.4g in float32", a.Name, math.Sqrt(b.SumSquares), math.Sqrt(a.SumSquares))
		}
	}
}

// TestResumeKeepsPrecision: a bf16 run stopped part-way resumes in bf16 when no precision is
// given, ends bit-identical to the uninterrupted bf16 run, and refuses another precision.
func TestResumeKeepsPrecision(t *testing.T) {
	src := mustMemorySource(t, syntheticPairs(8, 12, 3, 8, 8, 1))
	ctx := context.Background()
	cfg := testStepConfig(SmallCNN)
	cfg.Precision = BFloat16
	whole, out, run := stoppedRun(t, cfg, src)
	opts := quietOptions(t, src)
	opts.Resume = out
	other := cfg
	other.Precision = Float32
	var setup *SetupError
	if err := CheckRun(ctx, other, run, src.Info(), out); !errors.As(err, &setup) || !strings.Contains(err.Error(), "precision bf16") {
		t.Errorf("resuming a bf16 run in float32: %v, want a setup error naming the precision", err)
	}
	unset := cfg
	unset.Precision = ""
	// The backend is built for the precision the run will have: the checkpoint's.
	if p, err := RunPrecision(ctx, unset, out); err != nil || p != BFloat16 {
		t.Errorf("RunPrecision resuming a bf16 run with none given = %q, %v; want bf16", p, err)
	}
	if p, err := RunPrecision(ctx, unset, ""); err != nil || p != Float32 {
		t.Errorf("RunPrecision of a fresh run with none given = %q, %v; want float32", p, err)
	}
	resumed, err := Train(ctx, unset, run, opts)
	if err != nil {
		t.Fatal(err)
	}
	h, err := ReadCheckpointHeader(ctx, resumed.Checkpoint)
	if err != nil {
		t.Fatal(err)
	}
	if h.Step.Precision != BFloat16 {
		t.Errorf("resumed run's checkpoint has precision %q, want bf16", h.Step.Precision)
	}
	sameBytes(t, variableBytes(t, whole.Checkpoint), variableBytes(t, resumed.Checkpoint))
}

// TestTF32IsFloat32OnTheCPU: the CPU backend has no TF32; a tf32 run computes exactly what a
// float32 run does, and its checkpoint says tf32 (resuming it keeps tf32).
func TestTF32IsFloat32OnTheCPU(t *testing.T) {
	losses := map[Precision][]float64{}
	for _, precision := range []Precision{Float32, TF32} {
		cfg := testStepConfig(SmallCNN)
		cfg.Model.BaseWidth, cfg.Model.Channels, cfg.Model.ProjectionDim = 4, 1, 8
		cfg.Precision = precision
		s, err := NewStep(newTestBackend(t), cfg, 8, 8)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			res, err := s.Run(RandomBatch(uint64(i), 4, 8, 8, 1), 0.1)
			if err != nil {
				t.Fatal(err)
			}
			losses[precision] = append(losses[precision], res.Loss)
		}
		if got := s.Config().Precision; got != precision {
			t.Errorf("step at %s says %s", precision, got)
		}
		s.Finalize()
	}
	if !slices.Equal(losses[Float32], losses[TF32]) {
		t.Errorf("tf32 losses %v differ from float32's %v on the CPU", losses[TF32], losses[Float32])
	}
	if !TF32.AllowsTF32() || !BFloat16.AllowsTF32() || Float32.AllowsTF32() {
		t.Error("only float32 keeps TF32 off")
	}
}

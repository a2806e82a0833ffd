//go:build cuda

package trainstep

import (
	"regexp"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/gpu"
	"github.com/dcl-beam/dcl-beam/gpu/cuda"
	"github.com/dcl-beam/dcl-beam/internal/testing/xlacputest"
)

// onXLACPU makes newTestBackend return xla-cpu backends until t ends, so that a test written
// for the CPU backend runs the GPU's code path (go-xla, XLA's compiler, PJRT) as it is.
func onXLACPU(t *testing.T) {
	t.Helper()
	xlacputest.Require(t)
	testBackendKind = gpu.XLACPU
	t.Cleanup(func() { testBackendKind = gpu.CPU })
}

// TestXLACPUResumeIsBitIdentical: on XLA, a run stopped by max-steps or cancelled and resumed
// from its checkpoint ends with the uninterrupted run's weights, bit for bit.
func TestXLACPUResumeIsBitIdentical(t *testing.T) {
	onXLACPU(t)
	t.Run("mlp", TestResumeIsBitIdentical)
	t.Run("small-cnn", TestSmallCNNResumeIsBitIdentical)
}

// TestXLACPULaunchedStepsMatchRun: Step.Launch and PendingStep.Wait, the pipelined order of the
// training loop, give the results of steps run one at a time on XLA too.
func TestXLACPULaunchedStepsMatchRun(t *testing.T) {
	onXLACPU(t)
	TestLaunchedStepsMatchRun(t)
}

// TestXLACPUGradientsChangeNothing: Gradients, whose outputs have the variables' shapes and so
// may be aliased to them, leaves every variable as it was: PJRT copies a parameter that is not
// donated before XLA writes into it.
func TestXLACPUGradientsChangeNothing(t *testing.T) {
	onXLACPU(t)
	TestGradientsChangeNothing(t)
}

// trainProgram builds a small-cnn step at prec on xla-cpu, runs it once, and returns the
// compiled training program and the step.
func trainProgram(t *testing.T, prec Precision) (cuda.Program, *Step) {
	t.Helper()
	be := xlacputest.Backend(t, gpu.Options{TF32: prec.AllowsTF32()})
	log, err := cuda.RecordPrograms(be)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testStepConfig(SmallCNN)
	cfg.Model.Channels, cfg.Precision = 3, prec
	s, err := NewStep(be, cfg, 8, 8)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Finalize)
	if _, err := s.Run(RandomBatch(1, 4, 8, 8, 3), 0.1); err != nil {
		t.Fatal(err)
	}
	// The training program is the one that compiled with a momentum update: the largest.
	var train cuda.Program
	for _, p := range log.Programs() {
		if p.Err != nil {
			t.Fatalf("program %s: %v", p.Name, p.Err)
		}
		if len(p.StableHLO) > len(train.StableHLO) {
			train = p
		}
	}
	if train.StableHLO == "" {
		t.Fatal("no program was compiled")
	}
	return train, s
}

// productOp is one convolution or dot_general of a StableHLO text: its precision config and
// its operand and result types.
type productOp struct {
	kind, precision, types string
}

var productRE = regexp.MustCompile(`"stablehlo\.(convolution|dot_general)"\(([^\n]|\n)*?\} : (\([^)]*\) -> tensor<[^>]*>)`)
var precisionRE = regexp.MustCompile(`precision_config = \[#stablehlo<precision (\w+)>, #stablehlo<precision (\w+)>\]`)

func productOps(t *testing.T, text string) []productOp {
	t.Helper()
	var ops []productOp
	for _, m := range productRE.FindAllStringSubmatch(text, -1) {
		op := productOp{kind: m[1], types: m[3], precision: "none"}
		if p := precisionRE.FindStringSubmatch(m[0]); p != nil {
			op.precision = p[1]
			if p[1] != p[2] {
				op.precision = p[1] + "/" + p[2]
			}
		}
		if strings.Contains(m[0], "algorithm") {
			op.precision += "+algorithm"
		}
		ops = append(ops, op)
	}
	if len(ops) == 0 {
		t.Fatal("no convolution or dot_general in the program")
	}
	return ops
}

// TestXLACPUPrecisionInStableHLO reads what each precision asks XLA for in the program
// compiled on xla-cpu, the program a GPU runs: float32 gives every convolution and matrix
// product precision HIGHEST (no TF32 tensor cores), in float32; tf32 leaves them at DEFAULT,
// which lets CUDA use TF32; bf16 computes the model's convolutions and matrix products in
// bfloat16 and keeps the variables float32.
func TestXLACPUPrecisionInStableHLO(t *testing.T) {
	for _, tc := range []struct {
		prec Precision
		want func(productOp) bool
		says string
	}{
		{Float32, func(o productOp) bool { return o.precision == "HIGHEST" && !strings.Contains(o.types, "bf16") },
			"precision HIGHEST, float32 operands"},
		{TF32, func(o productOp) bool { return o.precision == "DEFAULT" && !strings.Contains(o.types, "bf16") },
			"precision DEFAULT (TF32 allowed), float32 operands"},
		{BFloat16, func(o productOp) bool {
			return o.precision == "DEFAULT" && (o.kind == "dot_general" || strings.Count(o.types, "bf16") == 3)
		}, "precision DEFAULT; convolutions bfloat16 in and out"},
	} {
		t.Run(string(tc.prec), func(t *testing.T) {
			train, _ := trainProgram(t, tc.prec)
			ops := productOps(t, train.StableHLO)
			convs := 0
			for _, o := range ops {
				if o.kind == "convolution" {
					convs++
				}
				if !tc.want(o) {
					t.Errorf("%s %s at precision %s: want %s", o.kind, o.types, o.precision, tc.says)
				}
			}
			if convs == 0 {
				t.Errorf("no convolution among %d products", len(ops))
			}
			bf16 := 0
			for _, o := range ops {
				if strings.Contains(o.types, "bf16") {
					bf16++
				}
			}
			if (tc.prec == BFloat16) != (bf16 >= convs) {
				t.Errorf("%d of %d products in bfloat16", bf16, len(ops))
			}
			// The variables (the main function's parameters) stay float32 in every precision.
			if m := regexp.MustCompile(`%_model_\w+_weights: tensor<[0-9x]*bf16>`).FindString(train.StableHLO); m != "" {
				t.Errorf("a variable in bfloat16: %s", m)
			}
			t.Logf("%s: %d products (%d convolutions), %d in bfloat16", tc.prec, len(ops), convs, bf16)
		})
	}
}

// TestXLACPUUpdatesInPlace proves from the compiled training program that the step's donated
// variables (weights, momentum, batch-norm statistics) are updated in place: XLA aliases
// outputs to them (input-output aliasing), so their bytes are counted once, not twice.
func TestXLACPUUpdatesInPlace(t *testing.T) {
	train, s := trainProgram(t, Float32)
	var updated int64
	for v := range s.Store().IterVariables() {
		if v.Shape().Size() > 1 { // the scalars (learning rate, step) are not aliased
			updated += int64(v.Shape().Memory())
		}
	}
	t.Logf("training program: arguments %d B, outputs %d B, aliased %d B, scratch %d B; array variables %d B",
		train.ArgumentBytes, train.OutputBytes, train.AliasBytes, train.TempBytes, updated)
	if train.AliasBytes < updated {
		t.Errorf("%d bytes of outputs aliased to parameters, less than the %d bytes of the variables the step updates: they are copied, not updated in place",
			train.AliasBytes, updated)
	}
	if !strings.Contains(train.StableHLO, "jax.buffer_donor = true") {
		t.Error("the program marks no parameter as a buffer donor")
	}
}

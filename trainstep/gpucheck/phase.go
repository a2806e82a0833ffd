package gpucheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"time"

	"github.com/dcl-beam/dcl-beam/gpu"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/trainstep"
)

// PhaseEnv is the environment variable that turns a re-executed binary into one phase of the
// check: its value is a Phase as JSON. cmd/dcl and this package's tests look for it first.
const PhaseEnv = "DCL_GPUCHECK_PHASE"

// Phase is one measurement, run in a child process.
type Phase struct {
	// Kind is "agreement" or "speed".
	Kind    string `json:"kind"`
	Backend string `json:"backend"`
	Plugin  string `json:"plugin,omitempty"`
	Threads int    `json:"threads,omitempty"`
	// Model, Width (0: the model's default), Size (px), Batch (view pairs), Channels.
	Model    string `json:"model"`
	Width    int    `json:"width,omitempty"`
	Size     int    `json:"size"`
	Batch    int    `json:"batch"`
	Channels int    `json:"channels"`
	// Precision is "float32" or "bf16"; TF32 lets float32 products use TF32 tensor cores.
	Precision string `json:"precision"`
	TF32      bool   `json:"tf32"`
	// Warmup and Steps: untimed steps (the first compiles), then timed ones.
	Warmup int    `json:"warmup,omitempty"`
	Steps  int    `json:"steps,omitempty"`
	Seed   uint64 `json:"seed"`
	// Result is the file the child writes its result to (JSON).
	Result string `json:"result"`
}

// IsPhase reports whether this process was started as a phase of the check.
func IsPhase() bool { return os.Getenv(PhaseEnv) != "" }

// RunPhase runs the phase PhaseEnv describes and writes its result file. The returned error
// is also written there, so the parent reports it with the others.
func RunPhase(ctx context.Context) error {
	var p Phase
	if err := json.Unmarshal([]byte(os.Getenv(PhaseEnv)), &p); err != nil {
		return fmt.Errorf("reading $%s: %w", PhaseEnv, err)
	}
	var res any
	var err error
	switch p.Kind {
	case "agreement":
		res, err = runAgreement(ctx, p)
	case "speed":
		res, err = runSpeed(ctx, p)
	default:
		err = fmt.Errorf("unknown phase %q", p.Kind)
	}
	if err != nil {
		res = map[string]string{"error": err.Error()}
	}
	b, jerr := json.Marshal(res)
	if jerr != nil {
		return errors.Join(err, jerr)
	}
	if werr := storage.WriteFile(ctx, p.Result, b); werr != nil {
		return errors.Join(err, fmt.Errorf("writing the phase result %s: %w", p.Result, werr))
	}
	return err
}

func (p Phase) stepConfig() (trainstep.StepConfig, error) {
	cfg := trainstep.BenchStepConfig(p.Model, p.Channels)
	cfg.Model.BaseWidth = p.Width
	prec, err := trainstep.ParsePrecision(p.Precision)
	if err != nil {
		return cfg, err
	}
	cfg.Precision = prec
	return cfg, nil
}

func (p Phase) backend(ctx context.Context, kind string, noTF32 bool, threads int) (gpu.Options, error) {
	b, err := gpu.ParseKind(kind)
	if err != nil {
		return gpu.Options{}, err
	}
	return gpu.Options{Kind: b, Plugin: p.Plugin, NoTF32: noTF32, Threads: threads}, ctx.Err()
}

// SpeedResult is one training-step measurement.
type SpeedResult struct {
	Model     string `json:"model"`
	Size      int    `json:"size"`
	Batch     int    `json:"batch"`
	Precision string `json:"precision"`
	TF32      bool   `json:"tf32"`
	Backend   string `json:"backend"`
	// Device is the backend's description of itself.
	Device string `json:"device,omitempty"`
	// FirstStepSeconds is the first step, compilation included.
	FirstStepSeconds float64 `json:"first_step_seconds"`
	// StepMs are the timed steps; MedianMs their median; ImagesPerSec = 2·Batch/median.
	StepMs       []float64 `json:"step_ms"`
	MedianMs     float64   `json:"median_ms"`
	ImagesPerSec float64   `json:"images_per_sec"`
	Loss         float64   `json:"last_loss"`
	// PeakMemoryMiB is the child's peak GPU memory (nvidia-smi, its process or, when
	// nvidia-smi cannot see processes, the device's growth) or, on the CPU, its peak RSS.
	PeakMemoryMiB float64 `json:"peak_memory_mib,omitempty"`
	MemorySource  string  `json:"memory_source,omitempty"`
	Error         string  `json:"error,omitempty"`
	// Seconds is the child's wall time.
	Seconds float64 `json:"seconds"`
}

func runSpeed(ctx context.Context, p Phase) (*SpeedResult, error) {
	opts, err := p.backend(ctx, p.Backend, !p.TF32, p.Threads)
	if err != nil {
		return nil, err
	}
	be, err := gpu.New(ctx, opts)
	if err != nil {
		return nil, err
	}
	defer be.Finalize()
	cfg, err := p.stepConfig()
	if err != nil {
		return nil, err
	}
	s, err := trainstep.NewStep(be, cfg, p.Size, p.Size)
	if err != nil {
		return nil, err
	}
	defer s.Finalize()
	b := trainstep.RandomBatch(p.Seed, p.Batch, p.Size, p.Size, p.Channels)
	lr := 0.03 * float64(p.Batch) / 256
	res := &SpeedResult{Model: p.Model, Size: p.Size, Batch: p.Batch, Precision: p.Precision, TF32: p.TF32, Backend: p.Backend, Device: be.Description()}
	start := time.Now()
	for i := 0; i < max(p.Warmup, 1); i++ {
		if _, err := s.Run(b, lr); err != nil {
			return nil, fmt.Errorf("warm-up step %d: %w", i, err)
		}
		if i == 0 {
			res.FirstStepSeconds = time.Since(start).Seconds()
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	for i := 0; i < max(p.Steps, 1); i++ {
		t := time.Now()
		r, err := s.Run(b, lr) // returns the loss to the host: the step is done when it returns
		if err != nil {
			return nil, fmt.Errorf("timed step %d: %w", i, err)
		}
		res.StepMs = append(res.StepMs, float64(time.Since(t).Microseconds())/1000)
		res.Loss = r.Loss
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	res.MedianMs = median(res.StepMs)
	res.ImagesPerSec = float64(2*p.Batch) / (res.MedianMs / 1000)
	return res, nil
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Tolerances of the agreement check. Both sides compute in float32 (unit roundoff
// u = 2⁻²⁴ ≈ 6e-8), TF32 off; they differ only in the order of accumulation (the CPU's
// blocked GEMM against cuDNN's and cuBLAS's kernels, which also pick Winograd or FFT
// convolutions and split-K reductions), and in how exp/log are approximated. A reduction of
// K terms in another order moves the result by about √K·u relative (random-walk rounding;
// K ≤ 3·3·512 = 4608 here, so ≈ 4e-6), Winograd adds about 10× that, and ~20 layers forward
// and ~20 backward compound it roughly linearly, batch norm renormalising at each layer
// rather than amplifying: ≈ 1e-4 relative on a gradient's norm in the worst layer. The loss
// sees the same relative error on cos(z_i, z_j); 1/τ scales the logits and their errors alike,
// and the log-sum-exp keeps the relative size. So:
//
//   - loss: relative 2e-4 (the typical error is ≈ 1e-5);
//   - each gradient's sum of squares (its norm², no cancellation, twice the norm's relative
//     error): relative 1e-3, ≈ 5× the worst case above;
//   - each gradient's largest element: relative 2e-3 (one element, no averaging);
//   - each gradient's sum, which cancels (conv and BN gradients sum to almost nothing), so a
//     relative test would be noise: |Δsum| ≤ 1e-3·‖g‖₂·√n, the size of a sum of n terms of
//     that norm.
//
// What the check must catch is far larger: TF32 left on (u = 2⁻¹¹ ≈ 5e-4 per product) moves
// gradient norms by 1e-3 to 1e-2, a wrong padding, stride, kernel flip or missing batch-norm
// term by 1e-2 or more.
const (
	TolLoss       = 2e-4
	TolSumSquares = 1e-3
	TolMaxAbs     = 2e-3
	TolSum        = 1e-3
)

// AgreementResult compares one training step's loss and gradients on two backends.
type AgreementResult struct {
	Model     string `json:"model"`
	Size      int    `json:"size"`
	Batch     int    `json:"batch"`
	Reference string `json:"reference"`
	Backend   string `json:"backend"`
	Device    string `json:"device,omitempty"`
	// LossRef and Loss are the two losses; LossRelErr their relative difference.
	LossRef    float64 `json:"loss_reference"`
	Loss       float64 `json:"loss"`
	LossRelErr float64 `json:"loss_rel_err"`
	// Variables compared, and the worst of each measure over them.
	Variables       int                `json:"variables"`
	MaxSumSqRelErr  float64            `json:"max_sum_squares_rel_err"`
	WorstSumSq      string             `json:"worst_sum_squares_variable"`
	MaxMaxAbsRelErr float64            `json:"max_max_abs_rel_err"`
	MaxSumErrNormed float64            `json:"max_sum_err_normed"`
	Tolerances      map[string]float64 `json:"tolerances"`
	Failures        []string           `json:"failures,omitempty"`
	Pass            bool               `json:"pass"`
	Details         []VariableDiff     `json:"details"`
	Error           string             `json:"error,omitempty"`
	Seconds         float64            `json:"seconds"`
}

// VariableDiff is one variable's gradient on both backends.
type VariableDiff struct {
	Name          string  `json:"name"`
	Size          int     `json:"size"`
	SumSquaresRef float64 `json:"sum_squares_reference"`
	SumSquares    float64 `json:"sum_squares"`
	SumSqRelErr   float64 `json:"sum_squares_rel_err"`
	MaxAbsRelErr  float64 `json:"max_abs_rel_err"`
	SumErrNormed  float64 `json:"sum_err_normed"`
}

func relErr(a, b float64) float64 {
	d := math.Abs(a - b)
	s := math.Max(math.Abs(a), math.Abs(b))
	if s == 0 {
		return 0
	}
	if math.IsNaN(d) {
		return math.Inf(1)
	}
	return d / s
}

// Compare checks the report of the backend under test against the reference's.
func Compare(ref, got trainstep.GradientReport) AgreementResult {
	r := AgreementResult{LossRef: ref.Loss, Loss: got.Loss, LossRelErr: relErr(ref.Loss, got.Loss),
		Tolerances: map[string]float64{"loss_rel": TolLoss, "sum_squares_rel": TolSumSquares, "max_abs_rel": TolMaxAbs, "sum_normed": TolSum}}
	if r.LossRelErr > TolLoss || math.IsNaN(got.Loss) {
		r.Failures = append(r.Failures, fmt.Sprintf("loss %.8g vs %.8g: relative error %.2g > %.0g", got.Loss, ref.Loss, r.LossRelErr, TolLoss))
	}
	if len(ref.Gradients) != len(got.Gradients) {
		r.Failures = append(r.Failures, fmt.Sprintf("%d gradients vs %d on the reference", len(got.Gradients), len(ref.Gradients)))
	}
	for i := range min(len(ref.Gradients), len(got.Gradients)) {
		a, b := ref.Gradients[i], got.Gradients[i]
		if a.Name != b.Name || a.Size != b.Size {
			r.Failures = append(r.Failures, fmt.Sprintf("gradient %d is %s (%d) vs %s (%d) on the reference", i, b.Name, b.Size, a.Name, a.Size))
			continue
		}
		d := VariableDiff{Name: a.Name, Size: a.Size, SumSquaresRef: a.SumSquares, SumSquares: b.SumSquares,
			SumSqRelErr: relErr(a.SumSquares, b.SumSquares), MaxAbsRelErr: relErr(a.MaxAbs, b.MaxAbs)}
		if scale := math.Sqrt(a.SumSquares * float64(a.Size)); scale > 0 {
			d.SumErrNormed = math.Abs(a.Sum-b.Sum) / scale
		} else if a.Sum != b.Sum {
			d.SumErrNormed = math.Inf(1)
		}
		if math.IsNaN(b.Sum) || math.IsNaN(b.SumSquares) {
			d.SumSqRelErr, d.SumErrNormed = math.Inf(1), math.Inf(1)
		}
		r.Details = append(r.Details, d)
		r.Variables++
		if d.SumSqRelErr > r.MaxSumSqRelErr {
			r.MaxSumSqRelErr, r.WorstSumSq = d.SumSqRelErr, d.Name
		}
		r.MaxMaxAbsRelErr = math.Max(r.MaxMaxAbsRelErr, d.MaxAbsRelErr)
		r.MaxSumErrNormed = math.Max(r.MaxSumErrNormed, d.SumErrNormed)
		switch {
		case d.SumSqRelErr > TolSumSquares:
			r.Failures = append(r.Failures, fmt.Sprintf("%s: sum of squares %.8g vs %.8g, relative error %.2g > %.0g", d.Name, b.SumSquares, a.SumSquares, d.SumSqRelErr, TolSumSquares))
		case d.MaxAbsRelErr > TolMaxAbs:
			r.Failures = append(r.Failures, fmt.Sprintf("%s: largest element %.8g vs %.8g, relative error %.2g > %.0g", d.Name, b.MaxAbs, a.MaxAbs, d.MaxAbsRelErr, TolMaxAbs))
		case d.SumErrNormed > TolSum:
			r.Failures = append(r.Failures, fmt.Sprintf("%s: sum %.8g vs %.8g, error %.2g of ‖g‖·√n > %.0g", d.Name, b.Sum, a.Sum, d.SumErrNormed, TolSum))
		}
	}
	r.Pass = len(r.Failures) == 0
	return r
}

func runAgreement(ctx context.Context, p Phase) (*AgreementResult, error) {
	start := time.Now()
	cfg, err := p.stepConfig()
	if err != nil {
		return nil, err
	}
	// The reference is the CPU backend. When the backend under test is the CPU too (the
	// check's own test, or a machine without a GPU), the reference runs on one thread, so
	// the two still sum in different orders.
	refThreads := 0
	if p.Backend == string(gpu.CPU) {
		refThreads = 1
	}
	report := func(kind string, threads int) (trainstep.GradientReport, string, error) {
		opts, err := p.backend(ctx, kind, true, threads)
		if err != nil {
			return trainstep.GradientReport{}, "", err
		}
		be, err := gpu.New(ctx, opts)
		if err != nil {
			return trainstep.GradientReport{}, "", err
		}
		defer be.Finalize()
		s, err := trainstep.NewStep(be, cfg, p.Size, p.Size)
		if err != nil {
			return trainstep.GradientReport{}, "", err
		}
		defer s.Finalize()
		rep, err := s.Gradients(trainstep.RandomBatch(p.Seed, p.Batch, p.Size, p.Size, p.Channels))
		return rep, be.Description(), err
	}
	ref, _, err := report(string(gpu.CPU), refThreads)
	if err != nil {
		return nil, fmt.Errorf("reference gradients on the CPU: %w", err)
	}
	got, dev, err := report(p.Backend, p.Threads)
	if err != nil {
		return nil, fmt.Errorf("gradients on %s: %w", p.Backend, err)
	}
	r := Compare(ref, got)
	r.Model, r.Size, r.Batch, r.Backend, r.Device = p.Model, p.Size, p.Batch, p.Backend, dev
	r.Reference = "cpu"
	if refThreads == 1 {
		r.Reference = "cpu, 1 thread"
	}
	r.Seconds = time.Since(start).Seconds()
	return &r, nil
}

package verify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"time"

	"github.com/dcl-beam/dcl-beam/gpu"
	"github.com/dcl-beam/dcl-beam/gpu/cuda"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/trainstep"
	"github.com/gomlx/compute"
)

// PhaseEnv is the environment variable that turns a re-executed binary into one phase of the
// check: its value is a Phase as JSON. cmd/dcl and this package's tests look for it first.
const PhaseEnv = "DCL_GPUCHECK_PHASE"

// Phase is one measurement, run in a child process.
type Phase struct {
	// Kind is "agreement", "speed", "packing" or "loop".
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
	// Runs is how many runs a packing phase trains in one PackedStep.
	Runs int `json:"runs,omitempty"`
	// Precision is a trainstep.Precision: "float32", "tf32" or "bf16".
	Precision string `json:"precision"`
	// EmulateTF32 runs a CPU backend that rounds product operands to TF32 (the agreement
	// check's tf32 row without a GPU).
	EmulateTF32 bool `json:"emulate_tf32,omitempty"`
	// ConvDefault leaves CUDA's convolutions at XLA's DEFAULT precision, as go-xla did
	// before dcl-beam's patch: the agreement row that shows what the patch changes.
	ConvDefault bool `json:"conv_default,omitempty"`
	// Warmup and Steps: untimed steps (the first compiles), then timed ones.
	Warmup int    `json:"warmup,omitempty"`
	Steps  int    `json:"steps,omitempty"`
	Seed   uint64 `json:"seed"`
	// Result is the file the child writes its result to (JSON).
	Result string `json:"result"`
	// Data is Fashion-MNIST's folder for the loop's shards ("": random images).
	Data string `json:"data,omitempty"`
	// Floors is a file where the agreement's CPU reference and floors are kept for the next
	// agreement row of the same model and batch ("": computed by each row).
	Floors string `json:"floors,omitempty"`
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
	case "packing":
		res, err = runPacking(ctx, p)
	case "loop":
		res, err = runLoop(ctx, p)
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

// backend is the backend of kind for p's precision; emulateTF32 applies to a CPU backend.
func (p Phase) backend(ctx context.Context, kind string, threads int, emulateTF32 bool) (gpu.Options, error) {
	b, err := gpu.ParseKind(kind)
	if err != nil {
		return gpu.Options{}, err
	}
	prec, err := trainstep.ParsePrecision(p.Precision)
	if err != nil {
		return gpu.Options{}, err
	}
	return gpu.Options{Kind: b, Plugin: p.Plugin, TF32: prec.AllowsTF32(), ConvDefaultPrecision: p.ConvDefault,
		EmulateTF32: emulateTF32, Threads: threads}, ctx.Err()
}

// open starts p's backend under test with the options backend gives (no TF32 emulation);
// the caller finalizes it.
func (p Phase) open(ctx context.Context) (compute.Backend, error) {
	opts, err := p.backend(ctx, p.Backend, p.Threads, false)
	if err != nil {
		return nil, err
	}
	return gpu.New(ctx, opts)
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
	// PipelinedImagesPerSec is the throughput of Steps steps launched back to back, each
	// step's loss read while the next runs (as dcl train does): no host round trip between
	// steps.
	PipelinedImagesPerSec float64 `json:"pipelined_images_per_sec,omitempty"`
	// PeakMemoryMiB is the child's peak GPU memory (nvidia-smi, its process or, when
	// nvidia-smi cannot see processes, the device's growth) or, on the CPU, its peak RSS.
	PeakMemoryMiB float64 `json:"peak_memory_mib,omitempty"`
	MemorySource  string  `json:"memory_source,omitempty"`
	// Allocator is the GPU allocator's own figures after the timed steps (PJRT's memory
	// statistics): its peak in use (as torch.cuda.max_memory_allocated) and the peak of the
	// pool it held (as max_memory_reserved). Absent on the CPU.
	Allocator *cuda.MemoryStats `json:"allocator,omitempty"`
	// AllocatorError says why Allocator is absent on a GPU.
	AllocatorError string `json:"allocator_error,omitempty"`
	Error          string `json:"error,omitempty"`
	// Seconds is the child's wall time.
	Seconds float64 `json:"seconds"`
}

func runSpeed(ctx context.Context, p Phase) (*SpeedResult, error) {
	be, err := p.open(ctx)
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
	res := &SpeedResult{Model: p.Model, Size: p.Size, Batch: p.Batch, Precision: p.Precision, TF32: cfg.Precision.AllowsTF32(), Backend: p.Backend, Device: be.Description()}
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
	if res.PipelinedImagesPerSec, err = pipelined(ctx, s, b, lr, max(p.Steps, 1)); err != nil {
		return nil, err
	}
	if p.Backend != string(gpu.CPU) {
		if m, err := gpu.DeviceMemory(be); err != nil {
			res.AllocatorError = err.Error()
		} else {
			res.Allocator = &m
		}
	}
	return res, nil
}

// pipelined times n steps launched back to back, each one's loss read once the next is
// launched, and returns their images/s.
func pipelined(ctx context.Context, s *trainstep.Step, b *trainstep.Batch, lr float64, n int) (float64, error) {
	start := time.Now()
	var prev *trainstep.PendingStep
	for i := range n {
		p, err := s.Launch(b, lr)
		if err != nil {
			return 0, fmt.Errorf("pipelined step %d: %w", i, err)
		}
		if prev != nil {
			if _, err := prev.Wait(); err != nil {
				return 0, err
			}
		}
		prev = p
		if err := ctx.Err(); err != nil {
			return 0, err
		}
	}
	if _, err := prev.Wait(); err != nil {
		return 0, err
	}
	return float64(2*b.N*n) / time.Since(start).Seconds(), nil
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

// AgreementResult compares one training step's loss and gradients on the backend under test
// with the CPU reference, within tolerances derived from the step's own rounding (see
// Headroom).
type AgreementResult struct {
	Model string `json:"model"`
	Size  int    `json:"size"`
	Batch int    `json:"batch"`
	// Precision is the backend's: "float32" or "tf32" (the reference is always float32).
	Precision string `json:"precision"`
	// ConvDefault: the backend's convolutions ran at XLA's DEFAULT precision, as before
	// dcl-beam patched go-xla (a diagnostic row: its verdict is not the check's).
	ConvDefault bool   `json:"conv_default,omitempty"`
	Reference   string `json:"reference"`
	Backend     string `json:"backend"`
	Device      string `json:"device,omitempty"`
	// LossRef and Loss are the two losses; LossRelErr their relative difference.
	LossRef    float64 `json:"loss_reference"`
	Loss       float64 `json:"loss"`
	LossRelErr float64 `json:"loss_rel_err"`
	// Variables compared, and the worst of each measure over them (for the eye; the verdict
	// is on Spread).
	Variables       int     `json:"variables"`
	MaxSumSqRelErr  float64 `json:"max_sum_squares_rel_err"`
	WorstSumSq      string  `json:"worst_sum_squares_variable"`
	MaxMaxAbsRelErr float64 `json:"max_max_abs_rel_err"`
	MaxSumErrNormed float64 `json:"max_sum_err_normed"`
	// Spread is the backend's distance from the reference. Float32Floor and TF32Floor are the
	// CPU's own: Winograd against direct convolutions, and TF32-rounded operands against
	// float32. AprioriFloor is the a priori bound of the row's arithmetic for the model's
	// shape (Shape).
	Spread       Spread       `json:"spread"`
	Float32Floor Spread       `json:"float32_floor"`
	TF32Floor    Spread       `json:"tf32_floor"`
	AprioriFloor Spread       `json:"apriori_floor"`
	Shape        ProductShape `json:"shape"`
	// Tolerances is Headroom times the row's floor; FloorRatio is how many times the
	// backend's spread is of the float32 floor (at most Headroom for float32, about TF32's
	// ratio for tf32).
	Tolerances Spread         `json:"tolerances"`
	FloorRatio float64        `json:"float32_floor_ratio"`
	TF32Ratio  float64        `json:"tf32_floor_ratio"`
	Failures   []string       `json:"failures,omitempty"`
	Pass       bool           `json:"pass"`
	Details    []VariableDiff `json:"details"`
	Error      string         `json:"error,omitempty"`
	Seconds    float64        `json:"seconds"`
}

// Floors are the reference and the CPU's float32 and TF32 spreads of one step, computed once
// and shared by both agreement rows.
type Floors struct {
	Reference trainstep.GradientReport `json:"reference"`
	Float32   Spread                   `json:"float32"`
	TF32      Spread                   `json:"tf32"`
	Shape     ProductShape             `json:"shape"`
}

// Compare checks got, computed at precision, against the reference within Headroom times
// the row's floor.
func Compare(fl Floors, precision trainstep.Precision, got trainstep.GradientReport) AgreementResult {
	apriori := fl.Shape.AprioriFloor(precision)
	floor := fl.Float32
	if precision == trainstep.TF32 {
		floor = fl.TF32
	}
	details, sp, problems := diff(fl.Reference, got)
	r := AgreementResult{Precision: string(precision), LossRef: fl.Reference.Loss, Loss: got.Loss, LossRelErr: sp.Loss,
		Spread: sp, Float32Floor: fl.Float32, TF32Floor: fl.TF32, AprioriFloor: apriori, Shape: fl.Shape,
		Tolerances: floor.scaled(Headroom, apriori), FloorRatio: sp.ratio(fl.Float32.scaled(1, fl.Shape.AprioriFloor(trainstep.Float32))),
		TF32Ratio: sp.ratio(fl.TF32), Failures: problems, Details: details, Variables: len(details)}
	for _, d := range details {
		if d.SumSqRelErr > r.MaxSumSqRelErr {
			r.MaxSumSqRelErr, r.WorstSumSq = d.SumSqRelErr, d.Name
		}
		r.MaxMaxAbsRelErr = max(r.MaxMaxAbsRelErr, d.MaxAbsRelErr)
		r.MaxSumErrNormed = max(r.MaxSumErrNormed, d.SumErrNormed)
	}
	tol := r.Tolerances
	for _, m := range []struct {
		name     string
		got, tol float64
	}{
		{"loss, relative", sp.Loss, tol.Loss},
		{"sums of squares, RMS relative", sp.SumSquares, tol.SumSquares},
		{"largest elements, RMS relative", sp.MaxAbs, tol.MaxAbs},
		{"sums, RMS of error / (‖g‖·√n)", sp.Sum, tol.Sum},
	} {
		if !(m.got <= m.tol) {
			r.Failures = append(r.Failures, fmt.Sprintf("%s: %.2g > %.2g (%g × the %s floor)", m.name, m.got, m.tol, float64(Headroom), precision))
		}
	}
	r.Pass = len(r.Failures) == 0
	return r
}

// floors computes the reference and the CPU's floors for p (float32 whatever p.Precision),
// or reads them from p.Floors when an earlier row wrote them there.
func floors(ctx context.Context, p Phase) (Floors, error) {
	var fl Floors
	if p.Floors != "" {
		if b, err := os.ReadFile(p.Floors); err == nil && json.Unmarshal(b, &fl) == nil && len(fl.Reference.Gradients) > 0 {
			return fl, nil
		}
	}
	ref := p
	ref.Precision = string(trainstep.Float32)
	r, shape, err := ref.cpuGradients(ctx, gpu.Options{Kind: gpu.CPU, Threads: 1, DirectConvolutions: true})
	if err != nil {
		return fl, fmt.Errorf("reference gradients on the CPU: %w", err)
	}
	f, _, err := ref.cpuGradients(ctx, gpu.Options{Kind: gpu.CPU, Threads: p.Threads})
	if err != nil {
		return fl, fmt.Errorf("float32 floor (Winograd) on the CPU: %w", err)
	}
	t, _, err := ref.cpuGradients(ctx, gpu.Options{Kind: gpu.CPU, Threads: p.Threads, DirectConvolutions: true, EmulateTF32: true})
	if err != nil {
		return fl, fmt.Errorf("TF32 floor (emulated) on the CPU: %w", err)
	}
	_, fl.Float32, _ = diff(r, f)
	_, fl.TF32, _ = diff(r, t)
	fl.Reference, fl.Shape = r, shape
	if p.Floors != "" {
		if b, err := json.Marshal(fl); err == nil {
			_ = os.WriteFile(p.Floors, b, 0o666) // a cache: the next row computes them again without it
		}
	}
	return fl, nil
}

// cpuGradients is one step's gradient report on a backend of opts, for p's model and batch.
func (p Phase) cpuGradients(ctx context.Context, opts gpu.Options) (trainstep.GradientReport, ProductShape, error) {
	rep, _, shape, err := p.gradients(ctx, opts)
	return rep, shape, err
}

// gradients is one step's gradient report on a backend of opts at p's precision, the
// backend's description, and the model's product shape.
func (p Phase) gradients(ctx context.Context, opts gpu.Options) (trainstep.GradientReport, string, ProductShape, error) {
	cfg, err := p.stepConfig()
	if err != nil {
		return trainstep.GradientReport{}, "", ProductShape{}, err
	}
	if err := ctx.Err(); err != nil {
		return trainstep.GradientReport{}, "", ProductShape{}, err
	}
	be, err := gpu.New(ctx, opts)
	if err != nil {
		return trainstep.GradientReport{}, "", ProductShape{}, err
	}
	defer be.Finalize()
	s, err := trainstep.NewStep(be, cfg, p.Size, p.Size)
	if err != nil {
		return trainstep.GradientReport{}, "", ProductShape{}, err
	}
	defer s.Finalize()
	rep, err := s.Gradients(trainstep.RandomBatch(p.Seed, p.Batch, p.Size, p.Size, p.Channels))
	return rep, be.Description(), productShape(s), err
}

func runAgreement(ctx context.Context, p Phase) (*AgreementResult, error) {
	start := time.Now()
	prec, err := trainstep.ParsePrecision(p.Precision)
	if err != nil {
		return nil, err
	}
	if prec != trainstep.Float32 && prec != trainstep.TF32 {
		return nil, fmt.Errorf("agreement at precision %s: want float32 or tf32", prec)
	}
	fl, err := floors(ctx, p)
	if err != nil {
		return nil, err
	}
	// On the CPU (the check's own test, or a machine without a GPU) the backend under test is
	// the CPU's default algorithms, with TF32 emulated for the tf32 row.
	opts, err := p.backend(ctx, p.Backend, p.Threads, prec == trainstep.TF32)
	if err != nil {
		return nil, err
	}
	got, dev, _, err := p.gradients(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("gradients on %s: %w", p.Backend, err)
	}
	r := Compare(fl, prec, got)
	r.Model, r.Size, r.Batch, r.Backend, r.Device = p.Model, p.Size, p.Batch, p.Backend, dev
	r.Reference = "cpu, direct convolutions, 1 thread"
	r.ConvDefault = p.ConvDefault
	r.Seconds = time.Since(start).Seconds()
	return &r, nil
}

package verify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/dcl-beam/dcl-beam/gpu"
	"github.com/dcl-beam/dcl-beam/gpu/cuda"
	"github.com/dcl-beam/dcl-beam/internal/storage"
	"github.com/dcl-beam/dcl-beam/shards"
	"github.com/dcl-beam/dcl-beam/trainstep"
)

// CheckConfig is one run of the GPU check.
type CheckConfig struct {
	// Backend is the backend under test: "cuda" (the point), "xla-cpu" (the same code and
	// programs on XLA's CPU plugin: every GPU command known to work before it meets a GPU) or
	// "cpu" (the check's own test).
	Backend string
	// Plugin is the CUDA PJRT plugin (empty: search).
	Plugin string
	// Quick uses tiny models and batches: seconds on a CPU, to keep the check from rotting.
	Quick bool
	// Data is the folder of Fashion-MNIST's four .gz files for the feeding test; empty means
	// random images.
	Data string
	// Photos is a folder of real photographs (scripts/photos.sh) for the JPEG feeding test;
	// empty means Data's images, upscaled.
	Photos string
	// Out is the folder for gpu-check.json and gpu-check.md (created); empty writes neither.
	Out string
	// Torch is scripts/torch_step.py's JSON, merged into the tables when given.
	Torch string
	// Self is the command line that re-executes this program as a phase (PhaseEnv set), e.g.
	// {"/path/dcl", "gpu-check"}.
	Self []string
	// Warmup and Steps override the untimed and timed steps of each speed row (0: 5 and 20;
	// 1 and 2 when Quick).
	Warmup, Steps int
	// PhaseTimeout bounds each child (0: 3 minutes; a first step that compiles and autotunes
	// ResNet-50 took under a minute on an H200).
	PhaseTimeout time.Duration
	// Skip lists parts not to run: "agreement", "speed", "packing", "loop", "feeding".
	Skip []string
	// Commands are the command lines that produced the results, for the report.
	Commands []string
	// Log receives progress lines (nil: discarded).
	Log io.Writer
}

// CheckResult is everything the GPU check measured. Failures of single parts are in Errors (and in the
// part's own Error); the rest is still measured and written.
type CheckResult struct {
	Started string      `json:"started"`
	Seconds float64     `json:"seconds"`
	Backend string      `json:"backend"`
	Quick   bool        `json:"quick"`
	Host    Host        `json:"host"`
	Doctor  cuda.Report `json:"doctor"`
	// Agreement is the float32 row, AgreementTF32 the tf32 row (AgreementResult).
	Agreement     *AgreementResult `json:"agreement,omitempty"`
	AgreementTF32 *AgreementResult `json:"agreement_tf32,omitempty"`
	// AgreementConvDefault is the float32 row with convolutions at XLA's DEFAULT precision,
	// as before dcl-beam's go-xla patch (CUDA only; a diagnostic).
	AgreementConvDefault *AgreementResult `json:"agreement_conv_default,omitempty"`
	Speed                []SpeedResult    `json:"speed"`
	Packing              []PackingResult  `json:"packing,omitempty"`
	Loop                 *LoopResult      `json:"loop,omitempty"`
	Feeding              []FeedResult     `json:"feeding"`
	Torch                *TorchResult     `json:"torch,omitempty"`
	Commands             []string         `json:"commands,omitempty"`
	Errors               []string         `json:"errors,omitempty"`
}

// Host describes the machine.
type Host struct {
	Hostname string `json:"hostname"`
	CPUs     int    `json:"cpus"`
	OS       string `json:"os"`
	GPU      string `json:"gpu,omitempty"`
	GPUMiB   int    `json:"gpu_memory_mib,omitempty"`
	Driver   string `json:"driver,omitempty"`
}

// speedRows are the training steps measured, each in tf32 (what PyTorch's cuDNN
// convolutions do by default) and bf16 mixed precision: resnet18-cifar at 32 px (the CIFAR configs' model),
// batch 256 pairs, and resnet50 at 224 px, batch 64 pairs; resnet18-cifar at the batch sizes
// DCL is about, 32 and 64 pairs, where a launch per operation costs most; and full float32
// for resnet18-cifar at batch 32 and 256, the price of the default. Quick shrinks them to
// seconds on a CPU.
func speedRows(quick bool) []Phase {
	type row struct {
		model              string
		width, size, batch int
		precisions         []trainstep.Precision
	}
	both := []trainstep.Precision{trainstep.TF32, trainstep.BFloat16}
	all := []trainstep.Precision{trainstep.Float32, trainstep.TF32, trainstep.BFloat16}
	rows := []row{
		{trainstep.ResNet18CIFAR, 0, 32, 32, all}, {trainstep.ResNet18CIFAR, 0, 32, 64, both},
		{trainstep.ResNet18CIFAR, 0, 32, 256, all}, {trainstep.ResNet50, 0, 224, 64, both},
	}
	if quick {
		rows = []row{{trainstep.ResNet18CIFAR, 4, 32, 4, all}, {trainstep.ResNet50, 2, 64, 2, both}}
	}
	var out []Phase
	for _, r := range rows {
		for _, prec := range r.precisions {
			out = append(out, Phase{Kind: "speed", Model: r.model, Width: r.width, Size: r.size, Batch: r.batch, Channels: 3,
				Precision: string(prec), Seed: 1})
		}
	}
	return out
}

// feedRows are the feeding measurements, each against the speed row it must keep fed.
func feedRows(quick bool) []FeedSpec {
	if quick {
		return []FeedSpec{
			{Name: "32px-raw", Size: 32, Channels: 1, Encoding: shards.Raw, Pairs: 256, Batch: 32, Epochs: 1, Against: "resnet18-cifar/4/tf32"},
			{Name: "64px-jpeg", Size: 64, Channels: 3, Encoding: shards.JPEG, Pairs: 32, Batch: 8, Epochs: 1, Against: "resnet50/2/tf32", Photos: true},
			{Name: "32px-online", Size: 32, Channels: 1, Encoding: shards.Raw, Pairs: 256, Batch: 32, Epochs: 1, Against: "resnet18-cifar/4/tf32", Online: true},
			{Name: "64px-online-jpeg", Size: 64, Channels: 3, Encoding: shards.JPEG, Pairs: 32, Batch: 8, Epochs: 1, Against: "resnet50/2/tf32", Photos: true, Online: true},
		}
	}
	return []FeedSpec{
		// The experiment's data: Fashion-MNIST at 32 px, raw views, as `dcl preprocess --size=32`
		// writes them; 20,480 pairs = 80 batches an epoch.
		{Name: "32px-raw", Size: 32, Channels: 1, Encoding: shards.Raw, Pairs: 20480, Batch: 256, Epochs: 2, Against: "resnet18-cifar/256/bf16"},
		// ImageNet-style views: 224 px RGB JPEG (quality 95), decoded by the reader.
		{Name: "224px-jpeg", Size: 224, Channels: 3, Encoding: shards.JPEG, Pairs: 4096, Batch: 64, Epochs: 1, Against: "resnet50/64/bf16", Photos: true},
		// The same two from base shards (views on the fly): the reader makes every view as it
		// reads, from the 28 px images, and from the photographs' JPEGs at their own sizes
		// (about ImageNet's).
		{Name: "32px-online", Size: 32, Channels: 1, Encoding: shards.Raw, Pairs: 20480, Batch: 256, Epochs: 2, Against: "resnet18-cifar/256/bf16", Online: true},
		{Name: "224px-online-jpeg", Size: 224, Channels: 3, Encoding: shards.JPEG, Pairs: 4096, Batch: 64, Epochs: 1, Against: "resnet50/64/bf16", Photos: true, Online: true},
	}
}

func (c CheckConfig) skip(part string) bool {
	for _, s := range c.Skip {
		if s == part {
			return true
		}
	}
	return false
}

func (c CheckConfig) logf(format string, args ...any) {
	if c.Log != nil {
		fmt.Fprintf(c.Log, "gpu-check: "+format+"\n", args...)
	}
}

// Check runs the GPU check and writes Out/gpu-check.json and Out/gpu-check.md. The error says what
// failed (a part that crashed, gradients that disagree); the files are written either way.
func Check(ctx context.Context, c CheckConfig) (*CheckResult, error) {
	start := time.Now()
	if c.Backend == "" {
		c.Backend = "cuda"
	}
	if len(c.Self) == 0 {
		return nil, errors.New("gpu-check: CheckConfig.Self (the command that re-executes this program) is empty")
	}
	if c.PhaseTimeout == 0 {
		c.PhaseTimeout = 3 * time.Minute
	}
	warmup, steps := 5, 20
	if c.Quick {
		warmup, steps = 1, 2
	}
	if c.Warmup > 0 {
		warmup = c.Warmup
	}
	if c.Steps > 0 {
		steps = c.Steps
	}
	work, err := os.MkdirTemp("", "dcl-gpu-check-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)

	host, _ := os.Hostname()
	r := &CheckResult{Started: start.UTC().Format(time.RFC3339), Backend: c.Backend, Quick: c.Quick, Commands: c.Commands,
		Host: Host{Hostname: host, CPUs: runtime.NumCPU(), OS: runtime.GOOS + "/" + runtime.GOARCH}}
	r.Doctor = cuda.Diagnose(ctx, cuda.DiagnoseOptions{Plugin: c.Plugin, NoLoad: true})
	if len(r.Doctor.GPUs) > 0 {
		r.Host.GPU, r.Host.GPUMiB, r.Host.Driver = r.Doctor.GPUs[0].Name, r.Doctor.GPUs[0].MemoryTotalMB, r.Doctor.GPUs[0].Driver
	}
	if r.Host.Driver == "" {
		r.Host.Driver = r.Doctor.Driver.Version
	}
	if c.Torch != "" {
		if t, err := readTorch(c.Torch); err != nil {
			r.Errors = append(r.Errors, "pytorch: "+err.Error())
		} else {
			r.Torch = t
			if t.Error != "" {
				r.Errors = append(r.Errors, "pytorch: "+t.Error)
			}
		}
	}

	// Without the cuda build, a GPU or a plugin, every phase on CUDA would fail the same way:
	// say it once, and still measure what does not need the GPU.
	if c.Backend == "cuda" && (!cuda.Compiled || len(r.Doctor.DeviceFiles) == 0 || r.Doctor.Plugin.Path == "") {
		r.Errors = append(r.Errors, "cuda: not available ("+r.Doctor.Why+"); agreement and speed skipped (`dcl doctor` says more)")
		c.Skip = append(c.Skip, "agreement", "speed", "packing", "loop")
	}
	if x := r.Doctor.XLACPU; c.Backend == string(gpu.XLACPU) && (!cuda.Compiled || x == nil || x.Plugin.Path == "") {
		why := "this binary was built without the XLA backend"
		if x != nil && cuda.Compiled {
			why = x.Why
		}
		r.Errors = append(r.Errors, "xla-cpu: not available ("+why+"); agreement and speed skipped (`dcl doctor` says more)")
		c.Skip = append(c.Skip, "agreement", "speed", "packing", "loop")
	}

	// The results so far are written after each part: a check stopped by its time limit
	// leaves what it measured.
	save := func() {
		r.Seconds = time.Since(start).Seconds()
		_ = r.write(ctx, c.Out)
	}
	save()

	if !c.skip("agreement") {
		// Two rows on one reference: float32 must agree within float32's floor, tf32 within
		// TF32's. No NVIDIA_TF32_OVERRIDE: what the backend's precision option does, alone,
		// is what is checked.
		// On CUDA a third row, float32 with convolutions at XLA's DEFAULT precision (go-xla
		// before dcl-beam's patch), shows what the patch changes: a diagnostic, not a verdict.
		fl := filepath.Join(work, "agreement-floors.json")
		type agreementRow struct {
			prec        trainstep.Precision
			convDefault bool
		}
		rows := []agreementRow{{trainstep.Float32, false}, {trainstep.TF32, false}}
		if c.Backend == "cuda" {
			rows = append(rows, agreementRow{trainstep.Float32, true})
		}
		for _, row := range rows {
			prec := row.prec
			p := Phase{Kind: "agreement", Backend: c.Backend, Plugin: c.Plugin, Model: trainstep.ResNet18CIFAR, Size: 32, Batch: 32, Channels: 3,
				Precision: string(prec), Seed: 11, Floors: fl, ConvDefault: row.convDefault}
			if c.Quick {
				p.Width, p.Batch = 4, 4
			}
			c.logf("agreement (%s): %s at %d px, batch %d, on cpu and %s", prec, p.Model, p.Size, p.Batch, c.Backend)
			var a AgreementResult
			if _, err := c.child(ctx, work, p, &a); err != nil {
				a.Error = err.Error()
				if !row.convDefault {
					r.Errors = append(r.Errors, fmt.Sprintf("agreement (%s): %v", prec, err))
				}
			} else if !a.Pass && !row.convDefault {
				r.Errors = append(r.Errors, fmt.Sprintf("agreement (%s): %d checks out of tolerance: %s", prec, len(a.Failures), strings.Join(a.Failures, "; ")))
			}
			c.logf("agreement (%s): loss %.6g vs %.6g, spread ‖g‖² %.2g (tolerance %.2g), %.1f× the float32 floor, %.2f× TF32's, pass %v",
				prec, a.Loss, a.LossRef, a.Spread.SumSquares, a.Tolerances.SumSquares, a.FloorRatio, a.TF32Ratio, a.Pass)
			switch {
			case row.convDefault:
				r.AgreementConvDefault = &a
			case prec == trainstep.Float32:
				r.Agreement = &a
			default:
				r.AgreementTF32 = &a
			}
			save()
		}
	}

	if !c.skip("speed") {
		for _, p := range speedRows(c.Quick) {
			p.Backend, p.Plugin, p.Warmup, p.Steps = c.Backend, c.Plugin, warmup, steps
			c.logf("speed: %s %d px, batch %d, %s", p.Model, p.Size, p.Batch, p.Precision)
			var s SpeedResult
			mem, err := c.child(ctx, work, p, &s)
			if err != nil {
				s = SpeedResult{Model: p.Model, Size: p.Size, Batch: p.Batch, Precision: p.Precision, Backend: p.Backend, Error: err.Error()}
				r.Errors = append(r.Errors, fmt.Sprintf("speed %s/%s: %v", p.Model, p.Precision, err))
			}
			s.PeakMemoryMiB, s.MemorySource = mem.peak, mem.source
			r.Speed = append(r.Speed, s)
			save()
			c.logf("speed: %.0f images/s (median %.1f ms, first step %.1f s), peak memory %.0f MiB", s.ImagesPerSec, s.MedianMs, s.FirstStepSeconds, s.PeakMemoryMiB)
		}
	}

	if !c.skip("packing") {
		c.measurePacking(ctx, work, r, warmup, steps, save)
	}

	if !c.skip("loop") {
		p := Phase{Kind: "loop", Backend: c.Backend, Plugin: c.Plugin, Model: trainstep.ResNet18CIFAR, Size: 32, Batch: 32, Channels: 3,
			Precision: string(trainstep.TF32), Seed: 1, Steps: 200, Data: c.Data}
		if c.Quick {
			p.Width, p.Batch, p.Steps = 4, 4, 4
		}
		c.logf("loop: dcl train's loop, %s %d px, batch %d, %s, %d steps", p.Model, p.Size, p.Batch, p.Precision, p.Steps+loopSkip)
		var l LoopResult
		if _, err := c.child(ctx, work, p, &l); err != nil {
			l = LoopResult{Model: p.Model, Size: p.Size, Batch: p.Batch, Precision: p.Precision, Error: err.Error()}
			r.Errors = append(r.Errors, "loop: "+err.Error())
		}
		for _, s := range r.Speed {
			if s.Model == p.Model && s.Batch == p.Batch && s.Precision == p.Precision && s.PipelinedImagesPerSec > 0 {
				l.BareImagesPerSec, l.Ratio = s.PipelinedImagesPerSec, l.ImagesPerSec/s.PipelinedImagesPerSec
			}
		}
		r.Loop = &l
		save()
		c.logf("loop: %.0f images/s, %.2f× the bare step", l.ImagesPerSec, l.Ratio)
	}

	if !c.skip("feeding") {
		for _, spec := range feedRows(c.Quick) {
			c.logf("feeding: %s shards, batch %d", spec.Name, spec.Batch)
			f := runFeed(ctx, work, c.Data, c.Photos, spec)
			if f.Error != "" {
				r.Errors = append(r.Errors, fmt.Sprintf("feeding %s: %s", spec.Name, f.Error))
			}
			for _, s := range r.Speed {
				if fmt.Sprintf("%s/%d/%s", s.Model, s.Batch, s.Precision) == spec.Against && s.ImagesPerSec > 0 {
					f.against(s.ImagesPerSec, feedDevices(r.Doctor))
				}
			}
			r.Feeding = append(r.Feeding, f)
			c.logf("feeding: %.0f images/s on %d cores (%.1f× the step on %d device(s))", f.ImagesPerSec, f.Cores, f.Ratio, f.Devices)
		}
	}
	r.Seconds = time.Since(start).Seconds()
	if err := r.write(ctx, c.Out); err != nil {
		r.Errors = append(r.Errors, err.Error())
	}
	if len(r.Errors) > 0 {
		return r, fmt.Errorf("gpu-check: %d problem(s): %s", len(r.Errors), strings.Join(r.Errors, " | "))
	}
	return r, nil
}

type memPeak struct {
	peak   float64
	source string
}

// child runs phase p in a new process of c.Self, with extra environment variables, and
// decodes its result into out. It returns the child's peak memory: GPU memory from nvidia-smi
// for a GPU backend, else its peak RSS.
func (c CheckConfig) child(ctx context.Context, work string, p Phase, out any, env ...string) (memPeak, error) {
	f, err := os.CreateTemp(work, "phase-*.json")
	if err != nil {
		return memPeak{}, err
	}
	f.Close()
	p.Result = f.Name()
	spec, err := json.Marshal(p)
	if err != nil {
		return memPeak{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.PhaseTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.Self[0], c.Self[1:]...)
	cmd.Env = append(append(os.Environ(), PhaseEnv+"="+string(spec)), env...)
	cmd.Stdout, cmd.Stderr = c.Log, c.Log
	if c.Log == nil {
		cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	}
	var gm *gpuMemory
	if p.Backend == string(gpu.CUDA) {
		gm = newGPUMemory(ctx)
	}
	if err := cmd.Start(); err != nil {
		return memPeak{}, fmt.Errorf("starting %s: %w", c.Self[0], err)
	}
	if gm != nil {
		gm.start(ctx, cmd.Process.Pid)
	}
	runErr := cmd.Wait()
	var mem memPeak
	if gm != nil {
		mem.peak, mem.source = gm.finish()
	} else if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok && ru != nil {
		mem.peak, mem.source = float64(ru.Maxrss)/1024, "peak RSS of the process (getrusage)"
	}
	b, rerr := os.ReadFile(p.Result)
	if rerr == nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return mem, fmt.Errorf("reading the phase's result: %w", err)
		}
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(b, &e) == nil && e.Error != "" {
			return mem, errors.New(e.Error)
		}
	}
	if runErr != nil {
		if ctx.Err() != nil {
			return mem, fmt.Errorf("the phase ran past %v: %w", c.PhaseTimeout, runErr)
		}
		return mem, fmt.Errorf("the phase's process failed (%w); its log is above", runErr)
	}
	if rerr != nil || len(b) == 0 {
		return mem, fmt.Errorf("the phase wrote no result")
	}
	return mem, nil
}

func (r *CheckResult) write(ctx context.Context, dir string) error {
	if dir == "" {
		return nil
	}
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	if err := storage.SaveJSON(ctx, filepath.Join(dir, "gpu-check.json"), r); err != nil {
		return fmt.Errorf("writing the results: %w", err)
	}
	if err := storage.WriteFile(ctx, filepath.Join(dir, "gpu-check.md"), []byte(r.Markdown())); err != nil {
		return fmt.Errorf("writing the table: %w", err)
	}
	return nil
}

package gpu

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/gomlx/compute"

	"github.com/dcl-beam/dcl-beam/gpu/cpu"
	"github.com/dcl-beam/dcl-beam/gpu/cuda"
)

// Options chooses and configures a backend.
type Options struct {
	// Kind is CPU, CUDA, XLACPU or Auto (the zero value means Auto).
	Kind Kind
	// Plugin is the path of the PJRT plugin (a .so) of CUDA or XLACPU; empty means search.
	// For CUDA: $DCL_PJRT_PLUGIN, $GOMLX_BACKEND=xla:/absolute/path, $PJRT_PLUGIN_LIBRARY_PATH,
	// then the CUDA plugin that JAX ships (jax_plugins/xla_cuda*/xla_cuda_plugin.so in the
	// Python site-packages); see cuda.FindPlugin. For XLACPU: $DCL_XLA_CPU_PLUGIN,
	// $PJRT_PLUGIN_LIBRARY_PATH, then the one `make deps` installed (cuda.FindCPUPlugin).
	Plugin string
	// Devices is how many devices XLACPU's client creates (XLA's cpu_device_count; 0: one):
	// virtual devices sharing the cores, for SPMD programs without GPUs. Ignored by the others.
	Devices int
	// TF32 lets CUDA run float32 convolutions and matrix products on TF32 tensor cores
	// (trainstep.Precision.AllowsTF32). Off (the default), they run in full float32: XLA
	// precision HIGHEST on every convolution and dot. The CPU backend always computes in full
	// float32.
	TF32 bool
	// ConvDefaultPrecision leaves CUDA's convolutions at XLA's DEFAULT precision (TF32 on
	// tensor cores) even when TF32 is off, as before dcl-beam patched go-xla: only for the
	// GPU check's measurement of the patch. Ignored by the CPU.
	ConvDefaultPrecision bool
	// EmulateTF32 makes the CPU backend round the operands of float32 convolutions and
	// matrix products to TF32, as tensor cores do (cpu.Config.EmulateTF32): for measuring TF32
	// and testing the GPU check without a GPU. Ignored by CUDA.
	EmulateTF32 bool
	// DirectConvolutions keeps the CPU backend from Winograd's convolutions
	// (cpu.Config.DirectConvolutions). Ignored by CUDA.
	DirectConvolutions bool
	// Threads is the number of goroutines the CPU kernels use (0: GOMAXPROCS).
	Threads int
	// Logger receives one line saying which backend was chosen and why; nil: slog.Default().
	Logger *slog.Logger
}

// ErrCUDAUnavailable is wrapped by the errors New returns when CUDA was asked for and cannot
// be used; the message says what is missing.
var ErrCUDAUnavailable = cuda.ErrUnavailable

// New returns the GoMLX backend opts asks for. CPU always works. CUDA fails with an error
// wrapping ErrCUDAUnavailable that says what is missing: a binary built without the cuda tag,
// no plugin found (listing where it looked), a plugin that does not load, or no GPU. Auto
// uses CUDA when all of that is there, CPU otherwise, and logs why.
func New(ctx context.Context, opts Options) (compute.Backend, error) {
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	kind := opts.Kind
	if kind == "" {
		kind = Auto
	}
	switch kind {
	case CPU:
		return newCPU(opts, log, "asked for")
	case CUDA:
		be, err := loadCUDA(ctx, opts)
		if err != nil {
			return nil, err
		}
		log.Info("compute backend", "backend", CUDA, "description", be.Description())
		return be, nil
	case XLACPU:
		be, err := cuda.LoadCPU(ctx, cuda.CPUOptions{Plugin: opts.Plugin, Devices: opts.Devices, TF32: opts.TF32})
		if err != nil {
			return nil, err
		}
		log.Info("compute backend", "backend", XLACPU, "description", be.Description())
		return be, nil
	case Auto:
		be, err := loadCUDA(ctx, opts)
		if err == nil {
			log.Info("compute backend", "backend", CUDA, "description", be.Description(), "reason", "auto: GPU found")
			return be, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return newCPU(opts, log, "auto: "+err.Error())
	default:
		return nil, fmt.Errorf("unknown backend %q: want %s", kind, kindList())
	}
}

func loadCUDA(ctx context.Context, opts Options) (compute.Backend, error) {
	return cuda.Load(ctx, cuda.Options{Plugin: opts.Plugin, TF32: opts.TF32, ConvDefaultPrecision: opts.ConvDefaultPrecision})
}

func newCPU(opts Options, log *slog.Logger, reason string) (compute.Backend, error) {
	be, err := cpu.New(cpu.Config{Threads: opts.Threads, EmulateTF32: opts.EmulateTF32, DirectConvolutions: opts.DirectConvolutions})
	if err != nil {
		return nil, fmt.Errorf("creating the CPU backend: %w", err)
	}
	log.Info("compute backend", "backend", CPU, "description", be.Description(), "reason", reason)
	return be, nil
}

// DeviceMemory returns the GPU allocator's statistics of a CUDA backend; other backends have
// none and return an error.
func DeviceMemory(be compute.Backend) (cuda.MemoryStats, error) { return cuda.DeviceMemory(be) }

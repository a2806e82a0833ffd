//go:build cuda

package cuda

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>

// dcl_dlopen_global opens a library so that later libraries asking for its soname find it
// already loaded (what JAX's Python side does with ctypes.CDLL(..., RTLD_GLOBAL)).
static const char* dcl_dlopen_global(const char* path) {
	void* h = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
	if (h == NULL) {
		return dlerror();
	}
	return NULL;
}

typedef int (*dcl_cuDriverGetVersion_t)(int*);

// dcl_driver_cuda returns the newest CUDA version the driver runs (cuDriverGetVersion, e.g.
// 13000), -1 when libcuda.so.1 cannot be opened, -2 when the call fails. It needs no cuInit.
static int dcl_driver_cuda(void) {
	void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
	if (h == NULL) {
		return -1;
	}
	dcl_cuDriverGetVersion_t f = (dcl_cuDriverGetVersion_t)dlsym(h, "cuDriverGetVersion");
	int v = 0;
	if (f == NULL || f(&v) != 0) {
		v = -2;
	}
	dlclose(h);
	return v;
}
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/gomlx/compute"
	"github.com/gomlx/go-xla/compute/xla"
	"github.com/gomlx/go-xla/pjrt"
)

// xlaOptions are the go-xla options every plugin is loaded with: TF32 said explicitly (left
// out, go-xla allows it on CUDA), and parameters marked as buffer donors so that a step's
// donated weights, optimiser state and batch-norm statistics are updated in place.
func xlaOptions(tf32 bool) string {
	return tf32Option(tf32) + ",buffer_donors=true"
}

// Compiled is true: this binary has the XLA backend and can load a CUDA plugin.
const Compiled = true

// Options configure Load.
type Options struct {
	// Plugin is the plugin's path; empty means FindPlugin's search.
	Plugin string
	// TF32 lets float32 convolutions and matrix products use TF32 tensor cores. Off, both ask
	// XLA for precision HIGHEST: go-xla's "tf32" option, which dcl-beam's copy of go-xla
	// (third_party/go-xla/PATCHES.md) applies to convolutions as well as to DotGeneral.
	TF32 bool
	// ConvDefaultPrecision leaves convolutions at XLA's DEFAULT precision even when TF32 is
	// off, as go-xla did before dcl-beam's patch: only for the GPU check's measurement of
	// what the patch changes.
	ConvDefaultPrecision bool
	// Env is the machine to search; nil means DefaultEnv().
	Env *Env
}

// ErrUnavailable is wrapped by every Load error.
var ErrUnavailable = errors.New("CUDA backend unavailable")

// loadMu serialises plugin loading: go-xla caches plugins per name, and the environment
// changes below are process-wide.
var loadMu sync.Mutex

// Load finds the CUDA PJRT plugin and returns go-xla's XLA backend on it. It never downloads
// (auto-install off, the plugin given by absolute path), never pre-allocates GPU memory
// (preallocate=false), opens the plugin's libraries that are off the loader path by absolute
// path first, and points XLA at the pip CUDA folder for libdevice unless XLA_FLAGS already
// names one. go-xla's own CUDA checks are turned off: they guess a folder next to the plugin
// that JAX's layout does not have.
func Load(ctx context.Context, opts Options) (compute.Backend, error) {
	env := DefaultEnv()
	if opts.Env != nil {
		env = *opts.Env
	}
	if len(deviceFiles(env.DevDir)) == 0 && opts.Plugin == "" {
		return nil, fmt.Errorf("%w: no NVIDIA GPU (no %s/nvidia0); `dcl doctor` says more", ErrUnavailable, env.DevDir)
	}
	found, err := env.Find(ctx, opts.Plugin)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	var r Report
	r.Plugin = found
	env.checkPlugin(&r)
	// preallocate=false is go-xla v0.4's default for plugins whose name says CUDA; said
	// explicitly, it holds for a plugin file named otherwise too (the whole GPU is not taken
	// at start, so PyTorch or a second process can share it, and nvidia-smi shows real use).
	config := found.Path + ",preallocate=false" + xlaOptions(opts.TF32)
	if opts.ConvDefaultPrecision {
		config += ",conv_default_precision=true"
	}
	be, _, err := load(ctx, config, nil, r.Preload, r.CUDADataDir)
	if err != nil {
		return nil, fmt.Errorf("%w: loading PJRT plugin %s: %w (run `dcl doctor` for the fix)", ErrUnavailable, found.Path, err)
	}
	if be.NumDevices() == 0 {
		be.Finalize()
		return nil, fmt.Errorf("%w: PJRT plugin %s loaded but sees no GPU", ErrUnavailable, found.Path)
	}
	return be, nil
}

// LoadCPU finds XLA's CPU PJRT plugin and returns go-xla's XLA backend on it: Load's code,
// go-xla options and patches, with the CPU client's create options (cpu_device_count) in
// place of CUDA's. Nothing is downloaded; `make deps` installs the plugin.
func LoadCPU(ctx context.Context, opts CPUOptions) (compute.Backend, error) {
	env := DefaultEnv()
	if opts.Env != nil {
		env = *opts.Env
	}
	found, err := env.FindCPUPlugin(opts.Plugin)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCPUPluginUnavailable, err)
	}
	be, _, err := load(ctx, found.Path+xlaOptions(opts.TF32), cpuCreateOptions(opts.Devices), nil, "")
	if err != nil {
		return nil, fmt.Errorf("%w: loading PJRT plugin %s: %w (run `dcl doctor` for the fix)", ErrCPUPluginUnavailable, found.Path, err)
	}
	if p := be.Platform(); p != "cpu" {
		be.Finalize()
		return nil, fmt.Errorf("%w: PJRT plugin %s is for platform %q, not cpu", ErrCPUPluginUnavailable, found.Path, p)
	}
	return be, nil
}

// cpuCreateOptions are the CPU client's create options for n devices (0: one). The count is
// said always: left out, XLA's CPU client makes one device per few cores.
func cpuCreateOptions(n int) pjrt.NamedValuesMap {
	return pjrt.NamedValuesMap{"cpu_device_count": int64(max(1, n))}
}

// probeCPU loads XLA's CPU plugin for Diagnose and lists its devices.
func probeCPU(ctx context.Context, path string) LoadResult {
	return probeWith(ctx, path, cpuCreateOptions(0), nil, "")
}

// IsXLACPU says whether be is go-xla's backend on a CPU plugin.
func IsXLACPU(be compute.Backend) bool {
	xb, ok := be.(*xla.Backend)
	return ok && xb.Platform() == "cpu"
}

// load does the loading for Load, LoadCPU and the probes; config is the plugin's absolute
// path and go-xla options ("…/xla_cuda_plugin.so,tf32=false"), create the client's create
// options beyond those go-xla derives from config.
func load(_ context.Context, config string, create pjrt.NamedValuesMap, preload []string, dataDir string) (be *xla.Backend, plugin *pjrt.Plugin, err error) {
	loadMu.Lock()
	defer loadMu.Unlock()
	xla.EnableAutoInstall(false)
	setDefaultEnv("GOMLX_NO_AUTO_INSTALL", "1")
	setDefaultEnv("GOPJRT_CUDA_CHECKS", "0")
	if dataDir != "" && !strings.Contains(os.Getenv("XLA_FLAGS"), "--xla_gpu_cuda_data_dir") {
		_ = os.Setenv("XLA_FLAGS", strings.TrimSpace(os.Getenv("XLA_FLAGS")+" --xla_gpu_cuda_data_dir="+dataDir))
	}
	// A library that fails to preload is not fatal: the plugin's own RPATH may still find
	// what it needs. Its error is kept for the message if the plugin then fails too.
	preErr := preloadLibraries(preload)
	defer func() {
		// A broken plugin can panic inside go-xla rather than return an error.
		if p := recover(); p != nil {
			be, plugin, err = nil, nil, errors.Join(fmt.Errorf("go-xla panicked: %v", p), preErr)
		}
	}()
	be, err = xla.NewWithOptions(config, create)
	if err != nil {
		return nil, nil, errors.Join(err, preErr)
	}
	path, _, _ := strings.Cut(config, ",")
	plugin, err = pjrt.GetPlugin(path) // cached by go-xla: the one just loaded
	if err != nil {
		plugin = nil
	}
	return be, plugin, nil
}

// preloadLibraries opens libraries by absolute path, dependencies first. A library whose own
// needs are not loaded yet fails; the loop retries those until a round makes no progress, so
// the order only has to be roughly right.
func preloadLibraries(paths []string) error {
	pending := append([]string(nil), paths...)
	for len(pending) > 0 {
		var again []string
		var lastErr string
		for _, p := range pending {
			cp := C.CString(p)
			msg := C.dcl_dlopen_global(cp)
			C.free(unsafe.Pointer(cp))
			if msg != nil {
				again = append(again, p)
				lastErr = C.GoString(msg)
			}
		}
		if len(again) == len(pending) {
			return fmt.Errorf("opening the plugin's libraries by path: %s", lastErr)
		}
		pending = again
	}
	return nil
}

// probe loads the plugin for Diagnose and lists its devices.
func probe(ctx context.Context, _ Env, path string, preload []string, dataDir string) LoadResult {
	return probeWith(ctx, path+",preallocate=false", nil, preload, dataDir)
}

// probeWith loads a plugin as load does, says how long that took and what it found, and
// releases it.
func probeWith(ctx context.Context, config string, create pjrt.NamedValuesMap, preload []string, dataDir string) LoadResult {
	start := time.Now()
	res := LoadResult{GoXLAPJRT: GoXLAPJRTVersion}
	be, plugin, err := load(ctx, config, create, preload, dataDir)
	res.Seconds = time.Since(start).Seconds()
	if err != nil {
		res.Error = err.Error()
		return res
	}
	defer be.Finalize()
	res.OK = true
	if plugin != nil {
		major, minor := plugin.Version()
		res.PJRTVersion = fmt.Sprintf("%d.%d", major, minor)
	}
	for i := 0; i < be.NumDevices(); i++ {
		res.Devices = append(res.Devices, be.DeviceDescription(compute.DeviceNum(i)))
	}
	return res
}

// driverCUDA asks libcuda for the newest CUDA version the driver runs (13000 for 13.0); 0 when
// it cannot.
func driverCUDA() int {
	v := int(C.dcl_driver_cuda())
	if v < 0 {
		return 0
	}
	return v
}

// setDefaultEnv sets an environment variable unless the user already did.
func setDefaultEnv(key, value string) {
	if _, ok := os.LookupEnv(key); !ok {
		_ = os.Setenv(key, value)
	}
}

// DeviceMemory returns the allocator statistics of be's first device when be is the XLA
// backend (PJRT_Device_MemoryStats, through dcl-beam's copy of go-xla).
func DeviceMemory(be compute.Backend) (MemoryStats, error) {
	xb, ok := be.(*xla.Backend)
	if !ok {
		return MemoryStats{}, fmt.Errorf("backend %s keeps no device allocator statistics", be.Name())
	}
	st, err := xb.DeviceMemoryStats(0)
	if err != nil {
		return MemoryStats{}, fmt.Errorf("reading the device's memory statistics: %w", err)
	}
	m := MemoryStats{InUseMiB: mib(st.BytesInUse)}
	if st.PeakBytesInUseSet {
		m.PeakInUseMiB = mib(st.PeakBytesInUse)
	}
	if st.PeakPoolBytesSet {
		m.PeakPoolMiB = mib(st.PeakPoolBytes)
	}
	return m, nil
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// RecordPrograms makes be, an XLA backend, keep every program it compiles from now on: its
// StableHLO text and the compiled executable's memory statistics, for tests and checks of
// what XLA was asked to compute and how it laid out memory.
func RecordPrograms(be compute.Backend) (*ProgramLog, error) {
	xb, ok := be.(*xla.Backend)
	if !ok {
		return nil, fmt.Errorf("backend %s is not XLA: it compiles no StableHLO", be.Name())
	}
	log := &ProgramLog{}
	xb.CompileObserver = func(p xla.CompiledProgram) {
		log.mu.Lock()
		defer log.mu.Unlock()
		log.programs = append(log.programs, Program{
			Name: p.Name, StableHLO: p.StableHLO, Err: p.Err,
			ArgumentBytes: p.OnDevice.Inputs, OutputBytes: p.OnDevice.Outputs,
			AliasBytes: p.OnDevice.Aliases, TempBytes: p.OnDevice.Temporary,
		})
	}
	return log, nil
}

package cuda

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Report is what `dcl doctor` says about the CUDA backend on this machine: what is compiled in,
// which plugin would load and from where, whether it loads, the GPUs it sees, and for every
// problem the fix.
type Report struct {
	// Compiled lists the backends compiled into this binary ("cpu", and "cuda" and "xla-cpu"
	// with the tag).
	Compiled []string `json:"compiled"`
	// Available is whether `--backend=cuda` would work now.
	Available bool `json:"cuda_available"`
	// Why is the first problem in one line when CUDA is not available.
	Why string `json:"why,omitempty"`
	// Plugin is the PJRT plugin that would load, and every place searched.
	Plugin Found `json:"plugin"`
	// PluginCUDA is the CUDA major version the plugin was built for (0: its path does not say).
	PluginCUDA int `json:"plugin_cuda,omitempty"`
	// Libraries are the shared libraries the plugin needs and where the loader finds them.
	Libraries []Library `json:"libraries,omitempty"`
	// Preload lists the libraries Load opens by absolute path before the plugin, because the
	// loader would not find them (the pip nvidia/*/lib folders, which JAX's Python side loads
	// the same way).
	Preload []string `json:"preload,omitempty"`
	// CUDADataDir is what Load passes XLA as --xla_gpu_cuda_data_dir (libdevice for its kernels).
	CUDADataDir string `json:"cuda_data_dir,omitempty"`
	// Driver is the NVIDIA driver, when one is loaded.
	Driver Driver `json:"driver"`
	// DeviceFiles are the /dev/nvidiaN nodes.
	DeviceFiles []string `json:"device_files"`
	// GPUs is what nvidia-smi reports, with memory, when it is installed.
	GPUs []GPU `json:"gpus,omitempty"`
	// Load is the outcome of loading the plugin (cuda builds only, when there is a device).
	Load *LoadResult `json:"load,omitempty"`
	// Problems are what stands in the way (errors) or may (warnings), each with its fix.
	Problems []Problem `json:"problems,omitempty"`
	// XLACPU is the xla-cpu backend: XLA's CPU plugin, found and loaded by the same code.
	XLACPU *CPUReport `json:"xla_cpu"`
	// Seconds is how long the diagnosis took.
	Seconds float64 `json:"seconds"`
}

// Problem is one thing wrong, with what to do about it.
type Problem struct {
	// Severity is "error" (CUDA cannot work until fixed) or "warning".
	Severity string `json:"severity"`
	What     string `json:"what"`
	Fix      string `json:"fix"`
}

// GPU is one GPU as nvidia-smi lists it.
type GPU struct {
	Index         int    `json:"index"`
	Name          string `json:"name"`
	MemoryTotalMB int    `json:"memory_total_mib"`
	MemoryUsedMB  int    `json:"memory_used_mib"`
	Driver        string `json:"driver,omitempty"`
}

// LoadResult is what loading the plugin gave.
type LoadResult struct {
	OK      bool    `json:"ok"`
	Error   string  `json:"error,omitempty"`
	Seconds float64 `json:"seconds"`
	// PJRTVersion is the C API version the plugin implements ("0.104"); GoXLAPJRT is the one
	// go-xla was written against. A newer plugin is fine (the API is backward compatible
	// through struct sizes); an older one may lack calls go-xla makes.
	PJRTVersion string   `json:"pjrt_version,omitempty"`
	GoXLAPJRT   string   `json:"go_xla_pjrt_version"`
	Devices     []string `json:"devices,omitempty"`
}

// GoXLAPJRTVersion is the PJRT C API version of go-xla v0.4.5's pjrt_c_api.h.
const GoXLAPJRTVersion = "0.104"

// DiagnoseOptions tune Diagnose.
type DiagnoseOptions struct {
	// Plugin is an explicit plugin path (--plugin), searched for when empty.
	Plugin string
	// CPUPlugin is an explicit XLA CPU plugin path, searched for when empty.
	CPUPlugin string
	// NoLoad skips loading the plugin even in a cuda build with a GPU (for a report in
	// milliseconds, or when loading is what crashes).
	NoLoad bool
}

// Diagnose inspects this machine with DefaultEnv.
func Diagnose(ctx context.Context, opts DiagnoseOptions) Report {
	return DefaultEnv().Diagnose(ctx, opts)
}

// Diagnose inspects the machine e describes. It never fails: what it cannot find or read is a
// Problem in the report. Without a GPU it reads a few files and returns in milliseconds.
func (e Env) Diagnose(ctx context.Context, opts DiagnoseOptions) Report {
	start := time.Now()
	r := Report{Compiled: []string{"cpu"}}
	if Compiled {
		r.Compiled = append(r.Compiled, "cuda", "xla-cpu")
	} else {
		r.problem("error", "this binary was built without CUDA support (no cuda build tag)",
			"build it with `make build-cuda` (CGO_ENABLED=1 go build -tags cuda ./cmd/dcl; needs gcc, nothing from CUDA) and run that binary on a machine with an NVIDIA GPU")
	}

	r.DeviceFiles = deviceFiles(e.DevDir)
	if len(r.DeviceFiles) == 0 {
		r.problem("error", fmt.Sprintf("no NVIDIA GPU: no device files %s/nvidia0, %s/nvidia1, …", e.DevDir, e.DevDir),
			"run on a machine with an NVIDIA GPU; in a container, pass the GPU in (docker run --gpus all, or the NVIDIA container toolkit)")
	}
	drv, derr := readDriver(e.DriverVersionFile)
	r.Driver = drv
	if Compiled && len(r.DeviceFiles) > 0 {
		r.Driver.CUDA = driverCUDA()
	}
	if derr != nil && len(r.DeviceFiles) > 0 {
		if errors.Is(derr, fs.ErrNotExist) {
			r.problem("error", fmt.Sprintf("no NVIDIA kernel driver loaded (%s does not exist)", e.DriverVersionFile),
				"install the NVIDIA driver (≥ 580 for CUDA 13 plugins, ≥ 525 for CUDA 12) and reboot or load the nvidia module")
		} else {
			r.problem("warning", "cannot read the driver version: "+derr.Error(), "check the NVIDIA driver with nvidia-smi")
		}
	}

	if len(r.DeviceFiles) == 0 {
		// Without a GPU the plugin cannot load anyway: skip asking python3 for its
		// site-packages (an interpreter start, up to half a second behind pyenv's shims), so
		// the answer on a CPU machine stays instant.
		e.SitePackages = nil
	}
	found, ferr := e.Find(ctx, opts.Plugin)
	r.Plugin = found
	if ferr != nil {
		fix := "pip install -U 'jax[cuda13]' (it ships jax_plugins/xla_cuda13/xla_cuda_plugin.so and the NVIDIA libraries it needs), or point at a plugin with --plugin=PATH or $" + PluginEnv + "=PATH"
		var nf *NotFoundError
		what := "no CUDA PJRT plugin found"
		if !errors.As(ferr, &nf) {
			what = ferr.Error()
			fix = "give the absolute path of an existing plugin .so file"
		}
		r.problem("error", what, fix)
	} else {
		e.checkPlugin(&r)
	}

	// Loading is the ground truth: it is tried whenever there is a plugin and a GPU, even
	// when the checks above found errors (they are guesses about the loader; a plugin that
	// loads anyway turns them into warnings).
	if Compiled && ferr == nil && len(r.DeviceFiles) > 0 && !opts.NoLoad {
		res := probe(ctx, e, r.Plugin.Path, r.Preload, r.CUDADataDir)
		r.Load = &res
		switch {
		case res.OK && len(res.Devices) == 0:
			r.problem("error", "the plugin loaded but sees no GPU",
				"check $CUDA_VISIBLE_DEVICES and that nvidia-smi lists the GPU; another process may hold it in exclusive mode")
		case res.OK:
			if w := pjrtVersionProblem(res.PJRTVersion); w != "" {
				r.problem("warning", w, "if a compile or run fails with an unimplemented PJRT call, use a plugin whose PJRT C API is at least "+GoXLAPJRTVersion+" (JAX ≥ 0.8's jax-cuda13-plugin)")
			}
			for i := range r.Problems {
				if r.Problems[i].Severity == "error" {
					r.Problems[i].Severity = "warning"
					r.Problems[i].What += " (yet the plugin loaded)"
				}
			}
		default:
			r.problem("error", "loading the plugin failed: "+res.Error, loadFix(res.Error, r.Preload))
		}
	}
	if len(r.DeviceFiles) > 0 {
		r.GPUs = nvidiaSMI(ctx)
	}
	for _, p := range r.Problems {
		if p.Severity == "error" {
			r.Why = p.What
			break
		}
	}
	r.Available = Compiled && r.Why == "" && r.Load != nil && r.Load.OK && len(r.Load.Devices) > 0
	r.XLACPU = e.diagnoseCPU(ctx, opts.CPUPlugin, opts.NoLoad)
	if !r.Available && r.Why == "" {
		r.Why = "the plugin was not loaded (--no-load)"
	}
	r.Seconds = time.Since(start).Seconds()
	return r
}

// checkPlugin looks at a found plugin: the CUDA it needs against the driver, and its libraries.
func (e Env) checkPlugin(r *Report) {
	r.PluginCUDA = CUDAMajorOf(r.Plugin.Path)
	if need := MinDriverMajor(r.PluginCUDA); need > 0 && r.Driver.Major > 0 && r.Driver.Major < need {
		older := ""
		if r.PluginCUDA > 12 {
			older = ", or use a plugin for an older CUDA (pip install 'jax[cuda12]' runs on drivers ≥ 525)"
		}
		r.problem("error", fmt.Sprintf("driver %s is too old for the plugin's CUDA %d (it needs driver ≥ %d)", r.Driver.Version, r.PluginCUDA, need),
			fmt.Sprintf("update the NVIDIA driver to %d or newer%s", need, older))
	} else if r.PluginCUDA > 0 && r.Driver.CUDA > 0 && r.Driver.CUDA/1000 < r.PluginCUDA {
		r.problem("error", fmt.Sprintf("the driver runs CUDA up to %d.%d (cuDriverGetVersion), the plugin needs CUDA %d", r.Driver.CUDA/1000, r.Driver.CUDA%1000/10, r.PluginCUDA),
			fmt.Sprintf("update the NVIDIA driver to %d or newer, or use a plugin for the driver's CUDA", MinDriverMajor(r.PluginCUDA)))
	}
	pip := e.pipNvidiaDirs(r.Plugin.Path)
	libs, err := e.walkDeps(r.Plugin.Path, pip)
	if err != nil {
		r.problem("error", err.Error(), "the plugin file is damaged or not a Linux x86-64 shared library: reinstall it (pip install -U --force-reinstall jax-cuda13-plugin)")
		return
	}
	r.Libraries = libs
	var missing, offPath []string
	var offDirs []string
	for _, l := range libs {
		switch {
		case l.Reachable:
		case l.Path != "":
			offPath = append(offPath, l.Name)
			r.Preload = append(r.Preload, l.Path)
			if d := dirOf(l.Path); !slices.Contains(offDirs, d) {
				offDirs = append(offDirs, d)
			}
		default:
			missing = append(missing, fmt.Sprintf("%s (needed by %s)", l.Name, l.NeededBy))
		}
	}
	// Preload in reverse discovery order: a library's own needs were discovered after it, so
	// they are opened first and later ones find them already loaded, by soname.
	for i, j := 0, len(r.Preload)-1; i < j; i, j = i+1, j-1 {
		r.Preload[i], r.Preload[j] = r.Preload[j], r.Preload[i]
	}
	if len(missing) > 0 {
		r.problem("error", "shared libraries the plugin needs are not installed: "+strings.Join(missing, ", "),
			"install the NVIDIA pip packages that ship them (pip install -U 'jax[cuda13]' pulls them all), or put the folders that hold them on LD_LIBRARY_PATH")
	}
	if len(offPath) > 0 {
		sev := "warning"
		what := fmt.Sprintf("%d libraries the plugin needs are not on the loader path (%s)", len(offPath), strings.Join(offPath, ", "))
		if len(offPath) == 1 {
			what = fmt.Sprintf("1 library the plugin needs is not on the loader path (%s)", offPath[0])
		}
		if Compiled {
			what += "; dcl-cuda opens them by absolute path before the plugin, as JAX does"
		}
		r.problem(sev, what, "if loading still fails: export LD_LIBRARY_PATH="+strings.Join(offDirs, ":")+"${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
	}
	// libcuda.so.1 found by dlopen itself (cuda builds) settles it; otherwise look in the
	// loader's folders.
	if r.Driver.CUDA == 0 && !libcudaReachable(e, libs) {
		r.problem("error", "libcuda.so.1 (the driver's user-space library) is not on the loader path",
			"install the driver's user-space libraries (Debian/Ubuntu: libnvidia-compute-<branch> or the NVIDIA .run installer); in a container use the NVIDIA container toolkit (docker run --gpus all)")
	}
	r.CUDADataDir = cudaDataDir(r.Plugin.Path)
}

// libcudaReachable reports whether the loader finds libcuda.so.1, which XLA opens at run time
// whether or not the plugin lists it as needed.
func libcudaReachable(e Env, libs []Library) bool {
	for _, l := range libs {
		if l.Name == "libcuda.so.1" {
			return l.Reachable
		}
	}
	w := depWalk{env: e, confDirs: readLdSoConf(e.LdSoConf, 0)}
	for _, d := range strings.Split(e.getenv("LD_LIBRARY_PATH"), ":") {
		if d != "" {
			w.ldPath = append(w.ldPath, d)
		}
	}
	return w.resolve("libcuda.so.1", "/", nil, nil).Reachable
}

// pjrtVersionProblem compares the plugin's PJRT C API version with go-xla's: the API stays
// backward compatible within major version 0 (struct sizes tell each side what the other
// knows), so a newer plugin is fine and an older one may lack calls go-xla makes.
func pjrtVersionProblem(v string) string {
	var major, minor, goMajor, goMinor int
	if _, err := fmt.Sscanf(v, "%d.%d", &major, &minor); err != nil {
		return ""
	}
	_, _ = fmt.Sscanf(GoXLAPJRTVersion, "%d.%d", &goMajor, &goMinor)
	switch {
	case major != goMajor:
		return fmt.Sprintf("the plugin speaks PJRT C API %s, go-xla %s: a different major version is not compatible", v, GoXLAPJRTVersion)
	case minor < goMinor:
		return fmt.Sprintf("the plugin speaks PJRT C API %s, older than go-xla's %s", v, GoXLAPJRTVersion)
	}
	return ""
}

// loadFix turns a load error into what to do about it.
func loadFix(msg string, preload []string) string {
	switch {
	case strings.Contains(msg, "cannot open shared object file"):
		return "a library is missing from the loader path: run `dcl doctor --json` to see which, and put the pip nvidia/*/lib folders on LD_LIBRARY_PATH"
	case strings.Contains(msg, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"), strings.Contains(msg, "CUDA_ERROR_COMPAT_NOT_SUPPORTED"),
		strings.Contains(msg, "CUDA driver version is insufficient"), strings.Contains(msg, "CUDA_ERROR_INSUFFICIENT_DRIVER"):
		return "the driver is older than the plugin's CUDA: update the driver (CUDA 13 needs ≥ 580) or use a CUDA 12 plugin"
	case strings.Contains(msg, "CUDA_ERROR_NO_DEVICE"), strings.Contains(msg, "no CUDA-capable device"):
		return "no GPU is visible to this process: check $CUDA_VISIBLE_DEVICES and nvidia-smi"
	case strings.Contains(msg, "CUDA_ERROR_OUT_OF_MEMORY"), strings.Contains(msg, "out of memory"):
		return "the GPU's memory is taken by other processes (see nvidia-smi)"
	case strings.Contains(msg, "GetPjrtApi"):
		return "the file is not a PJRT plugin"
	}
	return "see the error; run with TF_CPP_MIN_LOG_LEVEL=0 for XLA's own log"
}

func (r *Report) problem(sev, what, fix string) {
	r.Problems = append(r.Problems, Problem{Severity: sev, What: what, Fix: fix})
}

// nvidiaSMI asks nvidia-smi for each GPU's name and memory; nil when it is not installed or
// fails (the report then says nothing about memory beyond what PJRT says).
func nvidiaSMI(ctx context.Context) []GPU {
	path, err := exec.LookPath("nvidia-smi")
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--query-gpu=index,name,memory.total,memory.used,driver_version", "--format=csv,noheader,nounits").Output()
	if err != nil {
		return nil
	}
	return parseSMI(out)
}

func parseSMI(out []byte) []GPU {
	var gpus []GPU
	for _, line := range bytes.Split(out, []byte("\n")) {
		f := strings.Split(string(line), ",")
		if len(f) < 4 {
			continue
		}
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		idx, _ := strconv.Atoi(f[0])
		total, _ := strconv.Atoi(f[2])
		used, _ := strconv.Atoi(f[3])
		g := GPU{Index: idx, Name: f[1], MemoryTotalMB: total, MemoryUsedMB: used}
		if len(f) > 4 {
			g.Driver = f[4]
		}
		gpus = append(gpus, g)
	}
	return gpus
}

func dirOf(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return "/"
	}
	return p[:i]
}

// String renders the report for people, one fact a line, problems last with their fixes.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "backends compiled in: %s\n", strings.Join(r.Compiled, ", "))
	if r.Available {
		fmt.Fprintf(&b, "cuda: available (%d device(s))\n", len(r.Load.Devices))
	} else {
		fmt.Fprintf(&b, "cuda: not available (%s)\n", r.Why)
	}
	if r.Plugin.Path != "" {
		fmt.Fprintf(&b, "plugin: %s (from %s", r.Plugin.Path, r.Plugin.From)
		if r.PluginCUDA > 0 {
			fmt.Fprintf(&b, "; built for CUDA %d", r.PluginCUDA)
		}
		b.WriteString(")\n")
	} else {
		b.WriteString("plugin: none found\n")
	}
	if len(r.Plugin.Searched) > 0 {
		fmt.Fprintf(&b, "  searched: %s\n", strings.Join(r.Plugin.Searched, "\n            "))
	}
	if r.Driver.Version != "" {
		fmt.Fprintf(&b, "driver: %s (%s)", r.Driver.Version, r.Driver.Source)
		if r.Driver.CUDA > 0 {
			fmt.Fprintf(&b, ", runs CUDA up to %d.%d", r.Driver.CUDA/1000, r.Driver.CUDA%1000/10)
		}
		b.WriteString("\n")
	} else {
		b.WriteString("driver: none loaded\n")
	}
	if len(r.DeviceFiles) > 0 {
		fmt.Fprintf(&b, "device files: %s\n", strings.Join(r.DeviceFiles, " "))
	} else {
		b.WriteString("device files: none\n")
	}
	for _, g := range r.GPUs {
		fmt.Fprintf(&b, "gpu %d: %s, %d MiB (%d MiB in use)\n", g.Index, g.Name, g.MemoryTotalMB, g.MemoryUsedMB)
	}
	if len(r.Libraries) > 0 {
		n := 0
		for _, l := range r.Libraries {
			if l.Reachable {
				n++
			}
		}
		fmt.Fprintf(&b, "libraries: %d needed, %d on the loader path, %d preloaded by path\n", len(r.Libraries), n, len(r.Preload))
	}
	if r.CUDADataDir != "" {
		fmt.Fprintf(&b, "xla cuda data dir: %s\n", r.CUDADataDir)
	}
	if l := r.Load; l != nil {
		if l.OK {
			fmt.Fprintf(&b, "load: ok in %.1f s, PJRT C API %s (go-xla speaks %s)\n", l.Seconds, l.PJRTVersion, l.GoXLAPJRT)
			for i, d := range l.Devices {
				fmt.Fprintf(&b, "  device %d: %s\n", i, d)
			}
		} else {
			fmt.Fprintf(&b, "load: failed after %.1f s\n", l.Seconds)
		}
	}
	for _, p := range r.Problems {
		fmt.Fprintf(&b, "%s: %s\n  fix: %s\n", p.Severity, p.What, p.Fix)
	}
	if r.XLACPU != nil {
		b.WriteString(r.XLACPU.String())
	}
	return b.String()
}

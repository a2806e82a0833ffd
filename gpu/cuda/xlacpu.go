package cuda

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// CPUPluginEnv names the environment variable that points at XLA's CPU PJRT plugin.
const CPUPluginEnv = "DCL_XLA_CPU_PLUGIN"

// CPUPluginFile is the file name of XLA's CPU PJRT plugin, in the folder `make deps` puts it
// in and in $PJRT_PLUGIN_LIBRARY_PATH (go-xla's name for the "cpu" plugin).
const CPUPluginFile = "pjrt_c_api_cpu_plugin.so"

// ErrCPUPluginUnavailable is wrapped by every LoadCPU error.
var ErrCPUPluginUnavailable = errors.New("xla-cpu backend unavailable")

// CPUOptions configure LoadCPU: XLA's CPU plugin through the same loader, options and patched
// go-xla as CUDA's.
type CPUOptions struct {
	// Plugin is the plugin's path; empty means FindCPUPlugin's search.
	Plugin string
	// Devices is the number of CPU devices the client creates (XLA's cpu_device_count; 0:
	// one). Several are virtual devices on the same cores, for SPMD programs without GPUs.
	Devices int
	// TF32 is passed to go-xla as for CUDA, so that the program compiled here is the one a
	// GPU would run with the same precision (the CPU has no TF32 arithmetic of its own).
	TF32 bool
	// Env is the machine to search; nil means DefaultEnv().
	Env *Env
}

// CPUPluginDir is the folder `make deps` (scripts/deps-xla-cpu.sh) installs the plugin in:
// dcl-beam/xla-cpu under the user's cache folder ($XDG_CACHE_HOME, else ~/.cache).
func CPUPluginDir() string {
	return DefaultEnv().cpuPluginDir()
}

func (e Env) cpuPluginDir() string {
	if e.CacheDir == "" {
		return ""
	}
	return filepath.Join(e.CacheDir, "dcl-beam", "xla-cpu")
}

// CPUPluginNotFoundError says that no XLA CPU plugin was found and lists where it looked.
type CPUPluginNotFoundError struct {
	Searched []string
}

func (e *CPUPluginNotFoundError) Error() string {
	return fmt.Sprintf("no XLA CPU PJRT plugin found; looked in: %s. Install it with `make deps-xla-cpu` "+
		"(pinned wheel, fetched with pip), or give one with --plugin=PATH or $%s=PATH",
		strings.Join(e.Searched, "; "), CPUPluginEnv)
}

// FindCPUPlugin is where LoadCPU takes XLA's CPU plugin from: explicit (a path that must
// exist), else the first found of $DCL_XLA_CPU_PLUGIN, pjrt_c_api_cpu_plugin.so in
// $PJRT_PLUGIN_LIBRARY_PATH, and the one `make deps` installed in CPUPluginDir. When none is
// found the error is a *CPUPluginNotFoundError listing where it looked.
func (e Env) FindCPUPlugin(explicit string) (Found, error) {
	if explicit != "" {
		return checkPlugin(explicit, "--plugin")
	}
	if p := e.getenv(CPUPluginEnv); p != "" {
		return checkPlugin(p, "$"+CPUPluginEnv)
	}
	var searched []string
	for _, dir := range filepath.SplitList(e.getenv("PJRT_PLUGIN_LIBRARY_PATH")) {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, CPUPluginFile)
		searched = append(searched, p)
		if isFile(p) {
			return Found{Path: p, From: "$PJRT_PLUGIN_LIBRARY_PATH", Searched: searched}, nil
		}
	}
	if dir := e.cpuPluginDir(); dir != "" {
		p := filepath.Join(dir, CPUPluginFile)
		searched = append(searched, p)
		if isFile(p) {
			return Found{Path: p, From: "make deps", Searched: searched}, nil
		}
	}
	return Found{Searched: searched}, &CPUPluginNotFoundError{Searched: searched}
}

// CPUPluginWheel is the wheel a plugin came from ("lammps-jax-pjrt-cpu==0.11.2 sha256:…"), as
// `make deps` writes it beside the plugin; empty for a plugin installed otherwise.
func CPUPluginWheel(plugin string) string {
	raw, err := os.ReadFile(plugin + ".wheel")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(raw))
}

// CPUReport is what `dcl doctor` says about the xla-cpu backend.
type CPUReport struct {
	// Available is whether `--backend=xla-cpu` would work now.
	Available bool `json:"available"`
	// Why is the problem in one line when it is not available.
	Why string `json:"why,omitempty"`
	// Fix says what to do about it.
	Fix    string `json:"fix,omitempty"`
	Plugin Found  `json:"plugin"`
	// Wheel is the pinned wheel `make deps` took the plugin from.
	Wheel string `json:"wheel,omitempty"`
	// Load is the outcome of loading the plugin (cuda builds only).
	Load *LoadResult `json:"load,omitempty"`
}

// diagnoseCPU finds, and unless noLoad loads, XLA's CPU plugin.
func (e Env) diagnoseCPU(ctx context.Context, explicit string, noLoad bool) *CPUReport {
	r := &CPUReport{}
	found, err := e.FindCPUPlugin(explicit)
	r.Plugin = found
	if err != nil {
		r.Why = err.Error()
		r.Fix = "make deps-xla-cpu (or scripts/deps-xla-cpu.sh)"
		return r
	}
	r.Wheel = CPUPluginWheel(found.Path)
	switch {
	case !Compiled:
		r.Why = "this binary was built without the XLA backend (no cuda build tag)"
		r.Fix = "build it with `make build-cuda` (CGO_ENABLED=1 go build -tags cuda ./cmd/dcl)"
	case noLoad:
		r.Why = "the plugin was not loaded (--no-load)"
	default:
		res := probeCPU(ctx, found.Path)
		r.Load = &res
		if !res.OK {
			r.Why = "loading the plugin failed: " + res.Error
			r.Fix = "reinstall it: rm -r " + filepath.Dir(found.Path) + " && make deps-xla-cpu"
		}
	}
	r.Available = r.Why == ""
	return r
}

// String renders the report's lines for `dcl doctor`.
func (r *CPUReport) String() string {
	var b strings.Builder
	if r.Available {
		fmt.Fprintf(&b, "xla-cpu: available (%d device(s))\n", len(r.Load.Devices))
	} else {
		fmt.Fprintf(&b, "xla-cpu: not available (%s)\n", r.Why)
	}
	if r.Plugin.Path != "" {
		fmt.Fprintf(&b, "  plugin: %s (from %s)\n", r.Plugin.Path, r.Plugin.From)
	}
	if r.Wheel != "" {
		fmt.Fprintf(&b, "  wheel: %s\n", r.Wheel)
	}
	if l := r.Load; l != nil && l.OK {
		fmt.Fprintf(&b, "  load: ok in %.1f s, PJRT C API %s (go-xla speaks %s)\n", l.Seconds, l.PJRTVersion, l.GoXLAPJRT)
	}
	if r.Fix != "" {
		fmt.Fprintf(&b, "  fix: %s\n", r.Fix)
	}
	return b.String()
}

// since is the seconds elapsed from start, for the load reports.
func since(start time.Time) float64 { return time.Since(start).Seconds() }

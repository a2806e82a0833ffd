package cuda

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// PluginEnv names the environment variable that points at a CUDA PJRT plugin.
const PluginEnv = "DCL_PJRT_PLUGIN"

// Env is everything the plugin search and the diagnosis read from the machine. Tests point it
// at fake trees in a temporary folder; DefaultEnv reads the real machine.
type Env struct {
	// Getenv reads an environment variable.
	Getenv func(string) string
	// PythonRoots are prefixes under which lib/python3*/{site,dist}-packages are globbed for
	// JAX's CUDA plugin and the pip nvidia/* libraries.
	PythonRoots []string
	// DriverVersionFile is the kernel driver's version file (/proc/driver/nvidia/version).
	DriverVersionFile string
	// DevDir holds the GPU device files (/dev/nvidia0, …).
	DevDir string
	// LdSoConf is the dynamic loader's configuration (/etc/ld.so.conf, with its includes).
	LdSoConf string
	// SystemLibDirs are the loader's built-in folders, searched after ld.so.conf's.
	SystemLibDirs []string
	// SitePackages, when set, names more site-packages folders, searched last (DefaultEnv asks
	// python3 for its own, so a Python installed anywhere is found).
	SitePackages func(context.Context) []string
	// CacheDir is the user's cache folder (os.UserCacheDir), under which `make deps` puts
	// XLA's CPU plugin (CPUPluginDir); empty: nowhere.
	CacheDir string
}

// DefaultEnv reads the process environment and the usual Python installations.
func DefaultEnv() Env {
	home, _ := os.UserHomeDir()
	roots := []string{os.Getenv("VIRTUAL_ENV"), os.Getenv("CONDA_PREFIX")}
	if home != "" {
		roots = append(roots, filepath.Join(home, ".local"))
	}
	roots = append(roots, "/usr/local", "/usr", "/opt/conda", "/opt/venv")
	cache, _ := os.UserCacheDir()
	return Env{
		CacheDir:          cache,
		Getenv:            os.Getenv,
		PythonRoots:       roots,
		DriverVersionFile: "/proc/driver/nvidia/version",
		DevDir:            "/dev",
		LdSoConf:          "/etc/ld.so.conf",
		SystemLibDirs:     []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"},
		SitePackages:      python3SitePackages,
	}
}

// python3SitePackages asks python3 (if there is one on $PATH) for its site-packages folders.
// It costs one interpreter start, tens of milliseconds, and only happens when the usual
// places hold no plugin.
func python3SitePackages(ctx context.Context) []string {
	py, err := exec.LookPath("python3")
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, py, "-c",
		"import site, sysconfig; print('\\n'.join([sysconfig.get_paths()['purelib']] + site.getsitepackages() + [site.getusersitepackages()]))").Output()
	if err != nil {
		return nil
	}
	var dirs []string
	for _, d := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if d = strings.TrimSpace(d); d != "" && !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

func (e Env) getenv(k string) string {
	if e.Getenv == nil {
		return ""
	}
	return e.Getenv(k)
}

// NotFoundError says that no PJRT plugin was found and lists every place searched.
type NotFoundError struct {
	Searched []string
}

func (e *NotFoundError) Error() string {
	return fmt.Sprintf("no CUDA PJRT plugin found; looked in: %s. Give one with --plugin=PATH or $%s=PATH "+
		"(on machines with JAX: pip install 'jax[cuda13]' ships jax_plugins/xla_cuda13/xla_cuda_plugin.so)",
		strings.Join(e.Searched, "; "), PluginEnv)
}

// Found is a plugin found by the search: its absolute path, where the search took it from,
// and every place looked at before it.
type Found struct {
	Path     string   `json:"path"`
	From     string   `json:"from"`
	Searched []string `json:"searched"`
}

// FindPlugin returns the CUDA PJRT plugin to load: explicit (a path that must exist), else the
// first found of $DCL_PJRT_PLUGIN, $GOMLX_BACKEND=xla:/absolute/path, pjrt_c_api_cuda_plugin.so
// in $PJRT_PLUGIN_LIBRARY_PATH, and JAX's jax_plugins/xla_cuda*/xla_cuda_plugin.so under the
// Python site-packages ($VIRTUAL_ENV, $CONDA_PREFIX, ~/.local, /usr/local, /usr, /opt/conda).
// When none is found the error is a *NotFoundError listing where it looked.
func FindPlugin(ctx context.Context, explicit string) (string, error) {
	f, err := DefaultEnv().Find(ctx, explicit)
	return f.Path, err
}

// Find is FindPlugin on e, saying where the plugin came from and where it looked.
func (e Env) Find(ctx context.Context, explicit string) (Found, error) {
	if explicit != "" {
		return checkPlugin(explicit, "--plugin")
	}
	if p := e.getenv(PluginEnv); p != "" {
		return checkPlugin(p, "$"+PluginEnv)
	}
	if cfg := e.getenv("GOMLX_BACKEND"); strings.HasPrefix(cfg, "xla:") {
		if p, _, _ := strings.Cut(strings.TrimPrefix(cfg, "xla:"), ","); filepath.IsAbs(p) {
			return checkPlugin(p, "$GOMLX_BACKEND")
		}
	}
	var searched []string
	for _, dir := range filepath.SplitList(e.getenv("PJRT_PLUGIN_LIBRARY_PATH")) {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, "pjrt_c_api_cuda_plugin.so")
		searched = append(searched, p)
		if isFile(p) {
			return Found{Path: p, From: "$PJRT_PLUGIN_LIBRARY_PATH", Searched: searched}, nil
		}
	}
	for _, pat := range e.sitePackagePatterns("jax_plugins/xla_cuda*/xla_cuda_plugin.so") {
		if err := ctx.Err(); err != nil {
			return Found{Searched: searched}, err
		}
		searched = append(searched, pat)
		matches, _ := filepath.Glob(pat)
		// The newest CUDA first: xla_cuda13 before xla_cuda12 (numerically, so 13 beats 9).
		slices.SortFunc(matches, func(a, b string) int { return CUDAMajorOf(b) - CUDAMajorOf(a) })
		for _, m := range matches {
			if isFile(m) {
				return Found{Path: m, From: "JAX's CUDA plugin in the Python site-packages", Searched: searched}, nil
			}
		}
	}
	if e.SitePackages != nil {
		for _, sp := range e.SitePackages(ctx) {
			pat := filepath.Join(sp, "jax_plugins/xla_cuda*/xla_cuda_plugin.so")
			if slices.Contains(searched, pat) {
				continue
			}
			searched = append(searched, pat)
			matches, _ := filepath.Glob(pat)
			slices.SortFunc(matches, func(a, b string) int { return CUDAMajorOf(b) - CUDAMajorOf(a) })
			for _, m := range matches {
				if isFile(m) {
					return Found{Path: m, From: "JAX's CUDA plugin in python3's site-packages", Searched: searched}, nil
				}
			}
		}
	}
	return Found{Searched: searched}, &NotFoundError{Searched: searched}
}

// sitePackagePatterns returns glob patterns for rel under every Python root's site-packages.
func (e Env) sitePackagePatterns(rel string) []string {
	var patterns []string
	for _, root := range e.PythonRoots {
		if root == "" {
			continue
		}
		for _, sub := range []string{"lib/python3*/site-packages", "lib/python3*/dist-packages", "lib/python3/dist-packages"} {
			patterns = append(patterns, filepath.Join(root, sub, rel))
		}
	}
	return slices.Compact(patterns)
}

// checkPlugin returns the absolute path of a plugin named by the user, or why it is unusable.
func checkPlugin(path, from string) (Found, error) {
	f := Found{From: from, Searched: []string{path}}
	abs, err := filepath.Abs(path)
	if err != nil {
		return f, fmt.Errorf("PJRT plugin %s from %s: %w", path, from, err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		return f, fmt.Errorf("PJRT plugin from %s: %w", from, err)
	}
	if st.IsDir() {
		return f, fmt.Errorf("PJRT plugin %s from %s is a folder, not a .so file", abs, from)
	}
	f.Path = abs
	return f, nil
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

var cudaMajorRE = regexp.MustCompile(`(?i)cuda[_-]?(\d+)`)

// CUDAMajorOf reads the CUDA major version a plugin was built for from its path, as JAX names
// them (jax_plugins/xla_cuda13/…, jax_cuda12_plugin): 13 and 12 there, 0 when the path does not
// say. The last mention wins, so a plugin copied into a folder called cuda11-old is read by
// its own folder's name.
func CUDAMajorOf(path string) int {
	m := cudaMajorRE.FindAllStringSubmatch(path, -1)
	if len(m) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(m[len(m)-1][1])
	return n
}

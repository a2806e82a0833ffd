package gpu

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// PluginEnv names the environment variable that points at a CUDA PJRT plugin.
const PluginEnv = "DCL_PJRT_PLUGIN"

// pluginSearch is where FindPlugin looks; tests replace the environment and the roots.
type pluginSearch struct {
	getenv func(string) string
	// pythonRoots are prefixes under which lib/python3*/{site,dist}-packages are globbed.
	pythonRoots []string
}

// defaultSearch reads the process environment and the usual Python installations.
func defaultSearch() pluginSearch {
	home, _ := os.UserHomeDir()
	roots := []string{os.Getenv("VIRTUAL_ENV"), os.Getenv("CONDA_PREFIX"), filepath.Join(home, ".local"),
		"/usr/local", "/usr", "/opt/conda", "/opt/venv"}
	return pluginSearch{getenv: os.Getenv, pythonRoots: roots}
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

// FindPlugin returns the CUDA PJRT plugin to load: explicit (a path that must exist), else the
// first found of $DCL_PJRT_PLUGIN, $GOMLX_BACKEND=xla:/absolute/path, pjrt_c_api_cuda_plugin.so
// in $PJRT_PLUGIN_LIBRARY_PATH, and JAX's jax_plugins/xla_cuda*/xla_cuda_plugin.so under the
// Python site-packages ($VIRTUAL_ENV, $CONDA_PREFIX, ~/.local, /usr/local, /usr, /opt/conda).
// When none is found the error is a *NotFoundError listing where it looked.
func FindPlugin(ctx context.Context, explicit string) (string, error) {
	return defaultSearch().find(ctx, explicit)
}

func (s pluginSearch) find(ctx context.Context, explicit string) (string, error) {
	if explicit != "" {
		return checkPlugin(explicit, "--plugin")
	}
	if p := s.getenv(PluginEnv); p != "" {
		return checkPlugin(p, "$"+PluginEnv)
	}
	if cfg := s.getenv("GOMLX_BACKEND"); strings.HasPrefix(cfg, "xla:") {
		if p, _, _ := strings.Cut(strings.TrimPrefix(cfg, "xla:"), ","); filepath.IsAbs(p) {
			return checkPlugin(p, "$GOMLX_BACKEND")
		}
	}
	var searched []string
	for _, dir := range filepath.SplitList(s.getenv("PJRT_PLUGIN_LIBRARY_PATH")) {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, "pjrt_c_api_cuda_plugin.so")
		searched = append(searched, p)
		if isFile(p) {
			return p, nil
		}
	}
	var patterns []string
	for _, root := range s.pythonRoots {
		if root == "" {
			continue
		}
		for _, sub := range []string{"lib/python3*/site-packages", "lib/python3*/dist-packages", "lib/python3/dist-packages"} {
			patterns = append(patterns, filepath.Join(root, sub, "jax_plugins/xla_cuda*/xla_cuda_plugin.so"))
		}
	}
	for _, pat := range slices.Compact(patterns) {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		searched = append(searched, pat)
		matches, _ := filepath.Glob(pat)
		slices.Sort(matches)
		// The newest CUDA first: xla_cuda13 before xla_cuda12.
		slices.Reverse(matches)
		for _, m := range matches {
			if isFile(m) {
				return m, nil
			}
		}
	}
	return "", &NotFoundError{Searched: searched}
}

// checkPlugin returns the absolute path of a plugin named by the user, or why it is unusable.
func checkPlugin(path, from string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("PJRT plugin %s from %s: %w", path, from, err)
	}
	st, err := os.Stat(abs)
	if err != nil {
		return "", fmt.Errorf("PJRT plugin from %s: %w", from, err)
	}
	if st.IsDir() {
		return "", fmt.Errorf("PJRT plugin %s from %s is a folder, not a .so file", abs, from)
	}
	return abs, nil
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

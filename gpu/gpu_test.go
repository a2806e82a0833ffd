package gpu

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dcl-beam/dcl-beam/gpu/cpu"
)

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func TestParseBackend(t *testing.T) {
	for _, c := range []struct {
		give string
		want Backend
		err  bool
	}{{"cpu", CPU, false}, {"CUDA", CUDA, false}, {" auto ", Auto, false}, {"", Auto, false}, {"tpu", "", true}} {
		got, err := ParseBackend(c.give)
		if (err != nil) != c.err || got != c.want {
			t.Errorf("ParseBackend(%q) = %q, %v; want %q, error %v", c.give, got, err, c.want, c.err)
		}
	}
}

func TestNewCPU(t *testing.T) {
	be, err := New(context.Background(), Options{Backend: CPU, Threads: 1, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Finalize()
	if be.Name() != cpu.BackendName {
		t.Fatalf("backend %q, want %q", be.Name(), cpu.BackendName)
	}
}

// TestNewCUDAWithoutIt checks that asking for CUDA where it cannot work fails with a message
// that says what is missing, and that auto falls back to the CPU.
func TestNewCUDAWithoutIt(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope.so")
	_, err := New(context.Background(), Options{Backend: CUDA, Plugin: missing, Logger: quietLogger()})
	if !errors.Is(err, ErrCUDAUnavailable) && cudaCompiled {
		t.Fatalf("error %v does not wrap ErrCUDAUnavailable", err)
	}
	if err == nil {
		t.Fatal("no error for CUDA with a missing plugin")
	}
	if !cudaCompiled && !strings.Contains(err.Error(), "-tags cuda") {
		t.Errorf("error %q does not say how to build with CUDA", err)
	}
	if cudaCompiled && !strings.Contains(err.Error(), missing) {
		t.Errorf("error %q does not name the missing plugin", err)
	}
	be, err := New(context.Background(), Options{Backend: Auto, Plugin: missing, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer be.Finalize()
	if be.Name() != cpu.BackendName {
		t.Fatalf("auto without CUDA chose %q, want the CPU", be.Name())
	}
}

// TestFindPlugin plants plugins in a fake file tree and checks the search order and the list
// of places reported when nothing is found.
func TestFindPlugin(t *testing.T) {
	dir := t.TempDir()
	touch := func(rel string) string {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("not really a plugin"), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	explicit := touch("explicit/plugin.so")
	fromEnv := touch("env/plugin.so")
	fromGoMLX := touch("gomlx/plugin.so")
	fromPath := touch("pjrt/pjrt_c_api_cuda_plugin.so")
	jax12 := touch("venv/lib/python3.12/site-packages/jax_plugins/xla_cuda12/xla_cuda_plugin.so")
	jax13 := touch("venv/lib/python3.12/site-packages/jax_plugins/xla_cuda13/xla_cuda_plugin.so")
	_ = jax12
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	venv := []string{filepath.Join(dir, "venv")}
	cases := []struct {
		name     string
		explicit string
		env      map[string]string
		roots    []string
		want     string
	}{
		{"explicit first", explicit, map[string]string{PluginEnv: fromEnv}, venv, explicit},
		{"DCL_PJRT_PLUGIN", "", map[string]string{PluginEnv: fromEnv, "GOMLX_BACKEND": "xla:" + fromGoMLX}, venv, fromEnv},
		{"GOMLX_BACKEND", "", map[string]string{"GOMLX_BACKEND": "xla:" + fromGoMLX + ",tf32"}, venv, fromGoMLX},
		{"PJRT_PLUGIN_LIBRARY_PATH", "", map[string]string{"PJRT_PLUGIN_LIBRARY_PATH": filepath.Dir(fromPath)}, venv, fromPath},
		{"JAX, newest CUDA", "", map[string]string{"GOMLX_BACKEND": "xla:cuda"}, venv, jax13},
	}
	for _, c := range cases {
		got, err := pluginSearch{getenv: env(c.env), pythonRoots: c.roots}.find(context.Background(), c.explicit)
		if err != nil || got != c.want {
			t.Errorf("%s: got %q, %v; want %q", c.name, got, err, c.want)
		}
	}
	_, err := pluginSearch{getenv: env(nil), pythonRoots: []string{filepath.Join(dir, "empty")}}.find(context.Background(), "")
	var nf *NotFoundError
	if !errors.As(err, &nf) || len(nf.Searched) == 0 || !strings.Contains(err.Error(), filepath.Join(dir, "empty")) {
		t.Fatalf("error %v does not list where it looked", err)
	}
	if _, err := (pluginSearch{getenv: env(nil)}).find(context.Background(), filepath.Join(dir, "missing.so")); err == nil || !strings.Contains(err.Error(), "missing.so") {
		t.Fatalf("a missing explicit plugin gave %v", err)
	}
	if _, err := (pluginSearch{getenv: env(nil)}).find(context.Background(), dir); err == nil {
		t.Fatal("a folder given as plugin was accepted")
	}
}
